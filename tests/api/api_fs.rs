//! The filesystem, content and resource routes over plain HTTP, as OpenViking 0.5.2 shapes
//! them: what each answers, what each refuses (a missing URI, a bad one, a held lock, another
//! user's tree, a symlink, a hostile archive).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::serve::{Served, DIR_ZIP};

/// `s` with the query value `v` percent-encoded.
fn q(v: &str) -> String {
    let mut out = String::new();
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn get(s: &Served, path: &str) -> (u16, Value) {
    s.call("GET", path, &[], None)
}

fn write(s: &Served, uri: &str, content: &str, mode: &str) -> (u16, Value) {
    s.json(
        "POST",
        "/api/v1/content/write",
        &[],
        &json!({ "uri": uri, "content": content, "mode": mode }),
    )
}

fn ok(r: (u16, Value)) -> Value {
    assert_eq!(r.0, 200, "{}", r.1);
    assert_eq!(r.1["status"], "ok", "{}", r.1);
    r.1["result"].clone()
}

fn err(r: (u16, Value), status: u16, code: &str) -> Value {
    assert_eq!(
        (r.0, r.1["error"]["code"].as_str()),
        (status, Some(code)),
        "{}",
        r.1
    );
    assert_eq!(r.1["status"], "error", "{}", r.1);
    r.1["error"].clone()
}

fn data(s: &Served) -> std::path::PathBuf {
    s.ws.join("viking/default")
}

fn wait(s: &Served) {
    ok(s.json(
        "POST",
        "/api/v1/system/wait",
        &[],
        &json!({ "timeout": 60 }),
    ));
}

#[test]
fn the_filesystem_routes_list_stat_make_move_and_remove() {
    let s = Served::new();
    ok(write(
        &s,
        "viking://resources/docs/a.md",
        "alpha\n",
        "create",
    ));
    ok(write(
        &s,
        "viking://resources/docs/sub/b.md",
        "beta\n",
        "create",
    ));
    wait(&s);

    // ls: OpenViking's ListingResponse (has_more beside the result), agent form by default.
    let (code, v) = get(
        &s,
        &format!("/api/v1/fs/ls?uri={}", q("viking://resources/docs")),
    );
    assert_eq!((code, v["has_more"].as_bool()), (200, Some(false)), "{v}");
    let entries = v["result"].as_array().unwrap();
    let uris: Vec<&str> = entries.iter().map(|e| e["uri"].as_str().unwrap()).collect();
    assert_eq!(
        uris,
        [
            "viking://resources/docs/a.md",
            "viking://resources/docs/sub"
        ]
    );
    assert_eq!(
        entries[1]["size"], 0,
        "a directory's size in agent form: {v}"
    );
    assert!(
        entries[1]["abstract"].as_str().unwrap().contains("beta"),
        "a directory's abstract, the workers' .abstract.md: {v}"
    );
    let t = entries[1]["modTime"].as_str().unwrap();
    assert!(
        t.len() == 24 && &t[19..20] == "." && t.ends_with('Z'),
        "milliseconds: {t}"
    );

    // The original form, recursive and simple, hidden files, paging.
    let e = ok(get(
        &s,
        &format!(
            "/api/v1/fs/ls?uri={}&output=original",
            q("viking://resources/docs")
        ),
    ));
    assert_eq!(e[0]["name"], "a.md");
    assert_eq!(
        (e[0]["size"].as_u64(), e[0]["isDir"].as_bool()),
        (Some(6), Some(false))
    );
    let mode = e[0]["mode"].as_u64().unwrap();
    assert!(
        mode & 0o600 == 0o600 && mode <= 0o7777,
        "permission bits only: {e}"
    );
    assert!(e[0]["modTime"].as_str().unwrap().ends_with('Z'));
    let e = ok(get(
        &s,
        &format!(
            "/api/v1/fs/ls?uri={}&simple=true&recursive=true",
            q("viking://resources/docs")
        ),
    ));
    assert_eq!(
        e,
        json!([
            "viking://resources/docs/a.md",
            "viking://resources/docs/sub",
            "viking://resources/docs/sub/b.md"
        ])
    );
    let shown = ok(get(
        &s,
        &format!(
            "/api/v1/fs/ls?uri={}&simple=true&show_all_hidden=true",
            q("viking://resources/docs")
        ),
    ));
    assert!(shown
        .as_array()
        .unwrap()
        .contains(&json!("viking://resources/docs/.abstract.md")));
    assert!(
        !shown.to_string().contains("ovlock"),
        "lock files never show: {shown}"
    );
    let (_, v) = get(
        &s,
        &format!(
            "/api/v1/fs/ls?uri={}&node_limit=1&simple=true",
            q("viking://resources/docs")
        ),
    );
    assert_eq!(
        (
            v["result"].as_array().unwrap().len(),
            v["has_more"].as_bool()
        ),
        (1, Some(true)),
        "{v}"
    );
    let (_, v) = get(
        &s,
        &format!(
            "/api/v1/fs/ls?uri={}&limit=1&offset=1&simple=true",
            q("viking://resources/docs")
        ),
    );
    assert_eq!(
        (v["result"].clone(), v["has_more"].as_bool()),
        (json!(["viking://resources/docs/sub"]), Some(false)),
        "{v}"
    );
    // The root shows the scopes only.
    let e = ok(get(
        &s,
        &format!("/api/v1/fs/ls?uri={}&simple=true", q("viking://")),
    ));
    assert_eq!(
        e,
        json!(["viking://agent", "viking://resources", "viking://user"])
    );

    // tree: rel_path, depth first, level_limit.
    let (_, v) = get(
        &s,
        &format!(
            "/api/v1/fs/tree?uri={}&output=original",
            q("viking://resources")
        ),
    );
    let rels: Vec<&str> = v["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["rel_path"].as_str().unwrap())
        .collect();
    assert_eq!(
        rels,
        ["docs", "docs/a.md", "docs/sub", "docs/sub/b.md"],
        "{v}"
    );
    let e = ok(get(
        &s,
        &format!(
            "/api/v1/fs/tree?uri={}&level_limit=1",
            q("viking://resources")
        ),
    ));
    assert_eq!(e.as_array().unwrap().len(), 1, "{e}");
    let e = ok(get(
        &s,
        &format!(
            "/api/v1/fs/tree?uri={}&directories_only=true",
            q("viking://resources")
        ),
    ));
    assert_eq!(e.as_array().unwrap().len(), 2, "{e}");

    // stat: a directory counts its records; a file has its size.
    let st = ok(get(
        &s,
        &format!("/api/v1/fs/stat?uri={}", q("viking://resources/docs")),
    ));
    assert_eq!(
        (st["name"].as_str(), st["isDir"].as_bool()),
        (Some("docs"), Some(true))
    );
    assert_eq!(st["isLocked"], false);
    assert!(st["count"].as_u64().unwrap() >= 2, "{st}");
    let st = ok(get(
        &s,
        &format!("/api/v1/fs/stat?uri={}", q("viking://resources/docs/a.md")),
    ));
    assert_eq!(
        (st["size"].as_u64(), st["uri"].as_str()),
        (Some(6), Some("viking://resources/docs/a.md"))
    );

    // mkdir (-p), mv (to exactly that name), rm.
    let r = ok(s.json(
        "POST",
        "/api/v1/fs/mkdir",
        &[],
        &json!({"uri": "viking://resources/n1/n2"}),
    ));
    assert_eq!(r, json!({ "uri": "viking://resources/n1/n2" }));
    assert!(data(&s).join("resources/n1/n2").is_dir());
    err(
        s.json(
            "POST",
            "/api/v1/fs/mkdir",
            &[],
            &json!({"uri": "viking://resources/n1/n2"}),
        ),
        409,
        "ALREADY_EXISTS",
    );
    let r = ok(s.json(
        "POST",
        "/api/v1/fs/mv",
        &[],
        &json!({"from_uri": "viking://resources/docs", "to_uri": "viking://resources/n1/docs"}),
    ));
    assert_eq!(
        r,
        json!({"from": "viking://resources/docs", "to": "viking://resources/n1/docs"})
    );
    assert!(data(&s).join("resources/n1/docs/sub/b.md").is_file());
    err(
        s.json(
            "POST",
            "/api/v1/fs/mv",
            &[],
            &json!({"from_uri": "viking://resources/n1/docs", "to_uri": "viking://resources/n1/n2"}),
        ),
        409,
        "ALREADY_EXISTS",
    );
    let (code, v) = s.call(
        "DELETE",
        &format!("/api/v1/fs?uri={}", q("viking://resources/n1/docs")),
        &[],
        None,
    );
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (412, Some("FAILED_PRECONDITION")),
        "a directory without recursive: {v}"
    );
    wait(&s);
    let r = ok(s.call(
        "DELETE",
        &format!(
            "/api/v1/fs?uri={}&recursive=true",
            q("viking://resources/n1")
        ),
        &[],
        None,
    ));
    assert_eq!(r["uri"], "viking://resources/n1");
    assert!(
        r["estimated_deleted_count"].as_u64().unwrap() >= 2,
        "its records went: {r}"
    );
    assert!(!data(&s).join("resources/n1").exists());
    err(
        get(
            &s,
            &format!("/api/v1/fs/stat?uri={}", q("viking://resources/n1")),
        ),
        404,
        "NOT_FOUND",
    );
}

#[test]
fn every_route_refuses_missing_and_malformed_uris() {
    let s = Served::new();
    let missing = q("viking://resources/nope.md");
    for path in [
        format!("/api/v1/fs/ls?uri={missing}"),
        format!("/api/v1/fs/tree?uri={missing}"),
        format!("/api/v1/fs/stat?uri={missing}"),
        format!("/api/v1/content/read?uri={missing}"),
        format!("/api/v1/content/abstract?uri={missing}"),
        format!("/api/v1/content/overview?uri={missing}"),
        format!("/api/v1/content/download?uri={missing}"),
    ] {
        let e = err(get(&s, &path), 404, "NOT_FOUND");
        assert_eq!(
            e["details"]["resource"], "viking://resources/nope.md",
            "{path}: {e}"
        );
    }
    err(
        s.call("DELETE", &format!("/api/v1/fs?uri={missing}"), &[], None),
        404,
        "NOT_FOUND",
    );
    err(
        s.json(
            "POST",
            "/api/v1/fs/mv",
            &[],
            &json!({"from_uri": "viking://resources/nope.md", "to_uri": "viking://resources/x.md"}),
        ),
        404,
        "NOT_FOUND",
    );

    let long = format!("viking://resources/{}", "x".repeat(256));
    for bad in [
        "viking://resources/../../x",
        "viking://resources/a\0b",
        long.as_str(),
        "viking://bogus/x",
        "viking://resources/.path.ovlock",
        "/etc/passwd",
    ] {
        for path in [
            format!("/api/v1/fs/ls?uri={}", q(bad)),
            format!("/api/v1/fs/tree?uri={}", q(bad)),
            format!("/api/v1/fs/stat?uri={}", q(bad)),
            format!("/api/v1/content/read?uri={}", q(bad)),
            format!("/api/v1/content/download?uri={}", q(bad)),
            format!("/api/v1/content/abstract?uri={}", q(bad)),
        ] {
            let (code, v) = get(&s, &path);
            assert_eq!(code, 400, "{path}: {v}");
            assert_eq!(v["error"]["code"], "INVALID_URI", "{path}: {v}");
        }
        err(
            s.call("DELETE", &format!("/api/v1/fs?uri={}", q(bad)), &[], None),
            400,
            "INVALID_URI",
        );
        err(write(&s, bad, "x", "replace"), 400, "INVALID_URI");
        err(
            s.json("POST", "/api/v1/fs/mkdir", &[], &json!({ "uri": bad })),
            400,
            "INVALID_URI",
        );
        err(
            s.json(
                "POST",
                "/api/v1/fs/mv",
                &[],
                &json!({"from_uri": "viking://resources/a", "to_uri": bad}),
            ),
            400,
            "INVALID_URI",
        );
    }
    // Nothing was made by any of them (the scope's own summaries aside).
    let made: Vec<_> = std::fs::read_dir(data(&s).join("resources"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| !n.to_string_lossy().starts_with('.'))
        .collect();
    assert!(made.is_empty(), "{made:?}");
    // A query without its uri, a body field of the wrong type, an unknown write field.
    err(get(&s, "/api/v1/fs/ls"), 400, "INVALID_ARGUMENT");
    err(get(&s, "/api/v1/content/download"), 400, "INVALID_ARGUMENT");
    err(
        s.json("POST", "/api/v1/fs/mkdir", &[], &json!({ "uri": 7 })),
        400,
        "INVALID_ARGUMENT",
    );
    err(
        s.json(
            "POST",
            "/api/v1/content/write",
            &[],
            &json!({"uri": "viking://resources/a.md", "content": "x", "nope": 1}),
        ),
        400,
        "INVALID_ARGUMENT",
    );
    err(
        write(&s, "viking://resources/a.md", "x", "upsert"),
        400,
        "INVALID_ARGUMENT",
    );
    err(
        get(
            &s,
            &format!("/api/v1/fs/ls?uri={}&output=fancy", q("viking://resources")),
        ),
        400,
        "INVALID_ARGUMENT",
    );
    // The scopes and the summaries are not the user's to change.
    err(
        s.call(
            "DELETE",
            &format!("/api/v1/fs?uri={}&recursive=true", q("viking://resources")),
            &[],
            None,
        ),
        403,
        "PERMISSION_DENIED",
    );
    err(
        write(&s, "viking://resources/.abstract.md", "x", "replace"),
        403,
        "PERMISSION_DENIED",
    );
}

/// `vikingfs lock --tree URI -- sleep N` against the daemon's workspace, once it holds the
/// lock (its lock file is in place).
fn hold_tree_lock(s: &Served, uri: &str, rel: &str, secs: u32) -> std::process::Child {
    let child = crate::support::vikingfs(&s.home)
        .arg("--workspace")
        .arg(&s.ws)
        .args(["lock", "--tree", uri, "--", "sleep", &secs.to_string()])
        .spawn()
        .unwrap();
    let lock = data(s).join(rel).join(".path.ovlock");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !lock.exists() {
        assert!(
            Instant::now() < deadline,
            "vikingfs lock did not take {uri}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[test]
fn a_held_lock_answers_409_conflict_path_busy() {
    let s = Served::new();
    ok(write(&s, "viking://resources/x/a.md", "alpha", "replace"));
    wait(&s);
    let mut holder = hold_tree_lock(&s, "viking://resources/x", "resources/x", 10);
    let busy = |r: (u16, Value), uri: &str| {
        let e = err(r, 409, "CONFLICT");
        assert_eq!(e["details"]["conflict_type"], "path_busy", "{e}");
        assert_eq!(e["details"]["retryable"], true, "{e}");
        assert_eq!(e["details"]["resource"], uri, "{e}");
    };
    let started = Instant::now();
    busy(
        s.call(
            "DELETE",
            &format!(
                "/api/v1/fs?uri={}&recursive=true",
                q("viking://resources/x")
            ),
            &[],
            None,
        ),
        "viking://resources/x",
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "refused before the holder let go"
    );
    busy(
        write(&s, "viking://resources/x/a.md", "beta", "replace"),
        "viking://resources/x/a.md",
    );
    busy(
        write(&s, "viking://resources/x/a.md", "beta", "append"),
        "viking://resources/x/a.md",
    );
    busy(
        s.json(
            "POST",
            "/api/v1/fs/mv",
            &[],
            &json!({"from_uri": "viking://resources/x/a.md", "to_uri": "viking://resources/y.md"}),
        ),
        "viking://resources/x/a.md",
    );
    busy(
        s.json(
            "POST",
            "/api/v1/fs/mkdir",
            &[],
            &json!({"uri": "viking://resources/x/d"}),
        ),
        "viking://resources/x/d",
    );
    let st = ok(get(
        &s,
        &format!("/api/v1/fs/stat?uri={}", q("viking://resources/x/a.md")),
    ));
    assert_eq!(st["isLocked"], true, "{st}");
    // Reads take no lock.
    assert_eq!(
        ok(get(
            &s,
            &format!(
                "/api/v1/content/read?uri={}",
                q("viking://resources/x/a.md")
            )
        )),
        "alpha"
    );
    // Every refused change left the files as they were; once free, the same call works.
    assert!(holder.wait().unwrap().success());
    assert_eq!(
        std::fs::read_to_string(data(&s).join("resources/x/a.md")).unwrap(),
        "alpha"
    );
    ok(s.call(
        "DELETE",
        &format!(
            "/api/v1/fs?uri={}&recursive=true",
            q("viking://resources/x")
        ),
        &[],
        None,
    ));
    assert!(!data(&s).join("resources/x").exists());
}

#[test]
fn the_content_routes_read_slice_download_and_write() {
    let s = Served::new();
    let uri = "viking://resources/notes/todo.md";
    let r = ok(write(&s, uri, "l0\nl1\nl2\n", "create"));
    assert_eq!(r["uri"], uri);
    assert_eq!(r["root_uri"], "viking://resources/notes");
    assert_eq!(
        (r["mode"].as_str(), r["written_bytes"].as_u64()),
        (Some("create"), Some(9))
    );
    assert_eq!(
        (r["context_type"].as_str(), r["content_updated"].as_bool()),
        (Some("resource"), Some(true))
    );
    let read = |extra: &str| {
        ok(get(
            &s,
            &format!("/api/v1/content/read?uri={}{extra}", q(uri)),
        ))
    };
    assert_eq!(read(""), "l0\nl1\nl2\n");
    assert_eq!(read("&offset=1&limit=1"), "l1\n");
    assert_eq!(read("&offset=2"), "l2\n");
    assert_eq!(read("&offset=-1&limit=-1"), "l2\n");
    assert_eq!(read("&offset=7"), "");
    let r = ok(s.json(
        "POST",
        "/api/v1/content/write",
        &[],
        &json!({ "uri": uri, "content": "l3\n", "mode": "append", "wait": true }),
    ));
    assert_eq!(r["written_bytes"], 12, "the whole file's length: {r}");
    assert_eq!(read(""), "l0\nl1\nl2\nl3\n");
    ok(write(&s, uri, "new", "replace"));
    assert_eq!(read(""), "new");
    // The user's memories are memories.
    let r = ok(write(
        &s,
        "viking://user/default/memories/m.md",
        "likes tea",
        "create",
    ));
    assert_eq!(r["context_type"], "memory");

    // download: the bytes as they are, with OpenViking's headers.
    std::fs::write(
        data(&s).join("resources/notes/bin é.dat"),
        [0u8, 159, 146, 150, 10],
    )
    .unwrap();
    let (code, bytes) = s.call_raw(
        "GET",
        &format!(
            "/api/v1/content/download?uri={}",
            q("viking://resources/notes/bin é.dat")
        ),
        &[],
        None,
    );
    assert_eq!(
        (code, bytes.as_slice()),
        (200, &[0u8, 159, 146, 150, 10][..])
    );
    let big = "x".repeat(300_000);
    ok(write(
        &s,
        "viking://resources/notes/big.txt",
        &big,
        "replace",
    ));
    let (code, bytes) = s.call_raw(
        "GET",
        &format!(
            "/api/v1/content/download?uri={}",
            q("viking://resources/notes/big.txt")
        ),
        &[],
        None,
    );
    assert_eq!(
        (code, bytes.len()),
        (200, big.len()),
        "streamed in chunks, whole"
    );
    let head = raw_head(
        &s,
        &format!(
            "/api/v1/content/download?uri={}",
            q("viking://resources/notes/bin é.dat")
        ),
    );
    assert!(
        head.contains("content-type: application/octet-stream"),
        "{head}"
    );
    assert!(head.contains("filename*=utf-8''bin%20%c3%a9.dat"), "{head}");

    // abstract and overview: the workers' summaries of the directory (a file's: its
    // directory's), OpenViking's placeholders before they are written (a directory made
    // behind the daemon's back has none).
    std::fs::create_dir(data(&s).join("resources/quiet")).unwrap();
    let quiet = q("viking://resources/quiet");
    assert_eq!(
        ok(get(&s, &format!("/api/v1/content/abstract?uri={quiet}"))),
        "# viking://resources/quiet [Directory abstract is not ready]"
    );
    assert_eq!(
        ok(get(&s, &format!("/api/v1/content/overview?uri={quiet}"))),
        "# viking://resources/quiet\n\n[Directory overview is not ready]"
    );
    wait(&s);
    let summary = std::fs::read_to_string(data(&s).join("resources/notes/.abstract.md")).unwrap();
    assert_eq!(
        ok(get(&s, &format!("/api/v1/content/abstract?uri={}", q(uri)))),
        summary.as_str()
    );
    let overview = std::fs::read_to_string(data(&s).join("resources/notes/.overview.md")).unwrap();
    assert_eq!(
        ok(get(
            &s,
            &format!(
                "/api/v1/content/overview?uri={}",
                q("viking://resources/notes")
            )
        )),
        overview.as_str()
    );
    // Reading a directory, or writing over one, is refused.
    let e = err(
        get(
            &s,
            &format!("/api/v1/content/read?uri={}", q("viking://resources/notes")),
        ),
        400,
        "INVALID_ARGUMENT",
    );
    assert_eq!(e["details"]["actual"], "directory");
    err(
        write(&s, "viking://resources/notes", "x", "replace"),
        412,
        "FAILED_PRECONDITION",
    );
}

fn raw_head(s: &Served, path: &str) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(s.addr).unwrap();
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = Vec::new();
    c.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    text.split("\r\n\r\n").next().unwrap().to_ascii_lowercase()
}

#[test]
fn symlinks_made_behind_the_api_are_never_followed() {
    let s = Served::new();
    let outside = s.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "host secret").unwrap();
    let res = data(&s).join("resources");
    std::os::unix::fs::symlink(&outside, res.join("linkdir")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), res.join("link.txt")).unwrap();
    for uri in [
        "viking://resources/linkdir/secret.txt",
        "viking://resources/link.txt",
    ] {
        for route in ["content/read", "content/download"] {
            let (code, v) = get(&s, &format!("/api/v1/{route}?uri={}", q(uri)));
            assert!(code == 400 || code == 404, "{route} {uri}: {code} {v}");
            assert!(!v.to_string().contains("host secret"), "{v}");
        }
    }
    // Listed, it is the link itself (as ls(1) lists it), never what it points to.
    let (_, v) = get(
        &s,
        &format!("/api/v1/fs/ls?uri={}", q("viking://resources/linkdir")),
    );
    assert!(!v.to_string().contains("secret.txt"), "{v}");
    if let Some(e) = v["result"].as_array() {
        assert_eq!((e.len(), &e[0]["isDir"]), (1, &json!(false)), "{v}");
    }
    let e = ok(get(
        &s,
        &format!(
            "/api/v1/fs/tree?uri={}&output=original",
            q("viking://resources")
        ),
    ));
    assert!(
        !e.to_string().contains("secret.txt"),
        "the tree does not descend a symlink: {e}"
    );
}

/// A zip of `entries` (stored), as the SDK sends a directory.
fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    use std::io::Write;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, data) in entries {
        w.start_file(*name, opts).unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

#[test]
fn resources_are_added_from_uploads_and_hostile_archives_refused() {
    let s = Served::new();
    // A zipped directory, as the SDK and ov send one.
    let z = zip_of(&[
        ("a.md", b"alpha about tokens"),
        ("sub/b.md", b"beta about vectors"),
    ]);
    let id = ok(s.upload(&[], DIR_ZIP, &z))["temp_file_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(id.starts_with("upload_") && id.ends_with(".zip"), "{id}");
    let r = ok(s.json(
        "POST",
        "/api/v1/resources",
        &[],
        &json!({"temp_file_id": id, "source_name": "docs", "to": "viking://resources/docs", "wait": true}),
    ));
    assert_eq!(
        (r["status"].as_str(), r["root_uri"].as_str()),
        (Some("success"), Some("viking://resources/docs")),
        "{r}"
    );
    assert_eq!(r["meta"]["file_count"], 2, "{r}");
    assert_eq!(
        std::fs::read_to_string(data(&s).join("resources/docs/sub/b.md")).unwrap(),
        "beta about vectors"
    );
    // The daemon runs without a umask: nothing added is left writable by everyone.
    use std::os::unix::fs::PermissionsExt;
    for p in [
        "resources/docs/sub",
        "resources/docs/sub/b.md",
        "resources/docs/a.md",
    ] {
        let mode = std::fs::metadata(data(&s).join(p))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o022, 0, "{p}: {mode:o}");
    }
    assert!(
        data(&s).join("resources/docs/.abstract.md").is_file(),
        "waited for its summary"
    );
    // An upload is used once.
    err(
        s.json(
            "POST",
            "/api/v1/resources",
            &[],
            &json!({"temp_file_id": id}),
        ),
        403,
        "PERMISSION_DENIED",
    );
    // A single file, into a parent, named as uploaded; again: NAME_1.
    for want in [
        "viking://resources/docs/note.txt",
        "viking://resources/docs/note_1.txt",
    ] {
        let id = ok(s.upload(&[], "note.txt", b"plain note"))["temp_file_id"].clone();
        let r = ok(s.json(
            "POST",
            "/api/v1/resources",
            &[],
            &json!({"temp_file_id": id, "parent": "viking://resources/docs"}),
        ));
        assert_eq!(r["root_uri"], want, "{r}");
        // A new `_N` name comes with OpenViking's warning, word for word.
        let warnings = r["warnings"].as_array().unwrap();
        if want.ends_with("note_1.txt") {
            assert_eq!(
                warnings[0],
                "'viking://resources/docs/note.txt' already exists. Creating \
                 'viking://resources/docs/note_1.txt'. Tip: Use --to <path> to specify exact target.",
                "{r}"
            );
        } else {
            assert!(warnings.is_empty(), "{r}");
        }
    }
    // A server path, for the root caller (this open server's callers are root).
    let local = s.dir.path().join("local");
    std::fs::create_dir_all(local.join("inner")).unwrap();
    std::fs::write(local.join("inner/c.md"), "gamma").unwrap();
    let r = ok(s.json(
        "POST",
        "/api/v1/resources",
        &[],
        &json!({"path": local.to_str().unwrap()}),
    ));
    assert_eq!(r["root_uri"], "viking://resources/local");
    err(
        s.json(
            "POST",
            "/api/v1/resources",
            &[],
            &json!({"path": "relative/dir"}),
        ),
        400,
        "INVALID_ARGUMENT",
    );
    err(
        s.json(
            "POST",
            "/api/v1/resources",
            &[],
            &json!({"path": "https://example.com/x"}),
        ),
        501,
        "UNIMPLEMENTED",
    );
    err(
        s.json("POST", "/api/v1/resources", &[], &json!({})),
        400,
        "INVALID_ARGUMENT",
    );
    err(
        s.json(
            "POST",
            "/api/v1/resources",
            &[],
            &json!({"path": "/x", "bogus": 1}),
        ),
        400,
        "INVALID_ARGUMENT",
    );

    // Archives that would write outside, or as internal names, add nothing.
    wait(&s);
    let before = files_below(&data(&s));
    let outside = s.dir.path().join("evil");
    for (name, evil) in [
        ("up", zip_of(&[("ok.md", b"fine"), ("../../../evil", b"x")])),
        ("abs", zip_of(&[("/tmp/evil", b"x")])),
        ("lock", zip_of(&[("d/.path.ovlock", b"x")])),
        ("nul", zip_of(&[("a\u{0}b", b"x")])),
    ] {
        let id = ok(s.upload(&[], DIR_ZIP, &evil))["temp_file_id"].clone();
        let (code, v) = s.json(
            "POST",
            "/api/v1/resources",
            &[],
            &json!({"temp_file_id": id, "source_name": "evil"}),
        );
        assert_eq!(code, 400, "{name}: {v}");
    }
    assert!(!outside.exists());
    assert_eq!(files_below(&data(&s)), before, "nothing added");
    // A bad source_name is refused before anything is added.
    let id = ok(s.upload(&[], "n.txt", b"x"))["temp_file_id"].clone();
    err(
        s.json(
            "POST",
            "/api/v1/resources",
            &[],
            &json!({"temp_file_id": id, "source_name": "../up"}),
        ),
        400,
        "INVALID_ARGUMENT",
    );
}

/// Every file name below `root`.
fn files_below(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(root).unwrap().to_string_lossy().to_string());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_user_key_sees_only_its_own_user_tree() {
    let s = Served::with_config(json!({ "server": { "root_api_key": "root-secret" } }));
    let root = ["X-API-Key: root-secret"];
    let bob = s.user_key("bob", vikingfs::server::auth::Role::User);
    let bob_h = format!("X-API-Key: {bob}");
    let bob_h = [bob_h.as_str()];
    for who in ["alice", "bob"] {
        let uri = format!("viking://user/{who}/memories/m.md");
        let b = json!({ "uri": uri, "content": format!("{who}'s secret"), "mode": "create" });
        ok(s.json("POST", "/api/v1/content/write", &root, &b));
    }
    let e = ok(s.call(
        "GET",
        &format!("/api/v1/fs/ls?uri={}&simple=true", q("viking://user")),
        &bob_h,
        None,
    ));
    assert_eq!(
        e,
        json!(["viking://user/bob"]),
        "bob's listing of viking://user"
    );
    let e = ok(s.call(
        "GET",
        &format!("/api/v1/fs/tree?uri={}&output=original", q("viking://")),
        &bob_h,
        None,
    ));
    assert!(!e.to_string().contains("alice"), "{e}");
    let alice = q("viking://user/alice/memories/m.md");
    for path in [
        format!("/api/v1/content/read?uri={alice}"),
        format!("/api/v1/content/download?uri={alice}"),
        format!("/api/v1/fs/stat?uri={alice}"),
        format!("/api/v1/fs/ls?uri={}", q("viking://user/alice")),
    ] {
        let (code, v) = s.call("GET", &path, &bob_h, None);
        assert_eq!(code, 403, "{path}: {v}");
        assert!(!v.to_string().contains("alice's secret"), "{v}");
    }
    err(
        s.call("DELETE", &format!("/api/v1/fs?uri={alice}"), &bob_h, None),
        403,
        "PERMISSION_DENIED",
    );
    // A user key may not add from the server's disk (OpenViking refuses host paths).
    err(
        s.json(
            "POST",
            "/api/v1/resources",
            &bob_h,
            &json!({"path": s.dir.path().to_str().unwrap()}),
        ),
        403,
        "PERMISSION_DENIED",
    );
    // An upload is its sender's only.
    let id = ok(s.upload(&root, "n.txt", b"root's"))["temp_file_id"].clone();
    err(
        s.json(
            "POST",
            "/api/v1/resources",
            &bob_h,
            &json!({"temp_file_id": id}),
        ),
        403,
        "PERMISSION_DENIED",
    );
    assert_eq!(
        ok(s.call(
            "GET",
            &format!(
                "/api/v1/content/read?uri={}",
                q("viking://user/bob/memories/m.md")
            ),
            &bob_h,
            None
        )),
        "bob's secret"
    );
    // No key: 401.
    err(
        get(
            &s,
            &format!("/api/v1/fs/ls?uri={}", q("viking://resources")),
        ),
        401,
        "UNAUTHENTICATED",
    );
}

#[test]
fn bodies_and_reads_over_the_limit_are_refused_and_downloads_stream() {
    let s = Served::with_config(
        json!({ "server": { "max_body_bytes": 100_000, "max_upload_bytes": 100_000 } }),
    );
    // An upload over its own limit: OpenViking's answer (400, its message).
    let (code, v) = s.upload(&[], "big.bin", &vec![7u8; 200_000]);
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (400, Some("INVALID_ARGUMENT")),
        "{v}"
    );
    assert_eq!(
        v["error"]["message"], "Upload exceeds size limit (100000 bytes).",
        "{v}"
    );
    // Nothing of it is kept in the daemon's upload directory.
    let prefix = format!("vikingfs-uploads-{}-", s.child.id());
    let dirs: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .collect();
    assert_eq!(dirs.len(), 1, "the daemon's upload directory");
    let kept: Vec<_> = std::fs::read_dir(dirs[0].path())
        .unwrap()
        .flatten()
        .collect();
    assert!(kept.is_empty(), "{kept:?}");
    // A file bigger than the limit (made behind the API) is not read into one JSON string,
    // but downloads whole.
    let big = data(&s).join("resources/big.txt");
    std::fs::write(&big, "y".repeat(150_000)).unwrap();
    let e = err(
        get(
            &s,
            &format!(
                "/api/v1/content/read?uri={}",
                q("viking://resources/big.txt")
            ),
        ),
        429,
        "RESOURCE_EXHAUSTED",
    );
    assert_eq!(e["details"]["reason"], "read_limit_exceeded", "{e}");
    let (code, bytes) = s.call_raw(
        "GET",
        &format!(
            "/api/v1/content/download?uri={}",
            q("viking://resources/big.txt")
        ),
        &[],
        None,
    );
    assert_eq!((code, bytes.len()), (200, 150_000));
}

/// One MCP `tools/call` at the daemon's `/mcp` (stateless, JSON answers) with `headers`: the
/// tool's result (`isError` and its text).
pub fn mcp_call(s: &Served, headers: &[&str], tool: &str, args: Value) -> (bool, String) {
    let mut h = headers.to_vec();
    h.push("Accept: application/json, text/event-stream");
    let (code, v) = s.json(
        "POST",
        "/mcp",
        &h,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": tool, "arguments": args}}),
    );
    assert_eq!(code, 200, "{v}");
    let r = &v["result"];
    let text = r["content"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_else(|| v.to_string());
    (r["isError"] == true, text)
}

/// add-resource puts content under resources/ only: OpenViking answers a `to` or `parent`
/// elsewhere (an agent's tree, the caller's own memories) 400 `INVALID_URI` with
/// `validate_content_target_uri`'s message, and another user's tree is root's alone (an admin
/// key is refused, 403). Over HTTP and through MCP's add_resource.
#[test]
fn add_resource_targets_resources_only() {
    let s = Served::with_config(json!({ "server": { "root_api_key": "root-secret" } }));
    let key = |user: &str, role: &[&str]| {
        let mut args = vec!["key", "add", "--user", user];
        args.extend_from_slice(role);
        let out = s.cli(&args);
        assert!(out.status.success(), "{out:?}");
        format!("X-API-Key: {}", String::from_utf8_lossy(&out.stdout).trim())
    };
    let (alice, admin) = (key("alice", &[]), key("ann", &["--role", "admin"]));
    let add = |who: &str, field: &str, target: &str| {
        let id = ok(s.upload(&[who], "note.md", b"a note"))["temp_file_id"].clone();
        s.json(
            "POST",
            "/api/v1/resources",
            &[who],
            &json!({"temp_file_id": id, field: target, "create_parent": field == "parent"}),
        )
    };
    for (field, target) in [
        ("to", "viking://agent/notes/note.md"),
        ("to", "viking://user/alice/memories/note.md"),
        ("parent", "viking://user/alice/memories"),
        ("parent", "viking://agent"),
        ("to", "viking://user/alice/sessions/s1/note.md"),
    ] {
        let e = err(add(&alice, field, target), 400, "INVALID_URI");
        assert_eq!(
            e["message"],
            format!("Invalid URI: {target} ({field} must target resource content)"),
            "{e}"
        );
        assert_eq!(e["details"]["uri"], target, "{e}");
    }
    // An admin reads every user's tree but adds into none of them (OpenViking: root only).
    let e = err(
        add(&admin, "to", "viking://user/alice/resources/planted.md"),
        403,
        "PERMISSION_DENIED",
    );
    assert!(
        e["message"].as_str().unwrap().contains("Access denied"),
        "{e}"
    );
    for p in [
        "agent/notes",
        "user/alice/memories",
        "user/alice/resources/planted.md",
    ] {
        assert!(!data(&s).join(p).exists(), "{p} was made");
    }
    // Resource content is taken: the shared tree, and the caller's own resources/.
    for target in [
        "viking://resources/from-alice.md",
        "viking://user/alice/resources/mine.md",
    ] {
        let r = ok(add(&alice, "to", target));
        assert_eq!(r["root_uri"], target, "{r}");
    }
    // MCP's add_resource is the same route: refused with OpenViking's message as its text.
    let id = ok(s.upload(&[&alice], "m.md", b"via mcp"))["temp_file_id"].clone();
    let (is_error, text) = mcp_call(
        &s,
        &[&alice],
        "add_resource",
        json!({"temp_file_id": id, "to": "viking://agent/m.md"}),
    );
    assert!(is_error, "{text}");
    assert!(text.contains("to must target resource content"), "{text}");
    assert!(!data(&s).join("agent/m.md").exists());
    let id = ok(s.upload(&[&alice], "m.md", b"via mcp"))["temp_file_id"].clone();
    let (is_error, text) = mcp_call(
        &s,
        &[&alice],
        "add_resource",
        json!({"temp_file_id": id, "to": "viking://resources/m.md"}),
    );
    assert!(!is_error, "{text}");
    assert!(data(&s).join("resources/m.md").is_file(), "{text}");
}
