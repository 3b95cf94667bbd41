//! A memory file's fields: what it records about itself beside its facts. OpenViking keeps
//! them where its readers look for them, a trailing HTML comment
//! (`\n\n<!-- MEMORY_FIELDS\n{json}\n-->`, `openviking/session/memory/utils/memory_file_utils.py`),
//! which its `raw=false` readers strip and markdown renderers hide; so do we, and both read one
//! file the same way. Fields vikingfs does not know are kept as they were.
//!
//! vikingfs's field is `sources`: one `{session, archive, messages: [first id, last id]}` per
//! session commit that added facts to the file — its provenance, which `vikingfs session
//! rollback` reads to take exactly one commit's facts out again.

use serde_json::{Map, Value};

const OPEN: &str = "<!-- MEMORY_FIELDS";
const CLOSE: &str = "-->";

/// `text` without its fields block, and the fields (an object; `None` when there is none or
/// it is not a JSON object, in which case the text is all body).
pub fn split(text: &str) -> (&str, Option<Map<String, Value>>) {
    let trimmed = text.trim_end();
    let Some(start) = trimmed.rfind(OPEN) else {
        return (text, None);
    };
    let Some(inner) = trimmed[start + OPEN.len()..].strip_suffix(CLOSE) else {
        return (text, None);
    };
    match serde_json::from_str::<Value>(inner.trim()) {
        Ok(Value::Object(m)) => (trimmed[..start].trim_end_matches('\n'), Some(m)),
        _ => (text, None),
    }
}

/// `body` with `fields` after it (none when empty), as OpenViking writes them: a `-->` in a
/// value would close the comment early, so every `>` is written `\u003e`.
pub fn join(body: &str, fields: &Map<String, Value>) -> String {
    let mut out = body.trim_end_matches('\n').to_string();
    out.push('\n');
    if fields.is_empty() {
        return out;
    }
    let json = serde_json::to_string_pretty(fields)
        .expect("fields serialise")
        .replace('>', "\\u003e");
    out.push_str(&format!("\n{OPEN}\n{json}\n{CLOSE}\n"));
    out
}

/// `text` with `source` in its `sources` (once: a resumed commit adds it again).
pub fn add_source(text: &str, source: Value) -> String {
    let (body, fields) = split(text);
    let mut fields = fields.unwrap_or_default();
    let sources = fields
        .entry("sources")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !sources.is_array() {
        *sources = Value::Array(Vec::new());
    }
    let list = sources.as_array_mut().expect("an array");
    if !list.contains(&source) {
        list.push(source);
    }
    join(body, &fields)
}

/// `text` without the sources of `session`'s archive `archive`.
pub fn remove_source(text: &str, session: &str, archive: u32) -> String {
    let (body, fields) = split(text);
    let Some(mut fields) = fields else {
        return text.to_string();
    };
    if let Some(Value::Array(list)) = fields.get_mut("sources") {
        list.retain(|s| !(s["session"] == session && s["archive"] == archive));
        if list.is_empty() {
            fields.remove("sources");
        }
    }
    join(body, &fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_round_trip_after_the_body() {
        let body = "# Title\n\n- a fact\n";
        let t = add_source(body, json!({"session": "s1", "archive": 1}));
        assert!(t.starts_with(body), "{t}");
        assert!(t.ends_with("-->\n"), "{t}");
        let (b, f) = split(&t);
        assert_eq!(b, "# Title\n\n- a fact");
        assert_eq!(f.unwrap()["sources"][0]["session"], "s1");
        // Once only, however often a resumed job adds it.
        let again = add_source(&t, json!({"session": "s1", "archive": 1}));
        assert_eq!(again, t);
        assert_eq!(remove_source(&t, "s1", 1), body);
    }

    #[test]
    fn unknown_fields_and_a_closing_marker_in_a_value_survive() {
        let t =
            "# T\n\n- x\n\n<!-- MEMORY_FIELDS\n{\"version\": 3, \"note\": \"a \\u003e b\"}\n-->\n";
        let out = add_source(t, json!({"session": "s", "archive": 2, "m": "-->"}));
        let (_, f) = split(&out);
        let f = f.unwrap();
        assert_eq!(f["version"], 3);
        assert_eq!(f["note"], "a > b");
        assert_eq!(f["sources"][0]["m"], "-->");
        assert_eq!(out.matches("-->").count(), 1, "{out}");
    }

    #[test]
    fn a_comment_that_is_not_fields_is_body() {
        let t = "# T\n\n<!-- MEMORY_FIELDS\nnot json\n-->\n";
        assert_eq!(split(t), (t, None));
    }
}
