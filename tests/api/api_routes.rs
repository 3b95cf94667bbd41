//! Every route OpenViking 0.5.2 serves (its routers' table, `src/server/routes/openviking.rs`)
//! is answered: served, or `501 UNIMPLEMENTED` in the envelope naming what and why — never the
//! router's `404 Not Found: /path` or a 405 (issue 45).

use serde_json::{json, Value};

use crate::support::serve::{enc, Served};
use vikingfs::server::routes::openviking::ROUTES;

/// A route's path with each parameter filled with a probe value.
fn concrete(path: &str) -> String {
    path.split('/')
        .map(
            |seg| match seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some(p) if p.ends_with(":path") => "probe/deeper".to_string(),
                Some("account_id") => "default".to_string(),
                Some(p) => enc(&format!("probe-{p}")),
                None => seg.to_string(),
            },
        )
        .collect::<Vec<_>>()
        .join("/")
}

/// Is this answer the router's own "no such route" (a 404 naming the path, or a 405)?
fn missing(code: u16, v: &Value) -> bool {
    code == 405
        || (code == 404
            && v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Not Found: /")))
}

#[test]
fn every_openviking_route_is_served_or_answers_501() {
    let s = Served::new();
    let mut missing_routes = Vec::new();
    let (mut served, mut unimplemented) = (0, 0);
    for r in ROUTES {
        let path = concrete(r.path);
        // A query and a body that satisfy no route fully: what matters is which layer
        // answers (a route's own 400 or 404 is an answer).
        let path = format!("{path}?uri=viking%3A%2F%2Fresources&query=probe");
        let (code, v) = s.json(r.method, &path, &[], &json!({}));
        if missing(code, &v) {
            missing_routes.push(format!("{} {} -> {code} {v}", r.method, r.path));
            continue;
        }
        if code == 501 && r.method == "HEAD" {
            // A HEAD answer has no body to look into.
            unimplemented += 1;
        } else if code == 501 {
            unimplemented += 1;
            assert_eq!(v["status"], "error", "{} {}: {v}", r.method, r.path);
            assert_eq!(
                v["error"]["code"], "UNIMPLEMENTED",
                "{} {}",
                r.method, r.path
            );
            let m = v["error"]["message"].as_str().unwrap_or_default();
            // A refusal of `routes::unsupported` names the request as sent (a WebDAV
            // catch-all's too: `PROPFIND /webdav/...`, not the route's first method).
            if m.contains(" is not supported by vikingfs: ") {
                assert!(
                    m.starts_with(&format!("{} /", r.method)),
                    "{} {}: {m}",
                    r.method,
                    r.path
                );
            }
            assert!(
                m.contains("vikingfs") && m.len() > 60,
                "{} {}: a 501 says what and why: {m}",
                r.method,
                r.path
            );
        } else {
            served += 1;
        }
    }
    eprintln!(
        "OpenViking's routes: {} in the table, {served} served, {unimplemented} answer 501, \
         {} missing",
        ROUTES.len(),
        missing_routes.len()
    );
    assert!(
        missing_routes.is_empty(),
        "routes of OpenViking's that answer 404/405:\n{}",
        missing_routes.join("\n")
    );
    assert!(served > 60, "{served} served");
}

/// The routes of OpenViking's this issue serves anew, each as OpenViking answers it: the
/// consistency report (fsck's checks), the ACL of the access rule, recall over the context
/// mode, the lock / retrieval / filesystem observers, and `/metrics` on the API's port.
#[test]
fn the_routes_served_anew_answer_as_openviking() {
    use crate::api_search::{post, put, result, wait};
    let s = Served::new();
    put(
        &s,
        "resources/docs/alpha.md",
        "# Alpha\n\nThe alpha service rotates tokens.\n",
    );
    wait(&s, &[]);

    // Consistency: everything indexed; then a file written beside the daemon (no job) is
    // missing at level 2.
    let docs = json!({"uri": "viking://resources/docs"});
    let r = result(post(&s, "/api/v1/system/consistency", &[], docs.clone()));
    assert_eq!(
        (r["ok"].as_bool(), r["missing_record_count"].as_u64()),
        (Some(true), Some(0)),
        "{r}"
    );
    assert!(r["expected_count"].as_u64().unwrap() >= 1, "{r}");
    std::fs::write(
        s.ws.join("viking/default/resources/docs/raw.md"),
        "raw text no job indexed\n",
    )
    .unwrap();
    let r = result(post(&s, "/api/v1/system/consistency", &[], docs));
    assert_eq!(r["ok"], false, "{r}");
    let missing = r["missing_records"].as_array().unwrap();
    assert!(
        missing
            .iter()
            .any(|m| m["uri"] == "viking://resources/docs/raw.md"
                && m["level"] == 2
                && m["key"] == "raw.md#level=2"),
        "{r}"
    );
    let (code, v) = post(
        &s,
        "/api/v1/system/consistency",
        &[],
        json!({"uri": "viking://resources/docs/alpha.md"}),
    );
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (400, Some("INVALID_ARGUMENT")),
        "{v}"
    );

    // ACL: the fixed rule, readable; not changeable.
    let (code, v) = s.call(
        "GET",
        "/api/v1/acl?uri=viking%3A%2F%2Fresources%2Fdocs",
        &[],
        None,
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        v["result"]["effective_entries"],
        json!([{"principal": "user:*", "level": "write"}]),
        "{v}"
    );
    let (code, v) = s.call(
        "GET",
        "/api/v1/acl?uri=viking%3A%2F%2Fuser%2Fdefault",
        &[],
        None,
    );
    assert_eq!(code, 400, "{v}");
    let (code, v) = s.json(
        "POST",
        "/api/v1/acl/grant",
        &[],
        &json!({"uri": "viking://resources/docs", "principal": "user:bob", "level": "read"}),
    );
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (501, Some("UNIMPLEMENTED")),
        "{v}"
    );

    // Recall: the context mode under v1's names, marked deprecated.
    let r = result(post(
        &s,
        "/api/v1/search/recall",
        &[],
        json!({"query": "alpha tokens", "max_chars": 2000, "min_score": 0.0}),
    ));
    assert!(r["entries"].is_array() && r["rendered"].is_string(), "{r}");
    assert_eq!(
        r["stats"]["deprecated"]["endpoint"], "/api/v1/search/recall",
        "{r}"
    );
    assert_eq!(
        r["stats"]["deprecated"]["aliases_used"],
        json!(["max_chars", "min_score"]),
        "{r}"
    );
    let (code, _) = post(
        &s,
        "/api/v1/search/recall",
        &[],
        json!({"query": "x", "bogus": 1}),
    );
    assert_eq!(code, 400);

    // Observers: a find counted; the lock table's counts.
    result(post(
        &s,
        "/api/v1/search/find",
        &[],
        json!({"query": "alpha"}),
    ));
    let (code, v) = s.call("GET", "/api/v1/observer/retrieval?format=json", &[], None);
    assert_eq!(code, 200, "{v}");
    assert!(
        v["result"]["status"]["total_queries"].as_u64().unwrap() >= 1,
        "{v}"
    );
    assert!(
        v["result"]["status"]["max_score"].as_f64().unwrap() <= 1.0,
        "{v}"
    );
    let (code, v) = s.call("GET", "/api/v1/observer/lock?format=json", &[], None);
    assert_eq!(
        (code, v["result"]["name"].as_str()),
        (200, Some("lock")),
        "{v}"
    );
    assert!(v["result"]["status"]["active_locks"].is_u64(), "{v}");
    let (code, v) = s.call("GET", "/api/v1/observer/filesystem", &[], None);
    assert_eq!(
        (code, v["result"]["name"].as_str()),
        (200, Some("filesystem")),
        "{v}"
    );

    // Metrics: Prometheus' text on the API's port.
    let (code, body) = s.call_raw("GET", "/metrics", &[], None);
    let text = String::from_utf8_lossy(&body);
    assert_eq!(code, 200, "{text}");
    assert!(
        text.contains("# TYPE vikingfs_index_records gauge"),
        "{text}"
    );
}
