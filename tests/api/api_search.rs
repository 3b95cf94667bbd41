//! `search/find`, `search/search` (list and context modes), `search/grep` and `search/glob`
//! over plain HTTP against a real `vikingfs serve`: OpenViking's shapes, the filters, the
//! errors, and that a user key never finds another user's files.

use std::io::Write;
use std::process::Stdio;

use serde_json::{json, Value};

use crate::support::serve::Served;

/// Write `text` to `uri` (`resources/a/b.md`, relative to the account root) through
/// `vikingfs write`, the locked write the daemon's workers then derive from.
pub fn put(s: &Served, rel: &str, text: &str) {
    let path = s.ws.join("viking/default").join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut child = crate::support::vikingfs(&s.home)
        .arg("--workspace")
        .arg(&s.ws)
        .args(["write", &format!("viking://{rel}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "write {rel}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `POST /api/v1/system/wait`: every job derived.
pub fn wait(s: &Served, headers: &[&str]) {
    let (code, v) = s.json(
        "POST",
        "/api/v1/system/wait",
        headers,
        &json!({"timeout": 120}),
    );
    assert_eq!(
        (code, v["result"]["drained"].as_bool()),
        (200, Some(true)),
        "{v}"
    );
}

/// A POST with a JSON body: the status and the envelope.
pub fn post(s: &Served, path: &str, headers: &[&str], body: Value) -> (u16, Value) {
    s.json("POST", path, headers, &body)
}

/// The `result` of an answer that must be 200.
pub fn result(answer: (u16, Value)) -> Value {
    let (code, v) = answer;
    assert_eq!((code, v["status"].as_str()), (200, Some("ok")), "{v}");
    v["result"].clone()
}

/// The error code of an answer that must fail with `status`.
pub fn error(answer: (u16, Value), status: u16) -> String {
    let (code, v) = answer;
    assert_eq!((code, v["status"].as_str()), (status, Some("error")), "{v}");
    v["error"]["code"].as_str().unwrap().to_string()
}

/// Every hit of a find result, with the bucket it came in.
fn hits(r: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for b in ["memories", "resources", "skills"] {
        for h in r[b].as_array().unwrap_or_else(|| panic!("no {b} in {r}")) {
            out.push((b.to_string(), h.clone()));
        }
    }
    out
}

fn uris(r: &Value) -> Vec<String> {
    hits(r)
        .into_iter()
        .map(|(_, h)| h["uri"].as_str().unwrap().to_string())
        .collect()
}

fn corpus(s: &Served) {
    put(
        s,
        "resources/docs/alpha.md",
        "# Alpha guide\n\nThe alpha service handles authentication tokens and login flows.\n",
    );
    put(
        s,
        "resources/docs/sub/beta.md",
        "# Beta notes\n\nBeta covers vector embeddings and cosine similarity.\n",
    );
    put(
        s,
        "user/default/memories/preferences/editor.md",
        "The user rotates authentication tokens weekly and prefers dark mode.\n",
    );
    put(
        s,
        "agent/skills/rotate/SKILL.md",
        "# Rotate\n\nA skill to rotate authentication tokens safely.\n",
    );
    wait(s, &[]);
}

const FIND: &str = "/api/v1/search/find";
const SEARCH: &str = "/api/v1/search/search";

#[test]
fn find_answers_openvikings_shape_split_by_kind() {
    let s = Served::new();
    corpus(&s);
    let r = result(post(
        &s,
        FIND,
        &[],
        json!({"query": "authentication tokens", "target_uri": "", "limit": 10}),
    ));
    let all = hits(&r);
    assert_eq!(r["total"].as_u64(), Some(all.len() as u64), "{r}");
    for (bucket, h) in &all {
        for k in ["context_type", "uri", "level", "score", "abstract", "tags"] {
            assert!(h.get(k).is_some(), "hit without {k}: {h}");
        }
        let want = match bucket.as_str() {
            "memories" => "memory",
            "resources" => "resource",
            _ => "skill",
        };
        assert_eq!(h["context_type"], want, "{h}");
        let level = h["level"].as_u64().unwrap();
        let uri = h["uri"].as_str().unwrap();
        match level {
            0 => assert!(uri.ends_with("/.abstract.md"), "{h}"),
            1 => assert!(uri.ends_with("/.overview.md"), "{h}"),
            _ => assert!(!uri.ends_with("/.abstract.md") && !uri.ends_with("/.overview.md")),
        }
    }
    let by_uri = |u: &str| all.iter().find(|(_, h)| h["uri"] == u).cloned();
    let (b, alpha) = by_uri("viking://resources/docs/alpha.md").expect("alpha.md found");
    assert_eq!(
        (b.as_str(), alpha["level"].as_u64()),
        ("resources", Some(2))
    );
    assert!(
        alpha["abstract"]
            .as_str()
            .unwrap()
            .contains("authentication"),
        "{alpha}"
    );
    assert_eq!(
        by_uri("viking://user/default/memories/preferences/editor.md")
            .expect("the memory found")
            .0,
        "memories"
    );
    assert_eq!(
        by_uri("viking://agent/skills/rotate/SKILL.md")
            .expect("the skill found")
            .0,
        "skills"
    );
    // Best first within a bucket.
    let scores: Vec<f64> = r["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["score"].as_f64().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");

    let one = result(post(
        &s,
        FIND,
        &[],
        json!({"query": "authentication", "limit": 1}),
    ));
    assert_eq!(one["total"], 1, "{one}");
    let none = result(post(&s, FIND, &[], json!({"query": "xylophonequartz"})));
    assert_eq!(none["total"], 0, "{none}");
    // No query, no image, no filter: OpenViking's 400 (`_validate_query`); with a filter
    // the filter decides (here: no words to rank by, so nothing).
    for body in [json!({}), json!({"query": "   "})] {
        assert_eq!(error(post(&s, FIND, &[], body), 400), "INVALID_ARGUMENT");
    }
    assert_eq!(
        error(post(&s, SEARCH, &[], json!({"query": ""})), 400),
        "INVALID_ARGUMENT"
    );
    let filtered = result(post(
        &s,
        FIND,
        &[],
        json!({"query": "", "filter": {"op": "must", "field": "context_type", "conds": ["resource"]}}),
    ));
    assert_eq!(filtered["total"], 0, "{filtered}");
}

/// `score` is 0..1 as OpenViking's clients read it (issue 45: BM25 values 1.2–23.6 came back),
/// monotone in the engine's value (`raw_score`), and `score_threshold` applies to it.
#[test]
fn scores_are_zero_to_one_and_the_threshold_applies_to_them() {
    let s = Served::new();
    corpus(&s);
    let ask = |extra: Value| {
        let mut body = json!({"query": "authentication tokens", "limit": 20});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        result(post(&s, FIND, &[], body))
    };
    let all = ask(json!({}));
    let mut pairs: Vec<(f64, f64)> = hits(&all)
        .iter()
        .map(|(_, h)| {
            (
                h["score"].as_f64().unwrap(),
                h["raw_score"].as_f64().unwrap(),
            )
        })
        .collect();
    assert!(pairs.len() >= 3, "{all}");
    for (score, raw) in &pairs {
        assert!(
            *score > 0.0 && *score <= 1.0,
            "score {score} (raw {raw}): {all}"
        );
    }
    // Lexical (no model here): a BM25's share of the best, the best 1.
    let best = pairs.iter().map(|p| p.0).fold(0.0, f64::max);
    assert!((best - 1.0).abs() < 1e-6, "{pairs:?}");
    // Monotone: ordering by one orders by the other.
    pairs.sort_by(|a, b| a.1.total_cmp(&b.1));
    assert!(pairs.windows(2).all(|w| w[0].0 <= w[1].0), "{pairs:?}");
    // The threshold: between the lowest and the highest score, it keeps exactly those at or
    // above it.
    let (low, high) = (pairs[0].0, pairs[pairs.len() - 1].0);
    assert!(low < high, "{pairs:?}");
    let mid = (low + high) / 2.0;
    let kept = ask(json!({"score_threshold": mid}));
    let want = pairs.iter().filter(|(s, _)| *s >= mid).count() as u64;
    assert_eq!(
        kept["total"].as_u64(),
        Some(want),
        "threshold {mid}: {kept}"
    );
    assert!(hits(&kept)
        .iter()
        .all(|(_, h)| h["score"].as_f64().unwrap() >= mid));
    let top = ask(json!({"score_threshold": 1.0}));
    assert!(
        hits(&top)
            .iter()
            .all(|(_, h)| h["score"].as_f64() == Some(1.0)),
        "{top}"
    );
}

/// A filter without `op` is OpenViking's engine's no-op: 200, the search unfiltered.
#[test]
fn a_filter_without_op_is_no_filter() {
    let s = Served::new();
    corpus(&s);
    let plain = result(post(
        &s,
        FIND,
        &[],
        json!({"query": "authentication tokens"}),
    ));
    let no_op = result(post(
        &s,
        FIND,
        &[],
        json!({"query": "authentication tokens",
               "filter": {"field": "context_type", "conds": ["skill"]}}),
    ));
    assert!(plain["total"].as_u64().unwrap() >= 3, "{plain}");
    assert_eq!(uris(&no_op), uris(&plain), "{no_op}");
}

#[test]
fn find_narrows_by_target_kind_level_and_filter() {
    let s = Served::new();
    corpus(&s);
    let under = result(post(
        &s,
        FIND,
        &[],
        json!({"query": "vector embeddings beta", "target_uri": "viking://resources/docs/sub"}),
    ));
    let u = uris(&under);
    assert!(!u.is_empty(), "{under}");
    assert!(
        u.iter()
            .all(|x| x.starts_with("viking://resources/docs/sub")),
        "{u:?}"
    );
    let listed = result(post(
        &s,
        FIND,
        &[],
        json!({"query": "authentication", "target_uri": ["viking://agent", "viking://user"]}),
    ));
    let u = uris(&listed);
    assert!(u.iter().any(|x| x.contains("/skills/")), "{u:?}");
    assert!(u.iter().any(|x| x.contains("/memories/")), "{u:?}");
    assert!(
        !u.iter().any(|x| x.starts_with("viking://resources")),
        "{u:?}"
    );

    let memories = result(post(
        &s,
        FIND,
        &[],
        json!({"query": "authentication tokens", "context_type": "memory"}),
    ));
    assert!(memories["total"].as_u64().unwrap() >= 1, "{memories}");
    assert!(
        hits(&memories).iter().all(|(b, _)| b == "memories"),
        "{memories}"
    );

    let files = result(post(&s, FIND, &[], json!({"query": "alpha", "level": 2})));
    assert!(hits(&files).iter().all(|(_, h)| h["level"] == 2), "{files}");
    let summaries = result(post(
        &s,
        FIND,
        &[],
        json!({"query": "alpha", "level": "0,1"}),
    ));
    assert!(summaries["total"].as_u64().unwrap() >= 1, "{summaries}");
    assert!(
        hits(&summaries).iter().all(|(_, h)| h["level"] != 2),
        "{summaries}"
    );

    let filtered = result(post(
        &s,
        FIND,
        &[],
        json!({"query": "authentication tokens",
               "filter": {"op": "and", "conds": [
                   {"op": "must", "field": "context_type", "conds": ["resource"]},
                   {"op": "must_not", "field": "uri", "conds": ["viking://resources/docs/sub"]}]}}),
    ));
    assert!(filtered["total"].as_u64().unwrap() >= 1, "{filtered}");
    assert!(
        hits(&filtered)
            .iter()
            .all(|(b, h)| b == "resources" && !h["uri"].as_str().unwrap().contains("/sub")),
        "{filtered}"
    );
    let recent = result(post(
        &s,
        FIND,
        &[],
        json!({"query": "authentication", "since": "1h"}),
    ));
    assert!(recent["total"].as_u64().unwrap() >= 1, "{recent}");
    let future = result(post(
        &s,
        FIND,
        &[],
        json!({"query": "authentication", "since": "2999-01-01"}),
    ));
    assert_eq!(future["total"], 0, "{future}");
    let tagged = result(post(
        &s,
        FIND,
        &[],
        json!({"query": "authentication", "tags": ["team=infra"]}),
    ));
    assert_eq!(tagged["total"], 0, "no file carries tags: {tagged}");

    let prov = result(post(
        &s,
        FIND,
        &[],
        json!({"query": "alpha service", "include_provenance": true, "read_content": true,
               "level": 2}),
    ));
    let p = &prov["provenance"][0];
    assert_eq!(p["query"], "alpha service", "{prov}");
    assert!(p["matched_contexts"][0]["match_reason"]
        .as_str()
        .unwrap()
        .contains("lexical"));
    let alpha = &prov["resources"][0];
    assert_eq!(alpha["uri"], "viking://resources/docs/alpha.md", "{prov}");
    assert!(alpha["content"]
        .as_str()
        .unwrap()
        .starts_with("# Alpha guide"));
}

#[test]
fn bad_find_and_search_requests_are_refused_in_the_envelope() {
    let s = Served::new();
    for (body, code) in [
        (json!({"query": "x", "bogus": 1}), "INVALID_ARGUMENT"),
        (json!({"query": "x", "limit": 0}), "INVALID_ARGUMENT"),
        (json!({"query": "x", "limit": "many"}), "INVALID_ARGUMENT"),
        (
            json!({"query": "x", "target_uri": "viking://resources/../../x"}),
            "INVALID_URI",
        ),
        (
            json!({"query": "x", "target_uri": "file:///etc"}),
            "INVALID_URI",
        ),
        (
            json!({"query": "x", "context_type": "memo"}),
            "INVALID_ARGUMENT",
        ),
        (json!({"query": "x", "level": 7}), "INVALID_ARGUMENT"),
        (json!({"query": "x", "since": "soon"}), "INVALID_ARGUMENT"),
        (
            json!({"query": "x", "filter": {"op": "range", "field": "level"}}),
            "INVALID_FILTER",
        ),
        (
            json!({"query": "x", "filter": {"op": "must", "field": "owner", "conds": [1]}}),
            "INVALID_FILTER",
        ),
        (
            json!({"query": "x", "image_url": "https://example.invalid/a.png"}),
            "UNSUPPORTED_MODE",
        ),
    ] {
        assert_eq!(
            error(post(&s, FIND, &[], body.clone()), 400),
            code,
            "{body}"
        );
    }
    let (status, v) = s.call(
        "POST",
        FIND,
        &["Content-Type: application/json"],
        Some(b"{\"query\":"),
    );
    assert_eq!(error((status, v), 400), "INVALID_ARGUMENT");
    for (body, why) in [
        (
            json!({"query": "x", "max_tokens": 500}),
            "require mode='context'",
        ),
        (
            json!({"query": "x", "mode": "context", "target_uri": "viking://resources"}),
            "target_uri",
        ),
        (
            json!({"query": "x", "mode": "context", "read_content": true}),
            "read_content",
        ),
        (
            json!({"query": "x", "mode": "context", "quotas": {"gizmos": 1}}),
            "unknown quota keys",
        ),
        (
            json!({"query": "x", "mode": "context", "max_tokens": 10}),
            "max_tokens",
        ),
        (json!({"query": "", "search_type": "keywords"}), "keywords"),
        (json!({"query": "x", "mode": "digest"}), "mode"),
    ] {
        let (code, v) = post(&s, SEARCH, &[], body.clone());
        assert_eq!(
            (code, v["error"]["code"].as_str()),
            (400, Some("INVALID_ARGUMENT")),
            "{body}: {v}"
        );
        assert!(
            v["error"]["message"].as_str().unwrap().contains(why),
            "{body}: {v}"
        );
    }
}

#[test]
fn search_lists_like_find_and_assembles_a_budgeted_context() {
    let s = Served::new();
    corpus(&s);
    let q = json!({"query": "authentication tokens", "limit": 10});
    let found = result(post(&s, FIND, &[], q.clone()));
    let listed = result(post(&s, SEARCH, &[], q));
    assert_eq!(uris(&found), uris(&listed));
    let with_session = result(post(
        &s,
        SEARCH,
        &[],
        json!({"query": "authentication tokens", "session_id": "s1", "search_type": "keywords"}),
    ));
    assert!(
        with_session["total"].as_u64().unwrap() >= 1,
        "{with_session}"
    );
    assert!(
        with_session.get("query_plan").is_none(),
        "no intent analysis: {with_session}"
    );

    let ctx = result(post(
        &s,
        SEARCH,
        &[],
        json!({"query": "authentication tokens", "mode": "context", "limit": 10}),
    ));
    let entries = ctx["entries"].as_array().unwrap();
    assert!(!entries.is_empty(), "{ctx}");
    for e in entries {
        for k in ["uri", "category", "score", "detail", "text", "origin"] {
            assert!(e.get(k).is_some(), "entry without {k}: {e}");
        }
        let uri = e["uri"].as_str().unwrap();
        assert!(
            ctx["rendered"]
                .as_str()
                .unwrap()
                .contains(&format!("<memory uri=\"{uri}\"")),
            "{ctx}"
        );
        if e["detail"] == "overview" {
            assert!(!uri.ends_with(".md"), "a directory is named itself: {e}");
        }
    }
    let st = &ctx["stats"];
    assert_eq!(st["max_tokens"], 1600, "{st}");
    assert!(st["used_tokens"].as_i64().unwrap() <= 1600);
    assert_eq!(st["query_expansion"], "off");
    assert_eq!(st["rewrite"], "off");
    assert_eq!(st["planned_queries"], json!(["authentication tokens"]));
    assert_eq!(ctx["digest"], "");
    assert!(entries
        .iter()
        .any(|e| e["category"] == "preferences" && e["detail"] == "abstract"));

    let tight = result(post(
        &s,
        SEARCH,
        &[],
        json!({"query": "authentication tokens", "mode": "context", "max_tokens": 64}),
    ));
    let used = tight["stats"]["used_tokens"].as_i64().unwrap();
    assert!(used <= 64, "{tight}");
    assert!(
        tight["entries"].as_array().unwrap().len() < entries.len(),
        "a smaller budget holds fewer entries: {tight}"
    );

    let full = result(post(
        &s,
        SEARCH,
        &[],
        json!({"query": "alpha service login", "mode": "context", "detail": "full"}),
    ));
    let alpha = full["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["uri"] == "viking://resources/docs/alpha.md")
        .cloned()
        .unwrap_or_else(|| panic!("{full}"));
    assert_eq!(alpha["detail"], "full", "{alpha}");
    assert!(alpha["text"].as_str().unwrap().contains("login flows"));

    let bucketed = result(post(
        &s,
        SEARCH,
        &[],
        json!({"query": "authentication tokens", "mode": "context",
               "quotas": {"resources": 1, "skills": 1}}),
    ));
    assert_eq!(
        bucketed["stats"]["quotas"],
        json!({"resources": 1, "skills": 1})
    );
    let n = bucketed["entries"].as_array().unwrap().len();
    assert!((1..=2).contains(&n), "{bucketed}");

    let excluded = result(post(
        &s,
        SEARCH,
        &[],
        json!({"query": "authentication tokens", "mode": "context",
               "exclude_uris": ["viking://resources/docs"]}),
    ));
    assert!(
        excluded["stats"]["excluded"].as_u64().unwrap() >= 1,
        "{excluded}"
    );
    assert!(excluded["entries"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| !e["uri"]
            .as_str()
            .unwrap()
            .starts_with("viking://resources/docs")));
}

const GREP: &str = "/api/v1/search/grep";
const GLOB: &str = "/api/v1/search/glob";

#[test]
fn grep_and_glob_walk_the_files() {
    let s = Served::new();
    corpus(&s);
    let g = result(post(
        &s,
        GREP,
        &[],
        json!({"uri": "viking://resources", "pattern": "alpha", "case_insensitive": false,
               "node_limit": 256}),
    ));
    assert_eq!(
        g["matches"],
        json!([{"line": 3, "uri": "viking://resources/docs/alpha.md",
                "content": "The alpha service handles authentication tokens and login flows."}]),
        "{g}"
    );
    assert_eq!(
        (g["count"].as_u64(), g["match_count"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(
        g["files_scanned"], 2,
        "summaries are hidden files, not scanned: {g}"
    );
    let ci = result(post(
        &s,
        GREP,
        &[],
        json!({"uri": "viking://resources", "pattern": "ALPHA", "case_insensitive": true,
               "before_context": 1, "after_context": 1}),
    ));
    assert_eq!(ci["count"], 2, "{ci}");
    assert_eq!(
        ci["matches"][1]["before_context"],
        json!([{"line": 2, "content": ""}])
    );
    let cs = result(post(
        &s,
        GREP,
        &[],
        json!({"uri": "viking://resources", "pattern": "ALPHA"}),
    ));
    assert_eq!(cs["count"], 0, "{cs}");
    let limited = result(post(
        &s,
        GREP,
        &[],
        json!({"uri": "viking://", "pattern": "tokens|embeddings", "node_limit": 2}),
    ));
    assert_eq!(limited["count"], 2, "{limited}");
    let shallow = result(post(
        &s,
        GREP,
        &[],
        json!({"uri": "viking://resources", "pattern": "Beta", "level_limit": 1}),
    ));
    assert_eq!(shallow["count"], 0, "beta.md is two levels down: {shallow}");
    let excluded = result(post(
        &s,
        GREP,
        &[],
        json!({"uri": "viking://resources", "pattern": "e", "exclude_uri": "viking://resources/docs/sub"}),
    ));
    assert!(excluded["matches"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| !m["uri"].as_str().unwrap().contains("/sub/")));
    let one_file = result(post(
        &s,
        GREP,
        &[],
        json!({"uri": "viking://resources/docs/sub/beta.md", "pattern": "cosine"}),
    ));
    assert_eq!(one_file["matches"][0]["line"], 3, "{one_file}");
    assert_eq!(
        error(
            post(
                &s,
                GREP,
                &[],
                json!({"uri": "viking://resources", "pattern": "("})
            ),
            400
        ),
        "INVALID_ARGUMENT"
    );
    assert_eq!(
        error(
            post(
                &s,
                GREP,
                &[],
                json!({"uri": "viking://resources/nope", "pattern": "x"})
            ),
            404
        ),
        "NOT_FOUND"
    );
    assert_eq!(
        error(post(&s, GREP, &[], json!({"pattern": "x"})), 400),
        "INVALID_ARGUMENT"
    );

    let md = result(post(
        &s,
        GLOB,
        &[],
        json!({"pattern": "**/*.md", "uri": "viking://resources", "node_limit": 256}),
    ));
    assert_eq!(
        md,
        json!({"matches": ["viking://resources/docs/alpha.md",
                           "viking://resources/docs/sub/beta.md"], "count": 2})
    );
    let top = result(post(
        &s,
        GLOB,
        &[],
        json!({"pattern": "*.md", "uri": "viking://resources/docs"}),
    ));
    assert_eq!(
        top["matches"],
        json!(["viking://resources/docs/alpha.md"]),
        "{top}"
    );
    let everywhere = result(post(&s, GLOB, &[], json!({"pattern": "**/*.md"})));
    let all: Vec<&str> = everywhere["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        all.contains(&"viking://agent/skills/rotate/SKILL.md"),
        "{all:?}"
    );
    assert!(all.contains(&"viking://user/default/memories/preferences/editor.md"));
    assert!(
        all.iter().all(|u| !u.contains("/.")),
        "hidden files: {all:?}"
    );
    let first = result(post(
        &s,
        GLOB,
        &[],
        json!({"pattern": "**/*.md", "node_limit": 1}),
    ));
    assert_eq!(first["count"], 1);
    let entries = result(post(
        &s,
        GLOB,
        &[],
        json!({"pattern": "**/alpha.md", "uri": "viking://resources", "extra_fields": []}),
    ));
    assert_eq!(entries["matches"][0]["isDir"], false, "{entries}");
    assert_eq!(entries["matches"][0]["name"], "alpha.md");
    assert_eq!(
        error(
            post(
                &s,
                GLOB,
                &[],
                json!({"pattern": "[", "uri": "viking://resources"})
            ),
            400
        ),
        "INVALID_ARGUMENT"
    );
    assert_eq!(
        error(
            post(
                &s,
                GLOB,
                &[],
                json!({"pattern": "*", "uri": "viking://resources/nope"})
            ),
            404
        ),
        "NOT_FOUND"
    );
}

/// A served workspace with a root key and user keys for alice and bob (written as
/// `vikingfs key add` keeps them: hashed, in `.vikingfs/keys.json`).
pub fn keyed() -> Served {
    use sha2::Digest;
    let s = Served::with_config(json!({ "server": { "root_api_key": "root-secret" } }));
    let rec = |user: &str| {
        json!({"id": format!("id-{user}"), "account": "default", "user": user, "role": "user",
               "sha256": hex::encode(sha2::Sha256::digest(format!("key-{user}").as_bytes())),
               "created_at": "2026-12-01T00:00:00Z"})
    };
    std::fs::write(
        s.ws.join(".vikingfs/keys.json"),
        serde_json::to_vec(&json!({"keys": [rec("alice"), rec("bob")]})).unwrap(),
    )
    .unwrap();
    s
}

pub const ROOT: &str = "X-API-Key: root-secret";
pub const ALICE: &str = "X-API-Key: key-alice";
pub const BOB: &str = "X-API-Key: key-bob";

#[test]
fn a_user_key_never_finds_another_users_files() {
    let s = keyed();
    put(
        &s,
        "user/alice/memories/secret.md",
        "zebra passphrase of alice\n",
    );
    put(&s, "user/bob/memories/note.md", "zebra crossing near bob\n");
    put(&s, "resources/zoo.md", "the zebra enclosure\n");
    put(
        &s,
        "agent/skills/zebra/SKILL.md",
        "# Zebra\n\nA skill to count zebra stripes.\n",
    );
    wait(&s, &[ROOT]);
    let bob = result(post(
        &s,
        FIND,
        &[BOB],
        json!({"query": "zebra", "limit": 50}),
    ));
    let u = uris(&bob);
    assert!(u.iter().any(|x| x.contains("user/bob/")), "{u:?}");
    assert!(
        u.iter().any(|x| x.starts_with("viking://resources")),
        "{u:?}"
    );
    assert!(!u.iter().any(|x| x.contains("alice")), "{u:?}");
    // OpenViking's default scope for a user: its tree and the resources; skills when asked.
    assert!(!u.iter().any(|x| x.starts_with("viking://agent")), "{u:?}");
    let skills = result(post(
        &s,
        FIND,
        &[BOB],
        json!({"query": "zebra", "context_type": "skill"}),
    ));
    assert_eq!(
        skills["skills"][0]["uri"], "viking://agent/skills/zebra/SKILL.md",
        "{skills}"
    );
    let alice = result(post(
        &s,
        FIND,
        &[ALICE],
        json!({"query": "zebra", "limit": 50}),
    ));
    let u = uris(&alice);
    assert!(u.iter().any(|x| x.contains("user/alice/")), "{u:?}");
    assert!(!u.iter().any(|x| x.contains("user/bob")), "{u:?}");
    let ctx = result(post(
        &s,
        SEARCH,
        &[BOB],
        json!({"query": "zebra", "mode": "context"}),
    ));
    assert!(!ctx.to_string().contains("alice"), "{ctx}");
    let root = result(post(
        &s,
        FIND,
        &[ROOT],
        json!({"query": "zebra", "limit": 50, "target_uri": "viking://user"}),
    ));
    assert!(
        uris(&root).iter().any(|x| x.contains("alice")),
        "root sees all: {root}"
    );

    assert_eq!(
        error(
            post(
                &s,
                FIND,
                &[BOB],
                json!({"query": "zebra", "target_uri": "viking://user/alice"})
            ),
            403
        ),
        "PERMISSION_DENIED"
    );
    assert_eq!(
        error(
            post(
                &s,
                GREP,
                &[BOB],
                json!({"uri": "viking://user/alice", "pattern": "z"})
            ),
            403
        ),
        "PERMISSION_DENIED"
    );
    let g = result(post(
        &s,
        GREP,
        &[BOB],
        json!({"uri": "viking://", "pattern": "zebra"}),
    ));
    assert!(g["count"].as_u64().unwrap() >= 2, "{g}");
    assert!(!g.to_string().contains("alice"), "{g}");
    let gl = result(post(&s, GLOB, &[BOB], json!({"pattern": "**/*.md"})));
    assert!(!gl.to_string().contains("alice"), "{gl}");
    assert_eq!(
        error(post(&s, FIND, &[], json!({"query": "zebra"})), 401),
        "UNAUTHENTICATED"
    );
    assert_eq!(
        error(
            post(&s, FIND, &["X-API-Key: nope"], json!({"query": "zebra"})),
            401
        ),
        "UNAUTHENTICATED"
    );
}
