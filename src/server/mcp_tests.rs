//! The tools over stub routes: the request each one forms (method, path, query, body, the
//! caller's headers), and the texts it writes of the answers: the answers are shaped as
//! OpenViking 0.5.2's routes answered, the texts are what its own MCP tools wrote of them.

use super::*;

use std::collections::HashMap;

use parking_lot::Mutex;

/// One request a stub route saw.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    uri: String,
    body: Value,
    headers: HeaderMap,
    local: bool,
}

/// Stub routes: files in a map, and every request kept in order.
#[derive(Default)]
struct Stub {
    files: Mutex<HashMap<String, String>>,
    seen: Mutex<Vec<Seen>>,
}

fn query(uri: &str) -> HashMap<String, String> {
    let q = uri.split_once('?').map(|(_, q)| q).unwrap_or("");
    serde_urlencoded::from_str(q).unwrap()
}

fn ok(result: Value) -> Response {
    axum::Json(json!({ "status": "ok", "result": result })).into_response()
}

fn error(status: u16, code: &str, message: String) -> Response {
    let body = json!({"status": "error", "error": {"code": code, "message": message}});
    (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response()
}

async fn answer(stub: Arc<Stub>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let uri = parts.uri.to_string();
    stub.seen.lock().push(Seen {
        method: parts.method.clone(),
        uri: uri.clone(),
        body: body.clone(),
        headers: parts.headers.clone(),
        local: parts.extensions.get::<Local>().is_some(),
    });
    let q = query(&uri);
    let path = parts.uri.path();
    match (parts.method.as_str(), path) {
        ("GET", "/health") => axum::Json(json!({"status": "ok", "healthy": true})).into_response(),
        ("POST", "/api/v1/content/write") => {
            let (u, content) = (
                body["uri"].as_str().unwrap(),
                body["content"].as_str().unwrap(),
            );
            stub.files.lock().insert(u.into(), content.into());
            ok(
                json!({"uri": u, "mode": body["mode"], "written_bytes": content.len(),
                      "semantic_status": "queued", "vector_status": "queued"}),
            )
        }
        ("GET", "/api/v1/content/read") => match stub.files.lock().get(&q["uri"]) {
            Some(c) => ok(json!(c)),
            None => error(404, "NOT_FOUND", format!("File not found: {}", q["uri"])),
        },
        ("GET", "/api/v1/fs/ls") => {
            let e = |n: &str, d: bool| json!({"name": n, "isDir": d, "uri": format!("{}/{n}", q["uri"])});
            let mut v = ok(json!([e("alpha", true), e("sub", true)]));
            if q.contains_key("node_limit") {
                // OpenViking puts has_more beside the result, not in it.
                v = axum::Json(
                    json!({"status": "ok", "result": [e("alpha", true)], "has_more": true}),
                )
                .into_response();
            }
            v
        }
        ("GET", "/api/v1/fs/tree") if q["uri"].ends_with("/nope") => {
            error(404, "NOT_FOUND", format!("File not found: {}", q["uri"]))
        }
        ("GET", "/api/v1/fs/tree") => {
            let e = |rel: &str, d: bool, size: u64| {
                json!({"rel_path": rel, "isDir": d, "size": size,
                "name": rel.rsplit('/').next().unwrap()})
            };
            ok(json!([
                e("alpha", true, 4096),
                e("alpha/alpha.md", false, 110),
                e("sub", true, 4096),
                e("sub/beta", true, 4096)
            ]))
        }
        ("GET", "/api/v1/fs/stat") => ok(json!({"isDir": false, "size": 8})),
        ("GET", "/api/v1/content/download") => {
            (StatusCode::OK, b"\x89PNG\r\n\x1a\n".to_vec()).into_response()
        }
        ("DELETE", "/api/v1/fs") => ok(json!({ "uri": q["uri"] })),
        ("POST", "/api/v1/search/search") if body["mode"] == "context" => {
            ok(json!({"entries": [], "rendered": "ctx block", "digest": " "}))
        }
        ("POST", "/api/v1/search/find" | "/api/v1/search/search") => ok(json!({
            "memories": [],
            "resources": [{"context_type": "resource", "uri": "viking://resources/docs/alpha/alpha.md",
                "level": 2, "score": 0.6679790019989014, "abstract": "Summary: # Alpha guide The alpha"},
                {"context_type": "resource", "uri": "viking://user/bob/resources/.overview.md",
                "level": 1, "score": 0.6414213180541992, "abstract": "User-owned resource storage."}],
            "skills": [{"context_type": "skill", "uri": "viking://user/bob/skills/.overview.md",
                "level": 1, "score": 0.63, "abstract": "User skill registry."}],
            "total": 3,
        })),
        ("POST", "/api/v1/search/grep") if body["pattern"] == "alpha" => ok(json!({"matches": [
            {"line": 3, "uri": "viking://resources/docs/alpha/alpha.md",
             "content": "The alpha service handles authentication tokens and login flows."}],
            "count": 1})),
        ("POST", "/api/v1/search/grep") if body["pattern"] == "(" => {
            error(400, "INVALID_ARGUMENT", "bad regex".into())
        }
        ("POST", "/api/v1/search/grep") => ok(json!({"matches": [], "count": 0})),
        ("POST", "/api/v1/search/glob") => ok(json!({"matches": [
            "viking://resources/docs/alpha/alpha.md", "viking://resources/docs/sub/beta/beta.md"],
            "count": 2})),
        ("POST", p) if p.ends_with("/messages/batch") => {
            ok(json!({"added": body["messages"].as_array().unwrap().len()}))
        }
        ("POST", p) if p.ends_with("/commit") => {
            ok(json!({"status": "accepted", "task_id": "t-1"}))
        }
        ("POST", "/api/v1/resources") => {
            ok(json!({"status": "success", "root_uri": "viking://resources/x"}))
        }
        _ => error(404, "NOT_FOUND", format!("Not Found: {path}")),
    }
}

fn stub() -> (Arc<Stub>, Tools) {
    let stub = Arc::new(Stub::default());
    let s = stub.clone();
    let router = Router::new().fallback(move |req: Request| answer(s.clone(), req));
    (
        stub,
        Tools {
            up: Upstream::router(router),
        },
    )
}

/// A caller with a key and a user header, as an MCP HTTP request carries them.
fn caller() -> Caller {
    let mut headers = HeaderMap::new();
    headers.insert("authorization", "Bearer k".parse().unwrap());
    headers.insert("x-openviking-user", "bob".parse().unwrap());
    Caller {
        headers,
        local: false,
        call: None,
    }
}

/// Call tool `name` as the MCP client would: its result as the client sees it.
async fn call(tools: &Tools, name: &str, args: Value) -> Value {
    let tool = tools.get_tool(name).unwrap();
    let outcome = tools.dispatch(name, &caller(), args).await;
    serde_json::to_value(to_result(outcome, tool.output_schema.is_some())).unwrap()
}

fn text(r: &Value) -> &str {
    r["content"][0]["text"].as_str().unwrap()
}

#[tokio::test]
async fn each_tool_is_its_route_and_writes_openvikings_text() {
    let (stub, tools) = stub();
    let r = call(
        &tools,
        "write",
        json!({"uri": "viking://resources/mcp/note.md",
                                          "content": "hello mcp world"}),
    )
    .await;
    assert_eq!(
        text(&r),
        "Wrote 15 bytes to viking://resources/mcp/note.md (mode=replace).\nIndexing: \
         semantic=queued, vector=queued. Search indexes update in the background; pass wait=true \
         if a follow-up search must see this change immediately."
    );
    assert_eq!(r["structuredContent"]["result"], text(&r));
    {
        let seen = stub.seen.lock();
        let w = seen.last().unwrap();
        assert_eq!(
            (w.method.as_str(), w.uri.as_str()),
            ("POST", "/api/v1/content/write")
        );
        assert_eq!(
            w.body,
            json!({"uri": "viking://resources/mcp/note.md",
                                  "content": "hello mcp world", "mode": "replace", "wait": false})
        );
        assert_eq!(
            w.headers["authorization"], "Bearer k",
            "the caller's key goes along"
        );
        assert_eq!(w.headers["x-openviking-user"], "bob");
    }

    let r = call(
        &tools,
        "edit",
        json!({"uri": "viking://resources/mcp/note.md",
                                         "old_string": "mcp", "new_string": "MCP"}),
    )
    .await;
    assert!(text(&r).starts_with("Edited viking://resources/mcp/note.md (15 bytes written).\n"));
    let r = call(
        &tools,
        "edit",
        json!({"uri": "viking://resources/mcp/note.md",
                                         "old_string": "zzz", "new_string": "y"}),
    )
    .await;
    assert_eq!(r["isError"], true);
    assert_eq!(
        text(&r),
        "INVALID_ARGUMENT: old_string not found in viking://resources/mcp/note.md. Re-read the \
         file with the read tool to get its current content."
    );
    assert_eq!(r["structuredContent"]["error"]["code"], "INVALID_ARGUMENT");

    let r = call(
        &tools,
        "read",
        json!({"uris": ["viking://resources/mcp/note.md"]}),
    )
    .await;
    assert_eq!(text(&r), "hello MCP world");
    assert!(
        r.get("structuredContent").is_none(),
        "read has no structured result: {r}"
    );
    let r = call(
        &tools,
        "read",
        json!({"uris": ["viking://resources/mcp/note.md",
                                                  "viking://resources/nope.md"]}),
    )
    .await;
    assert_eq!(
        text(&r),
        "=== viking://resources/mcp/note.md ===\nhello MCP world\n\n=== \
         viking://resources/nope.md ===\nNOT_FOUND: File not found: viking://resources/nope.md"
    );
    assert_eq!(r["isError"], false);
    let r = call(
        &tools,
        "read",
        json!({"uris": "viking://resources/nope.md"}),
    )
    .await;
    assert_eq!(r["isError"], true);
    assert!(stub.seen.lock().last().unwrap().uri.starts_with(
        "/api/v1/content/read?uri=viking%3A%2F%2Fresources%2Fnope.md&offset=0&limit=-1"
    ));

    let r = call(
        &tools,
        "fetch",
        json!({"id": "viking://resources/mcp/note.md"}),
    )
    .await;
    let doc: Value = serde_json::from_str(text(&r)).unwrap();
    assert_eq!(doc["text"], "hello MCP world");
    assert_eq!(doc["title"], "note.md");
    assert_eq!(r["structuredContent"], doc);

    let r = call(&tools, "list", json!({"uri": "viking://resources/docs"})).await;
    assert_eq!(text(&r), "[dir] alpha\n[dir] sub");
    let r = call(
        &tools,
        "list",
        json!({"uri": "viking://resources", "recursive": true, "limit": 1}),
    )
    .await;
    assert_eq!(
        text(&r),
        "[dir] viking://resources/alpha\n(more entries available; use offset and limit to view \
         the next page)"
    );
    let r = call(&tools, "list", json!({"offset": -1})).await;
    assert_eq!(
        text(&r),
        "INVALID_ARGUMENT: offset must be greater than or equal to 0"
    );

    let r = call(
        &tools,
        "tree",
        json!({"uri": "viking://resources/docs", "level_limit": 2}),
    )
    .await;
    assert_eq!(
        text(&r),
        "Tree of viking://resources/docs (depth <= 2, 4 entries):\nalpha/\n  alpha.md (110 B)\n\
         sub/\n  beta/"
    );
    let r = call(&tools, "tree", json!({"uri": "viking://resources/nope"})).await;
    assert_eq!(text(&r), "(nothing under viking://resources/nope)");

    let r = call(
        &tools,
        "find",
        json!({"query": "authentication tokens", "limit": 3}),
    )
    .await;
    assert_eq!(
        text(&r),
        "Found 3 item(s):\n\n- [resource 67%] viking://resources/docs/alpha/alpha.md\n    \
         Summary: # Alpha guide The alpha\n- [resource 64%] \
         viking://user/bob/resources/.overview.md\n    User-owned resource storage.\n- [skill \
         63%] viking://user/bob/skills/.overview.md\n    User skill registry.\n\nUse the read \
         tool to expand a URI."
    );
    assert_eq!(
        stub.seen.lock().last().unwrap().body,
        json!({"query": "authentication tokens", "target_uri": "", "limit": 3,
               "score_threshold": 0.35, "read_content": false})
    );

    let r = call(
        &tools,
        "grep",
        json!({"uri": "viking://resources", "pattern": ["alpha", "beta"]}),
    )
    .await;
    assert_eq!(
        text(&r),
        "Found 1 match(es) across 2 pattern(s):\n\nviking://resources/docs/alpha/alpha.md\n  L3 \
         [alpha]: The alpha service handles authentication tokens and login flows."
    );
    let r = call(
        &tools,
        "grep",
        json!({"uri": "viking://resources", "pattern": "("}),
    )
    .await;
    assert_eq!(r["isError"], true);
    assert_eq!(
        text(&r),
        "grep failed for every pattern:\n  (: INVALID_ARGUMENT: bad regex"
    );
    let r = call(
        &tools,
        "grep",
        json!({"uri": "viking://resources", "pattern": ["nomatchxyz"]}),
    )
    .await;
    assert_eq!(text(&r), "No matches found for pattern(s): nomatchxyz");

    let r = call(
        &tools,
        "glob",
        json!({"pattern": "**/*.md", "uri": "viking://resources/docs"}),
    )
    .await;
    assert_eq!(
        text(&r),
        "Found 2 file(s):\n  viking://resources/docs/alpha/alpha.md\n  \
         viking://resources/docs/sub/beta/beta.md"
    );

    let r = call(
        &tools,
        "forget",
        json!({"uri": "viking://resources/nonexist"}),
    )
    .await;
    assert_eq!(text(&r), "Deleted: viking://resources/nonexist");
    let last = stub.seen.lock().last().unwrap().clone();
    assert_eq!(last.method, Method::DELETE);
    assert_eq!(
        last.uri,
        "/api/v1/fs?uri=viking%3A%2F%2Fresources%2Fnonexist&recursive=false"
    );

    let r = call(&tools, "health", json!({})).await;
    assert_eq!(
        text(&r),
        "OpenViking is healthy (service initialized, storage: VikingFS)"
    );
}

#[tokio::test]
async fn remember_is_a_session_committed() {
    let (stub, tools) = stub();
    let r = call(
        &tools,
        "remember",
        json!({"messages": [
        {"role": "user", "content": "I prefer tabs over spaces"},
        {"role": "assistant", "content": ""}]}),
    )
    .await;
    let t = text(&r);
    assert!(
        t.starts_with("Submitted 1 message(s) for memory extraction (session mcp-store-"),
        "{t}"
    );
    assert!(
        t.ends_with(
            ", task_id=t-1). Extraction runs in the background and decides which \
                         memories to create or update."
        ),
        "{t}"
    );
    let seen = stub.seen.lock();
    let (batch, commit) = (&seen[0], &seen[1]);
    let session = batch.uri.strip_suffix("/messages/batch").unwrap();
    assert!(
        session.starts_with("/api/v1/sessions/mcp-store-"),
        "{}",
        batch.uri
    );
    assert_eq!(commit.uri, format!("{session}/commit"));
    assert_eq!(
        batch.body,
        json!({"messages": [{"role": "user",
                                                 "content": "I prefer tabs over spaces"}]})
    );
}

#[tokio::test]
async fn add_resource_posts_the_source_and_refuses_what_openviking_refuses() {
    let (stub, tools) = stub();
    let r = call(
        &tools,
        "add_resource",
        json!({"path": "https://example.com/a.md",
                                                 "parent": "viking://resources/web"}),
    )
    .await;
    assert_eq!(text(&r), "Resource added: viking://resources/x");
    assert_eq!(
        stub.seen.lock().last().unwrap().body,
        json!({"path": "https://example.com/a.md", "parent": "viking://resources/web",
               "create_parent": true, "reason": "", "wait": false, "watch_interval": 0.0})
    );
    let r = call(&tools, "add_resource", json!({"path": "upload_abc.zip"})).await;
    assert_eq!(r["isError"], true);
    assert!(text(&r).starts_with("Error: 'upload_abc.zip' looks like a temp_file_id"));
    let r = call(&tools, "add_resource", json!({})).await;
    assert_eq!(
        text(&r),
        "Error: provide either 'path' (remote URL or local file) or 'temp_file_id'."
    );
}

#[tokio::test]
async fn add_skill_posts_the_skill_text_and_says_why_a_path_is_not_taken() {
    let (stub, tools) = stub();
    let md = "---\nname: s\ndescription: d\n---\nbody\n";
    call(
        &tools,
        "add_skill",
        json!({"data": md, "target_uri": "viking://agent/skills"}),
    )
    .await;
    let seen = stub.seen.lock().last().cloned().unwrap();
    assert_eq!(seen.uri, "/api/v1/skills");
    assert_eq!(
        seen.body,
        json!({"data": md, "skills": [], "list_only": false,
               "target_uri": "viking://agent/skills"})
    );
    let before = stub.seen.lock().len();
    for (args, starts) in [
        (
            json!({"data": md, "path": "/x"}),
            "Error: pass either 'data' (SKILL.md text) or 'path', not both.",
        ),
        (
            json!({}),
            "Error: provide 'data' (full SKILL.md text) or 'path'",
        ),
        (
            json!({"path": "viking://agent/skills/s"}),
            "Error: 'path' must be a Git URL or a local path.",
        ),
        (
            json!({"path": "https://github.com/a/b"}),
            "Error: vikingfs installs a skill from its SKILL.md text only",
        ),
    ] {
        let r = call(&tools, "add_skill", args).await;
        assert_eq!(r["isError"], true, "{r}");
        assert!(text(&r).starts_with(starts), "{}", text(&r));
    }
    assert_eq!(
        stub.seen.lock().len(),
        before,
        "a refused call asks nothing"
    );
}

#[tokio::test]
async fn a_route_that_is_not_there_is_a_tool_error_with_its_code() {
    // The API's fallback, as routes/mod.rs answers an unknown route.
    let router = Router::new().fallback(|req: Request| async move {
        error(404, "NOT_FOUND", format!("Not Found: {}", req.uri().path()))
    });
    let tools = Tools {
        up: Upstream::router(router),
    };
    let r = call(&tools, "search", json!({"query": "x"})).await;
    assert_eq!(r["isError"], true);
    assert_eq!(text(&r), "NOT_FOUND: Not Found: /api/v1/search/search");
    assert_eq!(r["structuredContent"]["error"]["code"], "NOT_FOUND");
    let r = call(&tools, "find", json!({"limit": 3})).await;
    assert_eq!(r["isError"], true, "a missing required argument: {r}");
}

#[tokio::test]
async fn search_lists_for_connectors_or_assembles_a_context() {
    let (stub, tools) = stub();
    let r = call(
        &tools,
        "search",
        json!({"query": "vector embeddings", "limit": 3}),
    )
    .await;
    assert!(text(&r).starts_with("Found 3 item(s):"), "{r}");
    let results = &r["structuredContent"]["results"];
    assert_eq!(
        results[0],
        json!({"id": "viking://resources/docs/alpha/alpha.md", "title": "alpha.md",
               "url": "viking://resources/docs/alpha/alpha.md"})
    );
    assert_eq!(r["structuredContent"]["result"], text(&r));
    assert_eq!(
        stub.seen.lock().last().unwrap().body,
        json!({"query": "vector embeddings", "target_uri": "", "limit": 3,
               "score_threshold": 0.35, "read_content": false}),
        "no context-only field is sent unless given"
    );
    let r = call(
        &tools,
        "search",
        json!({"query": "q", "mode": "context", "max_tokens": 800,
                                           "detail_by_category": {"memory": "full"}}),
    )
    .await;
    assert_eq!(
        text(&r),
        "ctx block",
        "the digest is blank: the rendered block"
    );
    assert_eq!(
        stub.seen.lock().last().unwrap().body,
        json!({"query": "q", "mode": "context", "limit": 10, "max_tokens": 800,
               "detail": {"memory": "full"}})
    );
    let r = call(
        &tools,
        "search",
        json!({"query": "q", "mode": "context", "detail": "full",
                                           "detail_by_category": {"memory": "full"}}),
    )
    .await;
    assert_eq!(
        text(&r),
        "INVALID_ARGUMENT: detail cannot be combined with detail_by_category in mode='context'"
    );
}

#[tokio::test]
async fn an_image_is_read_as_an_image_block() {
    let (stub, tools) = stub();
    let r = call(&tools, "read", json!({"uris": "viking://resources/a.png"})).await;
    assert_eq!(text(&r), "Source: viking://resources/a.png");
    assert_eq!(r["content"][1]["type"], "image", "{r}");
    assert_eq!(r["content"][1]["mimeType"], "image/png");
    assert_eq!(r["content"][1]["data"], "iVBORw0KGgo=");
    {
        let seen = stub.seen.lock();
        assert!(seen[0].uri.starts_with("/api/v1/fs/stat?uri="));
        assert!(seen[1].uri.starts_with("/api/v1/content/download?uri="));
    }
    let r = call(&tools, "read", json!({"uris": "viking://resources/a.mp4"})).await;
    assert_eq!(r["isError"], true);
    assert!(text(&r).starts_with("Cannot render viking://resources/a.mp4: MCP has no standard"));
}

#[tokio::test]
async fn a_caller_on_the_socket_stays_the_owner_and_stdio_sends_no_headers() {
    let (stub, tools) = stub();
    let local = Caller {
        headers: HeaderMap::new(),
        local: true,
        call: None,
    };
    tools.dispatch("health", &local, json!({})).await.unwrap();
    tools
        .dispatch("health", &caller(), json!({}))
        .await
        .unwrap();
    let seen = stub.seen.lock();
    assert!(seen[0].local && seen[0].headers.get("authorization").is_none());
    assert!(!seen[1].local, "a TCP caller is not the owner");
}

#[test]
fn the_tools_are_openvikings_core_tools_with_its_annotations() {
    let names: Vec<&str> = TOOLS.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "find",
            "search",
            "read",
            "list",
            "tree",
            "grep",
            "glob",
            "write",
            "edit",
            "remember",
            "forget",
            "add_resource",
            "add_skill",
            "health",
            "fetch",
            // OpenViking 0.5.2's others (add_skill is the skill routes'): served where a
            // route answers them, else an error saying why.
            "list_users",
            "list_groups",
            "get_acl",
            "set_acl",
            "privacy_tree",
            "privacy_resolve",
            "privacy_upsert",
            "download",
            "list_watches",
            "cancel_watch"
        ]
    );
    for t in TOOLS.iter() {
        let a = t.annotations.as_ref().expect("annotated");
        let read_only = a.read_only_hint == Some(true);
        let expected = matches!(
            t.name.as_ref(),
            "find"
                | "read"
                | "list"
                | "tree"
                | "grep"
                | "glob"
                | "health"
                | "fetch"
                | "list_users"
                | "list_groups"
                | "get_acl"
                | "privacy_tree"
                | "privacy_resolve"
                | "download"
                | "list_watches"
        );
        assert_eq!(read_only, expected, "{}", t.name);
        assert_eq!(a.destructive_hint == Some(true), !read_only, "{}", t.name);
    }
}

#[test]
fn skill_hits_point_at_their_package() {
    assert_eq!(
        hit_uri("skill", "viking://agent/skills/pdf/scripts/a.py"),
        "viking://agent/skills/pdf/SKILL.md"
    );
    assert_eq!(
        hit_uri("skill", "viking://user/bob/skills/pdf/.abstract.md"),
        "viking://user/bob/skills/pdf/SKILL.md"
    );
    assert_eq!(
        hit_uri("skill", "viking://user/bob/skills/.overview.md"),
        "viking://user/bob/skills/.overview.md"
    );
    assert_eq!(
        hit_uri("resource", "viking://agent/skills/pdf/a.py"),
        "viking://agent/skills/pdf/a.py"
    );
}

#[test]
fn hits_read_as_openvikings_text() {
    let r = json!({
        "memories": [],
        "resources": [{"context_type": "resource", "uri": "viking://resources/a.md",
                       "level": 2, "score": 0.6679, "abstract": "Alpha guide "}],
        "skills": [{"context_type": "skill", "uri": "viking://user/bob/skills/.overview.md",
                    "score": 0.63, "abstract": "skills"}],
    });
    let (text, results) = format_hits(&r, false);
    assert_eq!(
        text,
        "Found 2 item(s):\n\n- [resource 67%] viking://resources/a.md\n    Alpha guide\n- \
         [skill 63%] viking://user/bob/skills/.overview.md\n    skills\n\nUse the read tool \
         to expand a URI."
    );
    assert_eq!(results[0]["id"], "viking://resources/a.md");
    assert_eq!(results[0]["title"], "a.md");
    assert_eq!(
        format_hits(&json!({}), false).0,
        "No matching context found."
    );
}

#[test]
fn temp_file_ids_are_told_from_paths() {
    assert!(looks_like_temp_file_id("upload_b111265e07984cb0.zip"));
    assert!(looks_like_temp_file_id("shared_abc"));
    assert!(!looks_like_temp_file_id("/tmp/upload_x.zip"));
    assert!(!looks_like_temp_file_id("upload_"));
}
