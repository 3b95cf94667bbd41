//! Bad input and abuse against a real `vikingfs serve` (issue 24, part 7): no key or a wrong
//! key, a user key reaching another user's tree, malformed URIs, malformed JSON, a body over
//! the limit, a slow client, and a thousand requests at once.
//!
//! The routes that take a URI (`fs/*`, `content/*`, `search/*`) are checked wherever this tree
//! serves them; a route it does not serve (the router's own 404, which names no resource) is
//! skipped with a printed line and never counts as a refusal. What every such route relies on,
//! `Identity::path`, is unit-tested in `src/server/auth.rs`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::serve::{enc, http, Served};
use crate::support::vikingfs;

const ROOT: &str = "X-API-Key: root-secret";

/// A keyed daemon with small limits: 4 KiB bodies, 1 s for headers, 3 s per request.
fn strict() -> Served {
    Served::with_config(json!({ "server": {
        "root_api_key": "root-secret",
        "max_body_bytes": 4096,
        "header_timeout_secs": 1,
        "request_timeout_secs": 3,
    }}))
}

/// The router's own 404 for a path this tree does not serve: no route answered.
fn unrouted(code: u16, v: &Value) -> bool {
    code == 404
        && v["error"]["details"].is_null()
        && v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Not Found: /"))
}

/// One request to a URI-taking route: `GET path?uri=U` or `METHOD path` with a JSON body.
#[derive(Clone)]
enum Req {
    Get(&'static str, String),
    Delete(&'static str, String),
    Post(&'static str, Value),
}

impl Req {
    fn send(&self, s: &Served, headers: &[&str]) -> (u16, Value, String) {
        let (code, bytes) = match self {
            Req::Get(p, q) => s.call_raw("GET", &format!("{p}?{q}"), headers, None),
            Req::Delete(p, q) => s.call_raw("DELETE", &format!("{p}?{q}"), headers, None),
            Req::Post(p, body) => {
                let mut h = headers.to_vec();
                h.push("Content-Type: application/json");
                s.call_raw("POST", p, &h, Some(&serde_json::to_vec(body).unwrap()))
            }
        };
        let text = String::from_utf8_lossy(&bytes).to_string();
        (
            code,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            text,
        )
    }

    fn name(&self) -> String {
        match self {
            Req::Get(p, q) => format!("GET {p}?{q}"),
            Req::Delete(p, q) => format!("DELETE {p}?{q}"),
            Req::Post(p, b) => format!("POST {p} {b}"),
        }
    }
}

fn uri_q(u: &str) -> String {
    format!("uri={}", enc(u))
}

/// `content` written to `uri` through the CLI (the same locked write as every face's).
fn cli_write(s: &Served, uri: &str, content: &str) {
    let from = s.dir.path().join("content.tmp");
    std::fs::write(&from, content).unwrap();
    let out = vikingfs(&s.home)
        .arg("--workspace")
        .arg(&s.ws)
        .args(["write", "--from"])
        .arg(&from)
        .arg(uri)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "write {uri}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn data(s: &Served, rel: &str) -> std::path::PathBuf {
    s.ws.join("viking/default").join(rel)
}

#[test]
fn no_key_or_a_wrong_key_is_401_in_the_envelope() {
    let s = strict();
    for headers in [
        vec![],
        vec!["X-API-Key: wrong"],
        vec!["Authorization: Bearer wrong"],
        vec!["Authorization: Bearer "],
        vec!["Authorization: Basic cm9vdC1zZWNyZXQ="],
        // The root key with one byte more or less.
        vec!["X-API-Key: root-secretx"],
        vec!["X-API-Key: root-secre"],
    ] {
        for (method, path) in [
            ("GET", "/api/v1/system/status"),
            ("POST", "/api/v1/system/wait"),
            ("GET", "/api/v1/debug/health"),
            ("GET", "/api/v1/admin/accounts"),
        ] {
            let (code, v) = s.call(method, path, &headers, None);
            assert_eq!(code, 401, "{method} {path} {headers:?}: {v}");
            assert_eq!(v["status"], "error", "{v}");
            assert_eq!(v["error"]["code"], "UNAUTHENTICATED", "{v}");
            assert!(v["error"]["message"].is_string(), "{v}");
        }
    }
    // The probe of a load balancer needs no key; a key sent to it is checked, as OpenViking's.
    let (code, v) = s.call("GET", "/health", &[], None);
    assert_eq!(
        (code, v["auth_mode"].as_str()),
        (200, Some("api_key")),
        "{v}"
    );
    assert!(v["user_id"].is_null(), "{v}");
    let (code, v) = s.call("GET", "/health", &["X-API-Key: wrong"], None);
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (401, Some("UNAUTHENTICATED")),
        "{v}"
    );
    let (code, v) = s.call("GET", "/health", &[ROOT], None);
    assert_eq!((code, v["role"].as_str()), (200, Some("root")), "{v}");
    assert_eq!(s.call("GET", "/api/v1/system/status", &[ROOT], None).0, 200);
    assert_eq!(
        s.call(
            "GET",
            "/api/v1/system/status",
            &["Authorization: Bearer root-secret"],
            None
        )
        .0,
        200
    );
}

#[test]
fn a_user_key_never_reaches_another_users_tree() {
    let s = strict();
    let token = "TOPSECRETQZXV";
    std::fs::create_dir_all(data(&s, "user/alice")).unwrap();
    cli_write(
        &s,
        "viking://user/alice/secret.md",
        &format!("alice's {token} notes\n"),
    );
    let out = s.cli(&["key", "add", "--user", "bob"]);
    assert!(out.status.success());
    let bob = format!("X-API-Key: {}", String::from_utf8_lossy(&out.stdout).trim());
    // The root key acting as bob is bob.
    let root_as_bob = [ROOT, "X-OpenViking-User: bob"];

    // Asserting another identity than the key's: refused (this needs no route but status).
    let (code, v) = s.call(
        "GET",
        "/api/v1/system/status",
        &[&bob, "X-OpenViking-User: alice"],
        None,
    );
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (403, Some("PERMISSION_DENIED")),
        "{v}"
    );
    let (code, v) = s.call(
        "GET",
        "/api/v1/system/status",
        &[&bob, "X-OpenViking-Account: other"],
        None,
    );
    assert_eq!(code, 403, "{v}");
    let (code, v) = s.call(
        "GET",
        "/api/v1/system/status",
        &[&bob, "X-OpenViking-User: bob"],
        None,
    );
    assert_eq!(
        (code, v["result"]["user"].as_str()),
        (200, Some("bob")),
        "{v}"
    );
    let (code, v) = s.call("GET", "/api/v1/system/status", &root_as_bob, None);
    assert_eq!(
        (code, v["result"]["user"].as_str()),
        (200, Some("bob")),
        "{v}"
    );
    // Another account through the root key: not found, never served.
    let (code, v) = s.call(
        "GET",
        "/api/v1/system/status",
        &[ROOT, "X-OpenViking-Account: other"],
        None,
    );
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (404, Some("NOT_FOUND")),
        "{v}"
    );

    let secret = "viking://user/alice/secret.md";
    let dir = "viking://user/alice";
    let reads = [
        Req::Get("/api/v1/content/read", uri_q(secret)),
        Req::Get("/api/v1/content/download", uri_q(secret)),
        Req::Get("/api/v1/content/abstract", uri_q(dir)),
        Req::Get("/api/v1/content/overview", uri_q(dir)),
        Req::Get("/api/v1/fs/stat", uri_q(secret)),
        Req::Get("/api/v1/fs/ls", uri_q(dir)),
        Req::Get("/api/v1/fs/tree", uri_q(dir)),
        Req::Post("/api/v1/search/grep", json!({"uri": dir, "pattern": token})),
        Req::Post("/api/v1/search/glob", json!({"uri": dir, "pattern": "*"})),
        Req::Post(
            "/api/v1/search/find",
            json!({"query": token, "target_uri": dir}),
        ),
    ];
    let writes = [
        Req::Post(
            "/api/v1/content/write",
            json!({"uri": secret, "content": "overwritten", "mode": "replace"}),
        ),
        Req::Post(
            "/api/v1/content/write",
            json!({"uri": "viking://user/alice/new.md", "content": "x", "mode": "create"}),
        ),
        Req::Delete("/api/v1/fs", uri_q(secret)),
        Req::Delete("/api/v1/fs", format!("{}&recursive=true", uri_q(dir))),
        Req::Post(
            "/api/v1/fs/mv",
            json!({"from_uri": secret, "to_uri": "viking://resources/stolen.md"}),
        ),
        Req::Post(
            "/api/v1/fs/mv",
            json!({"from_uri": "viking://resources", "to_uri": "viking://user/alice/in"}),
        ),
        Req::Post(
            "/api/v1/fs/mkdir",
            json!({"uri": "viking://user/alice/made"}),
        ),
    ];
    let mut checked = 0;
    for who in [&[bob.as_str()][..], &root_as_bob[..]] {
        for r in reads.iter().chain(&writes) {
            let (code, v, text) = r.send(&s, who);
            if unrouted(code, &v) {
                eprintln!("skipped: {} is not served on this tree", r.name());
                continue;
            }
            checked += 1;
            assert!(
                matches!(
                    (code, v["error"]["code"].as_str()),
                    (403, Some("PERMISSION_DENIED")) | (404, Some("NOT_FOUND"))
                ),
                "{} as {who:?}: {code} {text}",
                r.name()
            );
            assert!(!text.contains(token), "{}: {text}", r.name());
        }
    }
    eprintln!("{checked} refusals checked");
    // Nothing of alice's changed, nothing was made in her tree or taken out of it.
    assert_eq!(
        std::fs::read_to_string(data(&s, "user/alice/secret.md")).unwrap(),
        format!("alice's {token} notes\n")
    );
    for gone in [
        "user/alice/new.md",
        "user/alice/made",
        "user/alice/in",
        "resources/stolen.md",
    ] {
        assert!(!data(&s, gone).exists(), "{gone} exists");
    }

    // Wide queries answer, without a word of hers.
    let (code, _) = s.call(
        "POST",
        "/api/v1/system/wait",
        &[ROOT],
        Some(b"{\"timeout\": 30}"),
    );
    assert_eq!(code, 200);
    for r in [
        Req::Get("/api/v1/fs/ls", uri_q("viking://user")),
        Req::Get("/api/v1/fs/tree", uri_q("viking://")),
        Req::Post(
            "/api/v1/search/grep",
            json!({"uri": "viking://", "pattern": token}),
        ),
        Req::Post(
            "/api/v1/search/glob",
            json!({"uri": "viking://", "pattern": "**/*.md"}),
        ),
        Req::Post("/api/v1/search/find", json!({"query": token})),
        Req::Post("/api/v1/search/search", json!({"query": token})),
    ] {
        let (code, v, text) = r.send(&s, &[&bob]);
        if unrouted(code, &v) {
            eprintln!("skipped: {} is not served on this tree", r.name());
            continue;
        }
        assert!(
            !text.contains(token) && !text.contains("secret.md") && !text.contains("alice"),
            "{}: {code} {text}",
            r.name()
        );
    }
}

#[test]
fn malformed_uris_and_names_are_400() {
    let s = strict();
    let long = format!("viking://resources/{}", "x".repeat(256));
    let bad = [
        "viking://resources/../../x",
        "viking://resources/a/../../../x",
        "viking://resources/a\0b",
        long.as_str(),
        "viking://resources//x",
        "file:///etc/passwd",
    ];
    let mut checked = 0;
    for u in bad {
        for r in [
            Req::Get("/api/v1/fs/stat", uri_q(u)),
            Req::Get("/api/v1/content/read", uri_q(u)),
            Req::Get("/api/v1/fs/ls", uri_q(u)),
            Req::Post(
                "/api/v1/content/write",
                json!({"uri": u, "content": "x", "mode": "create"}),
            ),
            Req::Post("/api/v1/fs/mkdir", json!({"uri": u})),
            Req::Delete("/api/v1/fs", uri_q(u)),
        ] {
            let (code, v, text) = r.send(&s, &[ROOT]);
            if unrouted(code, &v) {
                eprintln!("skipped: {} is not served on this tree", r.name());
                continue;
            }
            checked += 1;
            assert_eq!(code, 400, "{}: {text}", r.name());
            assert!(
                matches!(
                    v["error"]["code"].as_str(),
                    Some("INVALID_URI" | "INVALID_ARGUMENT")
                ),
                "{}: {text}",
                r.name()
            );
        }
    }
    eprintln!("{checked} malformed URIs checked");
    for escaped in ["x", "viking/x", "viking/default/x"] {
        assert!(!s.ws.join(escaped).exists(), "{escaped} was made");
    }
    // Names in the identity headers: the same rules, on every tree.
    let long_name = "u".repeat(129);
    for bad_user in ["..", "../alice", "a/b", long_name.as_str(), "a b"] {
        let h = format!("X-OpenViking-User: {bad_user}");
        let (code, v) = s.call("GET", "/api/v1/system/status", &[ROOT, &h], None);
        assert_eq!(
            (code, v["error"]["code"].as_str()),
            (400, Some("INVALID_ARGUMENT")),
            "{bad_user}: {v}"
        );
    }
    // A NUL in a path is refused before any route (it is not valid in a request line).
    let (code, _) = s.call_raw(
        "GET",
        "/api/v1/fs/stat?uri=viking://resources/a\0b",
        &[ROOT],
        None,
    );
    assert_eq!(code, 400);
}

#[test]
fn malformed_json_is_400_in_the_envelope() {
    let s = strict();
    for (path, body) in [
        ("/api/v1/system/wait", &b"{not json"[..]),
        ("/api/v1/system/wait", b"{\"timeout\": 1"),
        ("/api/v1/system/wait", b"{\"timeout\": \"soon\"}"),
        ("/api/v1/system/wait", b"[1, 2]"),
        ("/api/v1/system/wait", b"\xff\xfe"),
        ("/api/v1/admin/accounts/default/users", b"{\"user_id\": 5}"),
        (
            "/api/v1/admin/accounts/default/users",
            b"{\"role\": \"user\"}",
        ),
        ("/api/v1/admin/accounts", b"nul\0l"),
        (
            "/api/v1/content/write",
            b"{\"uri\": \"viking://resources/x.md\", \"content\": ",
        ),
        ("/api/v1/search/find", b"{\"query\": [}"),
        ("/api/v1/sessions", b"{{"),
    ] {
        let (code, v) = s.call(
            "POST",
            path,
            &[ROOT, "Content-Type: application/json"],
            Some(body),
        );
        if unrouted(code, &v) {
            eprintln!("skipped: POST {path} is not served on this tree");
            continue;
        }
        assert_eq!(code, 400, "{path} {:?}: {v}", String::from_utf8_lossy(body));
        assert_eq!(
            (v["status"].as_str(), v["error"]["code"].as_str()),
            (Some("error"), Some("INVALID_ARGUMENT")),
            "{path}: {v}"
        );
    }
    // The field that does not fit is named.
    let (_, v) = s.call(
        "POST",
        "/api/v1/system/wait",
        &[ROOT],
        Some(b"{\"timeout\": \"soon\"}"),
    );
    assert!(
        v["error"]["message"].as_str().unwrap().contains("timeout"),
        "{v}"
    );
    // JSON sent as text/plain (or with no type) is still read.
    let (code, v) = s.call(
        "POST",
        "/api/v1/system/wait",
        &[ROOT, "Content-Type: text/plain"],
        Some(b"{\"timeout\": 1}"),
    );
    assert_eq!(code, 200, "{v}");
}

#[test]
fn a_body_over_the_limit_is_413_in_the_envelope() {
    let s = strict();
    let big = format!("{{\"timeout\": 1, \"pad\": \"{}\"}}", "x".repeat(16 << 10));
    let big_write = serde_json::to_vec(&json!({
        "uri": "viking://resources/big.md", "content": "y".repeat(16 << 10), "mode": "create",
    }))
    .unwrap();
    for (path, body) in [
        ("/api/v1/system/wait", big.as_bytes()),
        ("/api/v1/admin/accounts/default/users", big.as_bytes()),
        ("/api/v1/content/write", &big_write[..]),
    ] {
        let (code, v) = s.call(
            "POST",
            path,
            &[ROOT, "Content-Type: application/json"],
            Some(body),
        );
        if unrouted(code, &v) {
            eprintln!("skipped: POST {path} is not served on this tree");
            continue;
        }
        assert_eq!(code, 413, "{path}: {v}");
        assert_eq!(v["status"], "error", "{v}");
        assert!(
            v["error"]["code"].is_string() && v["error"]["message"].is_string(),
            "{v}"
        );
    }
    assert!(!data(&s, "resources/big.md").exists());
    // Under the limit the same request is read.
    let (code, v) = s.call(
        "POST",
        "/api/v1/system/wait",
        &[ROOT],
        Some(b"{\"timeout\": 1}"),
    );
    assert_eq!(code, 200, "{v}");
}

/// Connect, send `head`, and time how long until the server ends the connection.
fn cut_off_after(s: &Served, head: &[u8]) -> (Duration, Vec<u8>) {
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(head).unwrap();
    let started = Instant::now();
    // Others are served meanwhile.
    let (code, _) = s.call("GET", "/health", &[], None);
    assert_eq!(code, 200);
    let mut got = Vec::new();
    match c.read_to_end(&mut got) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("the slow client was not cut off: {e}"),
    }
    (started.elapsed(), got)
}

#[test]
fn a_slow_client_is_cut_off() {
    let s = strict();
    // Half a header, then nothing: cut off after server.header_timeout_secs (1 s here).
    let (took, got) = cut_off_after(
        &s,
        b"GET /api/v1/system/status HTTP/1.1\r\nHost: x\r\nX-API-Key: root-se",
    );
    assert!(took < Duration::from_secs(8), "{took:?}");
    assert!(!String::from_utf8_lossy(&got).contains("200 OK"), "{got:?}");
    // A connection that never sends a byte.
    let (took, _) = cut_off_after(&s, b"");
    assert!(took < Duration::from_secs(8), "{took:?}");
    // Headers whole, the body trickling: the request's own timeout (3 s here) ends it, in the
    // envelope.
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(
        b"POST /api/v1/system/wait HTTP/1.1\r\nHost: x\r\nX-API-Key: root-secret\r\n\
          Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"timeout\"",
    )
    .unwrap();
    let started = Instant::now();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(text.starts_with("HTTP/1.1 504"), "{text}");
    assert!(
        text.contains("\"DEADLINE_EXCEEDED\""),
        "not the envelope: {text}"
    );
    // And the daemon goes on.
    assert_eq!(s.call("GET", "/api/v1/system/status", &[ROOT], None).0, 200);
}

#[test]
fn a_thousand_concurrent_requests_leave_it_serving_and_each_write_whole() {
    const N: usize = 1000;
    let s = Served::with_config(json!({ "server": { "root_api_key": "root-secret" } }));
    // Writes of distinct files where this tree serves content/write; else system/wait.
    let probe = json!({"uri": "viking://resources/probe.md", "content": "p", "mode": "create"});
    let (code, v) = s.json("POST", "/api/v1/content/write", &[ROOT], &probe);
    let writes = !unrouted(code, &v);
    if !writes {
        eprintln!("skipped writes: POST /api/v1/content/write is not served on this tree; {N} POST /api/v1/system/wait instead");
    }
    let content = |i: usize| format!("file {i}\n{}\nend {i}\n", "z".repeat(1000 + i));
    let addr = s.addr;
    let start = Arc::new(Barrier::new(N));
    let started = Instant::now();
    let answers: Vec<(usize, Option<u16>)> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..N)
            .map(|i| {
                let start = start.clone();
                let body = if writes {
                    serde_json::to_vec(&json!({
                        "uri": format!("viking://resources/c{i:04}.md"),
                        "content": content(i),
                        "mode": "create",
                    }))
                    .unwrap()
                } else {
                    b"{\"timeout\": 5}".to_vec()
                };
                std::thread::Builder::new()
                    .stack_size(256 << 10)
                    .spawn_scoped(sc, move || {
                        start.wait();
                        let path = if writes {
                            "/api/v1/content/write"
                        } else {
                            "/api/v1/system/wait"
                        };
                        // A connection refused or reset is an answer missing, not a refusal.
                        let r = std::panic::catch_unwind(|| {
                            http(
                                addr,
                                "POST",
                                path,
                                &[ROOT, "Content-Type: application/json"],
                                Some(&body),
                            )
                            .0
                        });
                        (i, r.ok())
                    })
                    .unwrap()
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let took = started.elapsed();
    let missing: Vec<_> = answers.iter().filter(|(_, c)| c.is_none()).collect();
    assert!(
        missing.is_empty(),
        "{} requests got no answer",
        missing.len()
    );
    let ok = answers.iter().filter(|(_, c)| *c == Some(200)).count();
    eprintln!("{N} concurrent requests in {took:?}: {ok} answered 200");
    if writes {
        for (i, c) in &answers {
            let path = data(&s, &format!("resources/c{i:04}.md"));
            match c {
                Some(200) => assert_eq!(
                    std::fs::read_to_string(&path).unwrap_or_default(),
                    content(*i),
                    "file {i} answered 200 but is not whole"
                ),
                Some(code) => {
                    assert!(*code >= 400, "{i}: {code}");
                    assert!(!path.exists(), "file {i} was refused ({code}) but exists");
                }
                None => unreachable!(),
            }
        }
    } else {
        assert_eq!(ok, N, "{answers:?}");
    }
    // The daemon goes on serving.
    assert_eq!(s.call("GET", "/health", &[], None).0, 200);
    let (code, v) = s.call("GET", "/api/v1/system/status", &[ROOT], None);
    assert_eq!(code, 200, "{v}");
    let mut child = s;
    assert!(
        child.child.try_wait().unwrap().is_none(),
        "the daemon exited"
    );
}
