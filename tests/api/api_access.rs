//! No user reads another user's bytes (issue 43, finding 1): bob writes a canary word in every
//! form his tree holds it (a file's text, a file's name, a memory, a session message, a
//! memory the MCP `remember` tool submits), the daemon derives everything from it (summaries
//! up to the scopes, index records, history), and then alice, with her own user key, calls
//! every route the router serves and every MCP tool `tools/list` gives, with `viking://`,
//! `viking://user`, `viking://user/bob` (and bob's files), the old shared summaries and her
//! own scopes as targets. The canary is in no answer: no body and no header.
//!
//! The routes are the router's own list (`routes::endpoints`), and the tools the server's
//! list: a route or a tool this test does not know how to call fails it, so a new one is
//! probed the day it is added.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};
use vikingfs::index::{Index, Level, Record};
use vikingfs::server::routes::{endpoints, Endpoint};
use vikingfs::uri::VPath;

use crate::support::serve::{enc, http_full, Served};

const ROOT: &str = "X-API-Key: root-secret";
/// Bob's canary: one word, so the lexical index keeps it as a term. Alice never sends it (an
/// answer that echoes her request must not count), so finding it in an answer is a leak.
const CANARY: &str = "zebrafinch";
/// A word beside the canary in bob's texts, which alice searches and greps for, as a user
/// hunting for another's secrets would.
const LURE: &str = "quokkasnark";

/// A skill alice installs wherever a probe names.
const PROBE_SKILL: &str = "---\nname: probe-skill\ndescription: alice's probe\n---\nprobe\n";
const ACCEPT: &str = "Accept: application/json, text/event-stream";

/// `uri/name`, as a URI below `uri`.
fn child(uri: &str, name: &str) -> String {
    if uri.ends_with('/') {
        format!("{uri}{name}")
    } else {
        format!("{uri}/{name}")
    }
}

/// One request.
struct Req {
    method: &'static str,
    path: String,
    body: Option<(String, Vec<u8>)>,
}

impl Req {
    fn get(path: impl Into<String>) -> Req {
        Req {
            method: "GET",
            path: path.into(),
            body: None,
        }
    }

    fn with(method: &'static str, path: impl Into<String>, body: Value) -> Req {
        Req {
            method,
            path: path.into(),
            body: Some((
                "Content-Type: application/json".into(),
                serde_json::to_vec(&body).unwrap(),
            )),
        }
    }

    fn name(&self) -> String {
        let body = self
            .body
            .as_ref()
            .map(|(_, b)| String::from_utf8_lossy(&b[..b.len().min(300)]).into_owned())
            .unwrap_or_default();
        format!("{} {} {body}", self.method, self.path)
    }
}

/// One user's key header.
fn key(s: &Served, user: &str) -> String {
    let out = s.cli(&["key", "add", "--user", user]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    format!("X-API-Key: {}", String::from_utf8_lossy(&out.stdout).trim())
}

/// A request that must succeed; its result.
fn must(s: &Served, who: &str, r: Req) -> Value {
    let (code, _, body) = send(s, who, &r);
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    assert!(
        code == 200 && v["status"] == "ok",
        "{}: {code} {}",
        r.name(),
        String::from_utf8_lossy(&body)
    );
    v["result"].clone()
}

fn send(s: &Served, who: &str, r: &Req) -> (u16, String, Vec<u8>) {
    let mut headers = vec![who, ACCEPT];
    let body = r.body.as_ref().map(|(ct, b)| {
        headers.push(ct);
        b.as_slice()
    });
    http_full(s.addr, r.method, &r.path, &headers, body)
}

/// A JSON-RPC request to `/mcp` (stateless: each one stands alone).
fn rpc(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
}

/// `POST /resources/temp_upload` of a small file as the multipart field `file`.
fn upload() -> Req {
    let boundary = "vikingfs-access-boundary";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"probe.md\"\r\n\
         Content-Type: application/octet-stream\r\n\r\nalice's probe\r\n--{boundary}--\r\n"
    )
    .into_bytes();
    body.shrink_to_fit();
    Req {
        method: "POST",
        path: "/api/v1/resources/temp_upload".into(),
        body: Some((
            format!("Content-Type: multipart/form-data; boundary={boundary}"),
            body,
        )),
    }
}

/// What the probes fill a route's parameters with.
struct Ids {
    bob_session: String,
    alice_session: String,
    bob_task: String,
    alice_task: String,
    /// Times before bob wrote anything and after everything was derived (RFC 3339).
    before: String,
    after: String,
    /// Bob's note on the server's disk (a host path a user key must not add).
    bob_disk_path: String,
}

/// The concrete paths of a route pattern: each `{param}` filled with what may reach another
/// user's things (bob's ids) and with alice's own.
fn fill(path: &str, ids: &Ids) -> Vec<String> {
    let mut out = vec![path.to_string()];
    let values = |param: &str| -> Vec<String> {
        match param {
            "account_id" => vec!["default".into()],
            "user_id" => vec!["bob".into(), "alice".into()],
            "sid" => vec![ids.bob_session.clone(), ids.alice_session.clone()],
            "archive" => vec!["archive_001".into()],
            "rid" => vec!["r1".into()],
            "id" => vec![ids.bob_task.clone(), ids.alice_task.clone()],
            "name" | "skill_name" => vec!["bobs-tool".into(), "probe-skill".into()],
            // The routes answered 501 (`unsupported`) and served ones OpenViking names so.
            "group_id" | "memory_type" | "category" | "target_key" | "version" | "operation_id"
            | "key" | "*resource_path" => vec!["probe".into()],
            other => {
                panic!("route parameter {{{other}}} of {path}: the access test has no value for it")
            }
        }
    };
    while let Some(p) = out.iter().find(|p| p.contains('{')).cloned() {
        let start = p.find('{').unwrap();
        let end = start + p[start..].find('}').unwrap();
        out.retain(|q| *q != p);
        for v in values(&p[start + 1..end]) {
            out.push(format!("{}{}{}", &p[..start], enc(&v), &p[end + 1..]));
        }
    }
    out
}

/// The queries a search is asked: the canary, and words of bob's texts.
const QUERIES: [&str; 4] = [LURE, "garage PIN 4711", "travel plans", "preferences tea"];

/// The requests that probe `e` with target `t`; `None` for a route this test does not know.
fn probes(e: &Endpoint, t: &str, ids: &Ids) -> Option<Vec<Req>> {
    static SERVED: std::sync::OnceLock<Vec<Endpoint>> = std::sync::OnceLock::new();
    let served = SERVED.get_or_init(vikingfs::server::routes::served);
    let u = enc(t);
    let mut out = Vec::new();
    for path in fill(&e.path, ids) {
        let p = path.as_str();
        let reqs: Vec<Req> = match (e.method, e.path.as_str()) {
            ("GET", "/health" | "/ready" | "/api/v1/debug/health" | "/api/v1/system/status") => {
                vec![Req::get(p)]
            }
            ("POST", "/api/v1/system/wait") => vec![Req::with("POST", p, json!({"timeout": 5}))],
            ("GET", pat) if pat.starts_with("/api/v1/admin/") => vec![Req::get(p)],
            ("POST", "/api/v1/admin/accounts") => vec![Req::with(
                "POST",
                p,
                json!({"account_id": "probe", "admin_user_id": "probe"}),
            )],
            ("POST", "/api/v1/admin/accounts/{account_id}/users") => vec![Req::with(
                "POST",
                p,
                json!({"user_id": "probe", "role": "user"}),
            )],
            ("PUT", "/api/v1/admin/accounts/{account_id}/users/{user_id}/role") => {
                vec![Req::with("PUT", p, json!({"role": "admin"}))]
            }
            ("POST", "/api/v1/admin/accounts/{account_id}/users/{user_id}/key") => {
                vec![Req::with("POST", p, json!({}))]
            }
            ("DELETE", pat) if pat.starts_with("/api/v1/admin/") => vec![Req {
                method: "DELETE",
                path: p.into(),
                body: None,
            }],
            ("GET", "/api/v1/fs/ls" | "/api/v1/fs/tree") => vec![
                Req::get(format!(
                    "{p}?uri={u}&recursive=true&show_all_hidden=true&include_abstract=true\
                     &include_overview=true&abs_limit=100000&overview_limit=100000\
                     &node_limit=100000&level_limit=20"
                )),
                Req::get(format!("{p}?uri={u}&simple=true&recursive=true")),
                Req::get(format!("{p}?uri={u}&output=original&show_all_hidden=true")),
            ],
            ("GET", "/api/v1/fs/stat") => vec![Req::get(format!("{p}?uri={u}"))],
            ("POST", "/api/v1/fs/mkdir") => {
                vec![Req::with("POST", p, json!({"uri": child(t, "probe-dir")}))]
            }
            ("POST", "/api/v1/fs/mv") => vec![
                Req::with(
                    "POST",
                    p,
                    json!({"from_uri": t, "to_uri": child(t, "probe-moved")}),
                ),
                Req::with(
                    "POST",
                    p,
                    json!({"from_uri": child(t, "note.md"), "to_uri": "viking://user/alice/probe-moved.md"}),
                ),
            ],
            ("DELETE", "/api/v1/fs") => vec![Req {
                method: "DELETE",
                path: format!("{p}?uri={}&recursive=true", enc(&child(t, "note.md"))),
                body: None,
            }],
            (
                "GET",
                "/api/v1/content/read"
                | "/api/v1/content/abstract"
                | "/api/v1/content/overview"
                | "/api/v1/content/download",
            ) => vec![Req::get(format!("{p}?uri={u}"))],
            ("POST", "/api/v1/content/write") => vec![
                Req::with(
                    "POST",
                    p,
                    json!({"uri": child(t, "probe.md"), "content": "probe", "mode": "create"}),
                ),
                Req::with(
                    "POST",
                    p,
                    json!({"uri": t, "content": "probe", "mode": "append"}),
                ),
            ],
            ("POST", "/api/v1/resources/temp_upload") => vec![upload()],
            ("POST", "/api/v1/skills") => vec![Req::with(
                "POST",
                p,
                json!({"data": PROBE_SKILL, "target_uri": t}),
            )],
            ("GET", "/api/v1/skills") => {
                vec![Req::get(p), Req::get(format!("{p}?target_uri={u}"))]
            }
            ("GET", "/api/v1/skills/{skill_name}") => vec![
                Req::get(format!("{p}?include_integrity=true")),
                Req::get(format!("{p}?target_uri={u}&include_source=true")),
            ],
            ("PUT", "/api/v1/skills/{skill_name}") => vec![Req::with(
                "PUT",
                p,
                json!({"data": PROBE_SKILL, "target_uri": t}),
            )],
            ("DELETE", "/api/v1/skills/{skill_name}") => vec![Req {
                method: "DELETE",
                path: format!("{p}?target_uri={u}"),
                body: None,
            }],
            ("POST", "/api/v1/skills/validate") => {
                vec![Req::with(
                    "POST",
                    p,
                    json!({"data": PROBE_SKILL, "source_path": t}),
                )]
            }
            ("POST", "/api/v1/fs/cp") => vec![
                Req::with(
                    "POST",
                    p,
                    json!({"from_uri": t, "to_uri": "viking://user/alice/probe-copy", "recursive": true}),
                ),
                Req::with(
                    "POST",
                    p,
                    json!({"from_uri": child(t, "note.md"), "to_uri": "viking://user/alice/probe-copy.md"}),
                ),
            ],
            ("GET", "/api/v1/fs/attrs") => vec![Req::get(format!("{p}?uri={u}"))],
            ("POST", "/api/v1/fs/attrs/set_tags" | "/api/v1/content/set_tags") => vec![Req::with(
                "POST",
                p,
                json!({"uri": t, "tags": ["probe=alice"], "recursive": true}),
            )],
            ("POST", "/api/v1/content/batch-write") => vec![Req::with(
                "POST",
                p,
                json!({"root_uri": t, "operations": [{"uri": child(t, "bw-probe.md"), "content": "probe"}]}),
            )],
            ("POST", "/api/v1/content/reindex") => vec![Req::with(
                "POST",
                p,
                json!({"uri": t, "tags": ["probe=alice"], "wait": false}),
            )],
            ("POST", "/api/v1/resources") => vec![Req::with(
                "POST",
                p,
                json!({"path": ids.bob_disk_path, "to": child(t, "probe-res")}),
            )],
            ("POST", "/api/v1/search/find") => QUERIES
                .iter()
                .map(|q| {
                    Req::with(
                        "POST",
                        p,
                        json!({"query": q, "target_uri": t, "limit": 200, "read_content": true,
                               "include_provenance": true}),
                    )
                })
                .collect(),
            ("POST", "/api/v1/search/search") => QUERIES
                .iter()
                .flat_map(|q| {
                    [
                        Req::with(
                            "POST",
                            p,
                            json!({"query": q, "target_uri": t, "limit": 200, "read_content": true,
                                   "include_provenance": true}),
                        ),
                        Req::with(
                            "POST",
                            p,
                            json!({"query": q, "target_uri": t, "search_type": "keywords",
                                   "limit": 200}),
                        ),
                        // The context mode takes no target: the caller's default scope.
                        Req::with(
                            "POST",
                            p,
                            json!({"query": q, "mode": "context", "max_tokens": 100000,
                                   "detail": "full"}),
                        ),
                    ]
                })
                .collect(),
            ("POST", "/api/v1/search/grep") => vec![
                Req::with(
                    "POST",
                    p,
                    json!({"uri": t, "pattern": LURE, "case_insensitive": true,
                           "node_limit": 0, "before_context": 5, "after_context": 5}),
                ),
                Req::with(
                    "POST",
                    p,
                    json!({"uri": t, "pattern": ".", "node_limit": 0, "level_limit": 20}),
                ),
            ],
            ("POST", "/api/v1/search/glob") => vec![Req::with(
                "POST",
                p,
                json!({"uri": t, "pattern": "**", "node_limit": 0, "extra_fields": ["size"]}),
            )],
            ("POST", "/api/v1/sessions") => vec![
                Req::with("POST", p, json!({})),
                Req::with("POST", p, json!({"session_id": ids.bob_session})),
            ],
            ("GET", "/api/v1/sessions") => vec![Req::get(p)],
            ("GET", "/api/v1/sessions/{sid}") => vec![Req::get(p)],
            ("DELETE", "/api/v1/sessions/{sid}") => vec![Req {
                method: "DELETE",
                path: p.replace(&ids.alice_session, "probe-none"),
                body: None,
            }],
            ("POST", "/api/v1/sessions/{sid}/messages") => vec![Req::with(
                "POST",
                p,
                json!({"role": "user", "content": "alice says hello"}),
            )],
            ("POST", "/api/v1/sessions/{sid}/messages/batch") => vec![Req::with(
                "POST",
                p,
                json!({"messages": [{"role": "user", "content": "alice again"}]}),
            )],
            ("POST", "/api/v1/sessions/{sid}/commit") => vec![Req::with("POST", p, json!({}))],
            ("GET", "/api/v1/sessions/{sid}/context") => {
                vec![Req::get(p), Req::get(format!("{p}?token_budget=1000000"))]
            }
            ("GET", "/api/v1/sessions/{sid}/archives/{archive}") => vec![Req::get(p)],
            ("PATCH", "/api/v1/sessions/{sid}/config") => {
                vec![Req::with("PATCH", p, json!({}))]
            }
            ("GET", pat) if pat.starts_with("/api/v1/sessions/{sid}/tool-results") => {
                vec![Req::get(p)]
            }
            ("POST", "/api/v1/snapshot/commit") => vec![Req::with(
                "POST",
                p,
                json!({"message": "probe", "paths": [t]}),
            )],
            ("GET", "/api/v1/snapshot/log") => vec![
                Req::get(format!("{p}?paths={u}&limit=500")),
                Req::get(format!("{p}?limit=500")),
            ],
            ("GET", "/api/v1/snapshot/show") => vec![
                Req::get(format!("{p}?target_ref=HEAD&path={u}")),
                Req::get(format!("{p}?target_ref={}&path={u}", enc(&ids.after))),
                Req::get(format!("{p}?target_ref={}", enc(&ids.after))),
            ],
            ("GET", "/api/v1/snapshot/diff") => vec![
                Req::get(format!("{p}?path={u}&from={}&to=HEAD", enc(&ids.before))),
                Req::get(format!("{p}?path={u}&to=HEAD")),
            ],
            ("POST", "/api/v1/snapshot/restore") => vec![
                Req::with(
                    "POST",
                    p,
                    json!({"project_dir": t, "source_commit": ids.before, "dry_run": true}),
                ),
                Req::with(
                    "POST",
                    p,
                    json!({"source_commit": ids.before, "dry_run": true}),
                ),
            ],
            ("GET", "/api/v1/tasks") => vec![
                Req::get(format!("{p}?limit=200")),
                Req::get(format!("{p}?limit=200&pagination=cursor")),
            ],
            ("GET", "/api/v1/tasks/{id}") => vec![Req::get(format!("{p}?include_events=true"))],
            ("POST", "/api/v1/tasks/{id}/cancel") => vec![Req::with("POST", p, json!({}))],
            ("GET", pat) if pat.starts_with("/api/v1/observer/") => {
                vec![Req::get(p), Req::get(format!("{p}?format=json"))]
            }
            // The `vikingfs` command's routes exist only on the owner's socket.
            ("GET" | "POST", pat) if pat.starts_with("/vikingfs/v1/") => {
                vec![Req::with(e.method, p, json!({"uri": t, "query": LURE}))]
            }
            ("GET", "/api/v1/acl") => vec![Req::get(format!("{p}?uri={u}"))],
            ("GET", "/metrics") => vec![Req::get(p)],
            ("POST", "/api/v1/system/consistency") => vec![Req::with("POST", p, json!({"uri": t}))],
            ("POST", "/api/v1/search/recall") => QUERIES
                .iter()
                .map(|q| {
                    Req::with(
                        "POST",
                        p,
                        json!({"query": q, "max_tokens": 32000, "min_score": 0, "detail": "full"}),
                    )
                })
                .collect(),
            // OpenViking's routes vikingfs answers 501 (`routes::unsupported`): asked once, with
            // the target, to show that not even the refusal names bob's things.
            (m, pat) if !served.iter().any(|s| s.method == m && s.path == pat) => {
                vec![Req::with(
                    if m == "ANY" { "POST" } else { m },
                    p,
                    json!({"uri": t}),
                )]
            }
            // MCP: probed tool by tool (`mcp_probes`); the endpoint itself is listed here.
            ("ANY", "/mcp" | "/mcp/") => vec![Req::with("POST", p, rpc("tools/list", json!({})))],
            _ => return None,
        };
        out.extend(reqs);
    }
    Some(out)
}

/// The `tools/call`s that probe tool `name` with target `t`; `None` for a tool this test does
/// not know.
fn mcp_probes(name: &str, t: &str, ids: &Ids) -> Option<Vec<Value>> {
    let call = |args: Value| rpc("tools/call", json!({"name": name, "arguments": args}));
    Some(match name {
        "find" => QUERIES
            .iter()
            .map(|q| call(json!({"query": q, "target_uri": t, "limit": 200, "read_content": true, "min_score": 0})))
            .collect(),
        "search" => QUERIES
            .iter()
            .flat_map(|q| {
                [
                    call(json!({"query": q, "target_uri": t, "limit": 200, "read_content": true, "min_score": 0})),
                    call(json!({"query": q, "mode": "context", "max_tokens": 100000, "detail": "full"})),
                ]
            })
            .collect(),
        "read" => vec![call(json!({"uris": [t]}))],
        "list" => vec![call(json!({"uri": t, "recursive": true, "limit": 10000}))],
        "tree" => vec![call(
            json!({"uri": t, "include_abstract": true, "level_limit": 20, "node_limit": 100000}),
        )],
        "grep" => vec![
            call(json!({"uri": t, "pattern": LURE, "case_insensitive": true, "node_limit": 100000})),
            call(json!({"uri": t, "pattern": ".", "node_limit": 100000})),
        ],
        "glob" => vec![call(json!({"pattern": "**", "uri": t, "node_limit": 100000}))],
        "write" => vec![call(json!({"uri": child(t, "mcp-probe.md"), "content": "probe"}))],
        "edit" => vec![call(json!({"uri": child(t, "note.md"), "old_string": "PIN", "new_string": "pin"}))],
        "remember" => vec![call(json!({"messages": [{"role": "user", "content": "alice likes tea"}]}))],
        "forget" => vec![call(json!({"uri": child(t, "note.md")}))],
        "add_resource" => vec![call(json!({"path": ids.bob_disk_path, "to": child(t, "mcp-res")}))],
        "add_skill" => vec![call(json!({"data": PROBE_SKILL, "target_uri": t}))],
        "health" => vec![call(json!({}))],
        "fetch" => vec![call(json!({"id": t})), call(json!({"id": child(t, "note.md")}))],
        "list_users" => vec![call(json!({"query": "", "limit": 1000}))],
        "get_acl" | "download" => vec![call(json!({"uri": t}))],
        // Answered "not supported" whatever the arguments: asked once each, with the target.
        "list_groups" | "set_acl" | "privacy_tree" | "privacy_resolve" | "privacy_upsert"
        | "list_watches" | "cancel_watch" => vec![call(json!({"uri": t, "to_uri": t}))],
        _ => return None,
    })
}

/// Wait until every job is done (summaries written, vectors made).
fn drained(s: &Served) {
    let r = must(
        s,
        ROOT,
        Req::with("POST", "/api/v1/system/wait", json!({"timeout": 120})),
    );
    assert_eq!(r["drained"], true, "{r}");
}

#[test]
fn no_route_or_tool_hands_alice_bobs_canary() {
    let s = Served::with_config(json!({"server": {"root_api_key": "root-secret"}}));
    let alice = key(&s, "alice");
    let bob = key(&s, "bob");
    let before = jiff::Timestamp::now().to_string();
    std::thread::sleep(Duration::from_millis(50));

    // Bob's canary, in every form: a note's text, a file's name, a memory, a session's
    // messages, and a memory submitted through MCP.
    let write = |who: &str, uri: &str, content: &str| {
        must(
            &s,
            who,
            Req::with(
                "POST",
                "/api/v1/content/write",
                json!({"uri": uri, "content": content, "mode": "create"}),
            ),
        );
    };
    for d in [
        "viking://user/bob",
        "viking://user/bob/memories/preferences",
    ] {
        must(
            &s,
            &bob,
            Req::with("POST", "/api/v1/fs/mkdir", json!({"uri": d})),
        );
    }
    write(
        &bob,
        "viking://user/bob/note.md",
        &format!("The garage PIN is 4711 {LURE} {CANARY}. Bob keeps it here.\n"),
    );
    write(
        &bob,
        &format!("viking://user/bob/{CANARY}-plans.md"),
        "Travel plans for the spring: trains, maps.\n",
    );
    write(
        &bob,
        "viking://user/bob/memories/preferences/tea.md",
        &format!("Bob's preferences: tea, never coffee; his words are {LURE} {CANARY}.\n"),
    );
    // A skill of bob's own, its description the canary.
    must(
        &s,
        &bob,
        Req::with(
            "POST",
            "/api/v1/skills",
            json!({"data": format!(
                "---\nname: bobs-tool\ndescription: {LURE} {CANARY} garage PIN\n---\nUse {CANARY}.\n"
            )}),
        ),
    );
    let bob_session = must(&s, &bob, Req::with("POST", "/api/v1/sessions", json!({})))
        ["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    must(
        &s,
        &bob,
        Req::with(
            "POST",
            format!("/api/v1/sessions/{bob_session}/messages"),
            json!({"role": "user", "content": format!("remember {LURE} {CANARY} for the garage PIN")}),
        ),
    );
    let bob_task = must(
        &s,
        &bob,
        Req::with(
            "POST",
            format!("/api/v1/sessions/{bob_session}/commit"),
            json!({}),
        ),
    )["task_id"]
        .as_str()
        .unwrap_or("none")
        .to_string();
    let (code, _, body) = send(
        &s,
        &bob,
        &Req::with(
            "POST",
            "/mcp",
            rpc(
                "tools/call",
                json!({"name": "remember", "arguments": {"messages": [
                    {"role": "user", "content": format!("my {LURE} {CANARY} is the garage PIN")}]}}),
            ),
        ),
    );
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));

    // Alice's own things, so that her scopes have content and summaries too.
    for d in ["viking://user/alice", "viking://resources/shared"] {
        must(
            &s,
            &alice,
            Req::with("POST", "/api/v1/fs/mkdir", json!({"uri": d})),
        );
    }
    write(
        &alice,
        "viking://user/alice/diary.md",
        "Alice's diary: gardens, tea, travel plans.\n",
    );
    write(
        &alice,
        "viking://resources/shared/guide.md",
        "A shared guide about trains and garages.\n",
    );
    let alice_session = must(&s, &alice, Req::with("POST", "/api/v1/sessions", json!({})))
        ["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    must(
        &s,
        &alice,
        Req::with(
            "POST",
            format!("/api/v1/sessions/{alice_session}/messages"),
            json!({"role": "user", "content": "alice plans a garden"}),
        ),
    );
    let alice_task = must(
        &s,
        &alice,
        Req::with(
            "POST",
            format!("/api/v1/sessions/{alice_session}/commit"),
            json!({}),
        ),
    )["task_id"]
        .as_str()
        .unwrap_or("none")
        .to_string();

    // Everything derived: every summary up to the scopes, every record.
    drained(&s);
    let after = jiff::Timestamp::now().to_string();
    std::thread::sleep(Duration::from_millis(50));
    // The canary is there to find, for bob.
    let mine = must(
        &s,
        &bob,
        Req::with(
            "POST",
            "/api/v1/search/find",
            json!({"query": CANARY, "target_uri": "viking://user/bob", "limit": 50}),
        ),
    );
    assert!(
        mine.to_string().to_ascii_lowercase().contains(CANARY),
        "bob finds his own canary: {mine}"
    );

    // What an older vikingfs left in a workspace upgraded in place (its next daemon removes
    // it at start: tests/ops `the_directory_of_every_users_tree_is_never_summarised`): the
    // summary of `user`, quoting bob, and its records. Meanwhile no face may serve it to alice.
    let leaked = format!("- `bob/` — The garage PIN is 4711 {LURE} {CANARY}.\n");
    let index = Index::open_lexical(&s.ws.join(".vikingfs/index.db")).unwrap();
    for (file, level) in [
        (".abstract.md", Level::Abstract),
        (".overview.md", Level::Overview),
    ] {
        std::fs::write(s.ws.join("viking/default/user").join(file), &leaked).unwrap();
        index
            .upsert(&Record {
                uri: VPath::from_rel("user").unwrap(),
                level,
                text: leaked.clone(),
                vector: None,
                snippet: leaked.clone(),
                source_version: "old".into(),
                partial: false,
            })
            .unwrap();
    }
    drop(index);
    // Root sees every user: to it, the old summary is there to find.
    let all = must(
        &s,
        ROOT,
        Req::with(
            "POST",
            "/api/v1/search/find",
            json!({"query": LURE, "target_uri": "viking://user", "limit": 50}),
        ),
    );
    assert!(
        all.to_string().contains("viking://user/.abstract.md"),
        "the old summary is in the index: {all}"
    );

    let ids = Ids {
        bob_session,
        alice_session: alice_session.clone(),
        bob_task,
        alice_task,
        before,
        after,
        bob_disk_path: s
            .ws
            .join("viking/default/user/bob/note.md")
            .to_string_lossy()
            .into_owned(),
    };
    let targets = [
        "viking://".to_string(),
        "viking://user".to_string(),
        "viking://user/".to_string(),
        "viking://user/bob".to_string(),
        "viking://user/bob/note.md".to_string(),
        "viking://user/bob/memories".to_string(),
        "viking://user/.abstract.md".to_string(),
        "viking://user/.overview.md".to_string(),
        "viking://user/alice".to_string(),
        "viking://~".to_string(),
        "viking://resources".to_string(),
        "viking://agent".to_string(),
        format!("viking://session/{alice_session}"),
    ];

    // Every route, as the router lists them; reads first, changes after, removals last.
    let routes = endpoints();
    assert!(
        routes.len() > 40 && routes.iter().any(|e| e.path == "/api/v1/search/find"),
        "the router's list: {routes:?}"
    );
    let mut unknown = BTreeSet::new();
    let mut reqs: Vec<Req> = Vec::new();
    let mut seen = BTreeSet::new();
    for t in &targets {
        for e in &routes {
            match probes(e, t, &ids) {
                Some(rs) => reqs.extend(rs.into_iter().filter(|r| seen.insert(r.name()))),
                None => {
                    unknown.insert(format!("{} {}", e.method, e.path));
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "routes the access test does not know how to call (add a probe for each): {unknown:?}"
    );
    let order = |r: &Req| match r.method {
        "GET" => 0,
        "DELETE" => 2,
        _ => 1,
    };
    reqs.sort_by_key(order);

    // Every tool, as tools/list gives them.
    let (code, _, body) = send(
        &s,
        &alice,
        &Req::with("POST", "/mcp", rpc("tools/list", json!({}))),
    );
    let listed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    assert_eq!(code, 200, "{listed}");
    let tools: Vec<String> = listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("tools/list: {listed}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert!(tools.len() >= 10, "{tools:?}");
    let mut calls: Vec<Value> = Vec::new();
    let mut seen_calls = BTreeSet::new();
    for t in &targets {
        for tool in &tools {
            match mcp_probes(tool, t, &ids) {
                Some(cs) => {
                    calls.extend(cs.into_iter().filter(|c| seen_calls.insert(c.to_string())))
                }
                None => {
                    unknown.insert(format!("MCP tool {tool}"));
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "tools the access test does not know how to call (add a probe for each): {unknown:?}"
    );
    // Tools that change nothing first.
    calls.sort_by_key(|c| {
        matches!(
            c["params"]["name"].as_str(),
            Some("write" | "edit" | "remember" | "forget" | "add_resource" | "add_skill")
        )
    });
    for c in calls {
        reqs.push(Req::with("POST", "/mcp", c));
    }

    let mut leaks = Vec::new();
    let mut answered = 0;
    // Alice with her key, and the root key acting as alice (two header lines in one: the
    // request is written as it is given), who sees what alice sees.
    let root_as_alice = format!("{ROOT}\r\nX-OpenViking-User: alice");
    let me = must(&s, &root_as_alice, Req::get("/api/v1/system/status"));
    assert_eq!(
        (me["user"].as_str(), me["role"].as_str()),
        (Some("alice"), Some("root")),
        "{me}"
    );
    for (r, who) in reqs
        .iter()
        .flat_map(|r| [(r, alice.as_str()), (r, root_as_alice.as_str())])
    {
        assert!(
            !r.name().to_ascii_lowercase().contains(CANARY),
            "alice's request names the canary: {}",
            r.name()
        );
        let (code, head, body) = send(&s, who, r);
        answered += 1;
        let text = format!("{head}\n{}", String::from_utf8_lossy(&body));
        if let Some(at) = text.to_ascii_lowercase().find(CANARY) {
            let mut from = at.saturating_sub(150);
            while !text.is_char_boundary(from) {
                from -= 1;
            }
            let mut to = (at + 100).min(text.len());
            while !text.is_char_boundary(to) {
                to += 1;
            }
            let as_whom = if who == alice {
                "alice"
            } else {
                "root as alice"
            };
            leaks.push(format!(
                "{as_whom}: {} -> {code}: …{}…",
                r.name(),
                &text[from..to]
            ));
        }
    }
    println!(
        "{answered} answers to alice, {} routes, {} tools",
        routes.len(),
        tools.len()
    );
    assert!(
        leaks.is_empty(),
        "alice read bob's canary in {} answer(s):\n{}",
        leaks.len(),
        leaks.join("\n")
    );
}

/// docs/http-api.md's route list is the router's: every route the server serves is named
/// there (`METHOD PATH` in backticks), and nothing it names is unserved. (The routes of
/// OpenViking's it answers 501 are docs/openviking-routes.md's, from its own table.)
#[test]
fn the_http_api_doc_lists_every_route_and_no_other() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/http-api.md"),
    )
    .unwrap();
    let served: BTreeSet<String> = vikingfs::server::routes::served()
        .iter()
        .map(|e| format!("{} {}", e.method, e.path))
        .collect();
    let missing: Vec<&String> = served
        .iter()
        .filter(|r| !doc.contains(&format!("`{r}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "routes served but not in docs/http-api.md's list: {missing:?}"
    );
    let listed: BTreeSet<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(r, _)| r.to_string()))
        .filter(|r| r.contains(" /"))
        .collect();
    let unserved: Vec<&String> = listed.difference(&served).collect();
    assert!(
        unserved.is_empty(),
        "docs/http-api.md lists routes the server does not answer: {unserved:?}"
    );
}
