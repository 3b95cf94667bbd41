//! The `messages.jsonl` line format: one JSON object per message, and the split of a file into
//! valid messages and invalid lines (which are archived and reported verbatim, never dropped).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::Date;

/// One line of a session's `messages.jsonl`.
///
/// Besides OpenViking's `role` and `content` it accepts an `id` and a `time` (also read from
/// `created_at` or `timestamp`, as a string or epoch number). Every other field is kept in `extra`
/// so re-serialising a message loses nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Value")]
pub struct Message {
    pub role: String,
    pub content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Message {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
            id: None,
            time: None,
            extra: Map::new(),
        }
    }

    /// Parse one `messages.jsonl` line; the error says what is wrong with it.
    pub fn parse_line(line: &str) -> Result<Message, String> {
        let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
        Message::try_from(v)
    }

    /// The message as one `messages.jsonl` line (no newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("a Message always serialises")
    }

    /// The day this message was sent, from `time`, `created_at` or `timestamp`.
    pub fn date(&self) -> Option<Date> {
        if let Some(d) = self.time.as_deref().and_then(Date::from_time) {
            return Some(d);
        }
        ["created_at", "timestamp"]
            .iter()
            .find_map(|k| match self.extra.get(*k) {
                Some(Value::String(s)) => Date::from_time(s),
                Some(Value::Number(n)) => Date::from_time(&n.to_string()),
                _ => None,
            })
    }
}

impl TryFrom<Value> for Message {
    type Error = String;

    fn try_from(v: Value) -> Result<Message, String> {
        let Value::Object(mut map) = v else {
            return Err("not a JSON object".into());
        };
        let role = match map.remove("role") {
            Some(Value::String(r)) if !r.trim().is_empty() => r,
            Some(_) => return Err("\"role\" is not a non-empty string".into()),
            None => return Err("no \"role\"".into()),
        };
        let content = match map.remove("content") {
            Some(Value::String(s)) => s,
            // OpenAI's content parts: keep the text ones.
            Some(Value::Array(parts)) => text_of_parts(&parts)?,
            Some(_) => return Err("\"content\" is not a string or a list of parts".into()),
            None => match map.get("parts") {
                Some(Value::Array(parts)) => text_of_parts(parts)?,
                _ => return Err("no \"content\"".into()),
            },
        };
        let id = match map.remove("id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(Value::Number(n)) => Some(n.to_string()),
            Some(_) => return Err("\"id\" is not a string or number".into()),
        };
        // `created_at` / `timestamp` (other writers' names) stay in `extra` so they round-trip;
        // [`Message::date`] falls back to them.
        let time = match map.remove("time") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(Value::Number(n)) => Some(n.to_string()),
            Some(_) => return Err("\"time\" is not a string or number".into()),
        };
        Ok(Message {
            role,
            content,
            id,
            time,
            extra: map,
        })
    }
}

fn text_of_parts(parts: &[Value]) -> Result<String, String> {
    let texts: Vec<&str> = parts
        .iter()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect();
    if texts.is_empty() && !parts.is_empty() {
        return Err("content parts hold no text".into());
    }
    Ok(texts.join("\n"))
}

/// A `messages.jsonl` line that is not a valid message: archived and reported verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvalidLine {
    /// 1-based line number in the file.
    pub line: usize,
    pub text: String,
    pub error: String,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParsedMessages {
    pub messages: Vec<Message>,
    pub invalid: Vec<InvalidLine>,
}

/// Split a `messages.jsonl` text into valid messages and invalid lines. Blank lines carry
/// nothing and are skipped; every other line ends up in exactly one of the two lists.
pub fn parse_messages(text: &str) -> ParsedMessages {
    let mut out = ParsedMessages::default();
    for (i, raw) in text.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.trim().is_empty() {
            continue;
        }
        match Message::parse_line(line) {
            Ok(m) => out.messages.push(m),
            Err(error) => out.invalid.push(InvalidLine {
                line: i + 1,
                text: line.to_string(),
                error,
            }),
        }
    }
    out
}
