//! OpenViking's routes of issue 45's first part against a real `vikingfs serve`: uploads
//! stored as they are (a zip container is a document, only a client's zip of a directory is
//! unpacked), skills, `fs/cp`, attrs and tags, `content/batch-write` and `content/reindex`;
//! driven by OpenViking's SDK and `ov` (`sdk_surface.py`), and each route's bad input answered
//! in OpenViking's envelope and status.

use serde_json::{json, Value};

use crate::support::serve::{clients, enc, python, Served, DIR_ZIP};

fn ok((code, v): (u16, Value)) -> Value {
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["status"], "ok", "{v}");
    v["result"].clone()
}

fn err((code, v): (u16, Value), status: u16, want: &str) -> Value {
    assert_eq!(
        (code, v["status"].as_str(), v["error"]["code"].as_str()),
        (status, Some("error"), Some(want)),
        "{v}"
    );
    v["error"].clone()
}

/// `POST /api/v1/resources/temp_upload` of `bytes` named `name` with `headers`; its
/// `temp_file_id`.
fn upload(s: &Served, headers: &[&str], name: &str, bytes: &[u8]) -> String {
    ok(s.upload(headers, name, bytes))["temp_file_id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A zip of `entries`, deflated, as any zip tool writes it.
fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    use std::io::Write;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default();
    for (name, data) in entries {
        w.start_file(*name, opts).unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

#[test]
fn openvikings_clients_use_documents_skills_cp_tags_batch_write_and_reindex() {
    let Some(clients) = clients() else { return };
    let s = Served::with_config(json!({ "server": { "root_api_key": "root-secret" } }));
    let key = s.user_key("bob", vikingfs::server::auth::Role::User);
    let ov = clients.join("bin/ov");
    let out = python(
        &clients,
        "sdk_surface.py",
        &[
            &s.url(),
            ov.to_str().unwrap(),
            "--key",
            &key,
            "--user",
            "bob",
            "--root-key",
            "root-secret",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "sdk_surface.py failed ({:?}):\n{stdout}\n{}\nserver log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        s.log()
    );
}

/// A .docx (a zip container) uploaded under its own name is stored whole and downloads byte
/// for byte; the same bytes named as the SDK names a zipped directory are unpacked.
#[test]
fn a_zip_container_is_a_document_and_only_a_clients_directory_zip_is_unpacked() {
    let s = Served::new();
    let docx = zip_of(&[
        ("[Content_Types].xml", b"<Types/>"),
        ("word/document.xml", b"<w:document>report</w:document>"),
    ]);
    let id = upload(&s, &[], "report.docx", &docx);
    let r = ok(s.json(
        "POST",
        "/api/v1/resources",
        &[],
        &json!({"temp_file_id": id, "parent": "viking://resources"}),
    ));
    assert_eq!(r["root_uri"], "viking://resources/report.docx", "{r}");
    assert_eq!(r["meta"].get("dir_name"), None, "{r}");
    let backing = s.ws.join("viking/default/resources/report.docx");
    assert!(backing.is_file(), "a file, not a directory of parts");
    let (code, bytes) = s.call_raw(
        "GET",
        &format!(
            "/api/v1/content/download?uri={}",
            enc("viking://resources/report.docx")
        ),
        &[],
        None,
    );
    assert_eq!(code, 200);
    assert_eq!(bytes, docx, "downloaded back byte for byte");
    // The same bytes as the SDK's zip of a directory named `docs`.
    let id = upload(&s, &[], DIR_ZIP, &docx);
    let r = ok(s.json(
        "POST",
        "/api/v1/resources",
        &[],
        &json!({"temp_file_id": id, "source_name": "docs"}),
    ));
    assert_eq!(r["root_uri"], "viking://resources/docs", "{r}");
    assert!(s
        .ws
        .join("viking/default/resources/docs/word/document.xml")
        .is_file());
    // ov's name for one (`tempfile`'s `.tmpXXXXXX.zip`) too.
    let id = upload(&s, &[], ".tmpAbC123.zip", &docx);
    let r = ok(s.json(
        "POST",
        "/api/v1/resources",
        &[],
        &json!({"temp_file_id": id, "source_name": "docs2"}),
    ));
    assert!(
        s.ws.join("viking/default/resources/docs2/[Content_Types].xml")
            .is_file(),
        "{r}"
    );
}

const SKILL: &str = "---\nname: sorter\ndescription: Sorts lists\n---\n\nSort them.\n";

#[test]
fn skill_routes_answer_bad_input_as_openviking_does() {
    let s = Served::with_config(json!({ "server": { "root_api_key": "root-secret" } }));
    let alice = format!(
        "X-API-Key: {}",
        s.user_key("alice", vikingfs::server::auth::Role::User)
    );
    let alice = [alice.as_str()];
    let post = |body: Value| s.json("POST", "/api/v1/skills", &alice, &body);
    err(post(json!({})), 400, "INVALID_ARGUMENT");
    err(
        post(json!({"data": SKILL, "bogus": 1})),
        400,
        "INVALID_ARGUMENT",
    );
    err(
        post(json!({"data": "https://github.com/a/b"})),
        501,
        "UNIMPLEMENTED",
    );
    err(
        post(json!({"data": "/etc/skills/x"})),
        403,
        "PERMISSION_DENIED",
    );
    let e = err(
        post(json!({"data": "no frontmatter"})),
        400,
        "INVALID_ARGUMENT",
    );
    assert_eq!(e["message"], "SKILL.md must have YAML frontmatter");
    let e = err(
        post(json!({"data": "---\nname: a b\ndescription: d\n---\n"})),
        400,
        "INVALID_ARGUMENT",
    );
    assert_eq!(e["message"], "Invalid skill name: a b");
    err(
        post(json!({"data": SKILL, "target_uri": "viking://resources/x"})),
        400,
        "INVALID_ARGUMENT",
    );
    // Another user's skills are not hers to name.
    err(
        post(json!({"data": SKILL, "target_uri": "viking://user/bob/skills"})),
        403,
        "PERMISSION_DENIED",
    );
    err(
        s.json(
            "POST",
            "/api/v1/skills/validate",
            &alice,
            &json!({"strict": true}),
        ),
        400,
        "INVALID_ARGUMENT",
    );
    let e = err(
        s.json("GET", "/api/v1/skills/nope", &alice, &Value::Null),
        404,
        "NOT_FOUND",
    );
    assert_eq!(
        e["message"],
        "Skill not found: viking://user/alice/skills/nope"
    );
    err(
        s.json("DELETE", "/api/v1/skills/nope", &alice, &Value::Null),
        404,
        "NOT_FOUND",
    );
    err(
        s.json("GET", "/api/v1/skills/sorter?level=5", &alice, &Value::Null),
        400,
        "INVALID_ARGUMENT",
    );
    // Installed where OpenViking puts it, as a directory with its SKILL.md as given.
    let r = ok(post(json!({"data": SKILL})));
    assert_eq!(r["root_uri"], "viking://user/alice/skills/sorter", "{r}");
    assert_eq!(
        std::fs::read_to_string(s.ws.join("viking/default/user/alice/skills/sorter/SKILL.md"))
            .unwrap(),
        SKILL
    );
    // An update must name the skill its content names.
    let other = SKILL.replace("name: sorter", "name: other");
    let e = err(
        s.json(
            "PUT",
            "/api/v1/skills/sorter",
            &alice,
            &json!({"data": other}),
        ),
        400,
        "INVALID_ARGUMENT",
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("Skill name mismatch"),
        "{e}"
    );
    let r = ok(s.json(
        "PUT",
        "/api/v1/skills/sorter",
        &alice,
        &json!({"data": SKILL.replace("Sort them.", "Sort them well.")}),
    ));
    assert_eq!(r["action"], "update", "{r}");
    // A zipped package of two skills, through an upload: both installed, shared.
    let pkg = zip_of(&[
        (
            "a/SKILL.md",
            b"---\nname: a\ndescription: first\n---\nbody a\n",
        ),
        (
            "b/SKILL.md",
            b"---\nname: b\ndescription: second\n---\nbody b\n",
        ),
        ("b/data.bin", &[0u8, 1, 2, 255]),
    ]);
    let id = upload(&s, &alice, DIR_ZIP, &pkg);
    let r = ok(post(
        json!({"temp_file_id": id, "target_uri": "viking://agent/skills"}),
    ));
    assert_eq!(r["total"], 2, "{r}");
    assert_eq!(
        std::fs::read(s.ws.join("viking/default/agent/skills/b/data.bin")).unwrap(),
        [0u8, 1, 2, 255]
    );
    let list = ok(s.json("GET", "/api/v1/skills", &alice, &Value::Null));
    let names: Vec<&str> = list["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["sorter", "a", "b"], "{list}");
}

#[test]
fn cp_attrs_tags_batch_write_and_reindex_answer_bad_input_as_openviking_does() {
    let s = Served::with_config(json!({ "server": { "root_api_key": "root-secret" } }));
    let bob = format!(
        "X-API-Key: {}",
        s.user_key("bob", vikingfs::server::auth::Role::User)
    );
    let bob = [bob.as_str()];
    let root = ["X-API-Key: root-secret"];
    let dir = s.ws.join("viking/default/resources/d");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("a.md"), "alpha\n").unwrap();
    std::fs::write(dir.join("sub/b.md"), "beta\n").unwrap();
    let cp = |body: Value| s.json("POST", "/api/v1/fs/cp", &root, &body);
    err(
        cp(json!({"from_uri": "viking://resources/none", "to_uri": "viking://resources/x"})),
        404,
        "NOT_FOUND",
    );
    let e = err(
        cp(json!({"from_uri": "viking://resources/d", "to_uri": "viking://resources/e"})),
        400,
        "INVALID_ARGUMENT",
    );
    assert_eq!(e["details"]["expected_flag"], "recursive", "{e}");
    err(
        cp(
            json!({"from_uri": "viking://resources/d", "to_uri": "viking://resources/d/in", "recursive": true}),
        ),
        400,
        "INVALID_ARGUMENT",
    );
    err(
        cp(json!({"from_uri": "viking://resources/d/a.md", "to_uri": "viking://resources/d/sub"})),
        400,
        "INVALID_ARGUMENT",
    );
    err(
        cp(
            json!({"from_uri": "viking://resources/d/a.md", "to_uri": "viking://resources/nodir/a.md"}),
        ),
        404,
        "NOT_FOUND",
    );
    err(
        cp(json!({"from_uri": "viking://resources/d/a.md"})),
        400,
        "INVALID_ARGUMENT",
    );
    // A copy into an existing directory merges: what it held beyond the copy is kept.
    std::fs::create_dir_all(s.ws.join("viking/default/resources/e")).unwrap();
    std::fs::write(s.ws.join("viking/default/resources/e/own.md"), "own\n").unwrap();
    let r = ok(cp(
        json!({"from_uri": "viking://resources/d", "to_uri": "viking://resources/e", "recursive": true}),
    ));
    assert_eq!(
        (r["operation"].as_str(), r["files_created"].as_u64()),
        (Some("copy"), Some(2)),
        "{r}"
    );
    for (p, want) in [
        ("e/a.md", "alpha\n"),
        ("e/sub/b.md", "beta\n"),
        ("e/own.md", "own\n"),
        ("d/a.md", "alpha\n"),
    ] {
        assert_eq!(
            std::fs::read_to_string(s.ws.join("viking/default/resources").join(p)).unwrap(),
            want,
            "{p}"
        );
    }

    err(
        s.json(
            "GET",
            "/api/v1/fs/attrs?uri=viking://resources/none",
            &root,
            &Value::Null,
        ),
        404,
        "NOT_FOUND",
    );
    let tags = |body: Value| s.json("POST", "/api/v1/content/set_tags", &root, &body);
    err(
        tags(json!({"uri": "viking://resources/d/a.md", "tags": ["a=b"], "mode": "merge"})),
        400,
        "INVALID_ARGUMENT",
    );
    err(
        tags(json!({"uri": "viking://resources/d/a.md", "tags": ["a=b"], "bogus": 1})),
        400,
        "INVALID_ARGUMENT",
    );
    err(
        tags(json!({"uri": "viking://resources/none.md", "tags": ["a=b"]})),
        404,
        "NOT_FOUND",
    );
    // Kept as the file's extended attribute.
    ok(tags(
        json!({"uri": "viking://resources/d/a.md", "tags": ["K=V"]}),
    ));
    let out = std::process::Command::new("getfattr")
        .args(["--only-values", "-n", "user.openviking.tags"])
        .arg(dir.join("a.md"))
        .output();
    if let Ok(out) = out {
        if out.status.success() {
            assert_eq!(String::from_utf8_lossy(&out.stdout), "k=v");
        }
    }

    // Root acting as alice tags (and reindexes) what alice sees: never bob's tree.
    let bob_file = s.ws.join("viking/default/user/bob/own.md");
    std::fs::create_dir_all(bob_file.parent().unwrap()).unwrap();
    std::fs::write(&bob_file, "bob's\n").unwrap();
    std::fs::create_dir_all(s.ws.join("viking/default/user/alice")).unwrap();
    std::fs::write(s.ws.join("viking/default/user/alice/mine.md"), "alice's\n").unwrap();
    let as_alice = ["X-API-Key: root-secret", "X-OpenViking-User: alice"];
    let r = ok(s.json(
        "POST",
        "/api/v1/content/set_tags",
        &as_alice,
        &json!({"uri": "viking://user", "tags": ["who=alice"], "recursive": true}),
    ));
    let updated = r["updated_uris"].to_string();
    assert!(updated.contains("viking://user/alice/mine.md"), "{r}");
    assert!(!updated.contains("bob"), "{r}");
    let attrs = |uri: &str| {
        ok(s.json(
            "GET",
            &format!("/api/v1/fs/attrs?uri={}", enc(uri)),
            &root,
            &Value::Null,
        ))["attrs"]["tags"]
            .clone()
    };
    assert_eq!(attrs("viking://user/bob/own.md"), json!([]));
    assert_eq!(attrs("viking://user/alice/mine.md"), json!(["who=alice"]));

    let bw = |body: Value| s.json("POST", "/api/v1/content/batch-write", &root, &body);
    let one = json!([{"uri": "viking://resources/d/n.md", "content": "n"}]);
    err(
        bw(json!({"root_uri": "viking://resources/d", "operations": []})),
        400,
        "INVALID_ARGUMENT",
    );
    err(
        bw(json!({"root_uri": "viking://resources", "operations": one})),
        400,
        "INVALID_ARGUMENT",
    );
    err(
        bw(json!({"root_uri": "viking://resources/none", "operations": one})),
        400,
        "INVALID_ARGUMENT",
    );
    err(
        bw(json!({"root_uri": "viking://resources/d", "operations": [
            {"uri": "viking://resources/d/n.md", "content": "n", "content_base64": "bg=="}]})),
        400,
        "INVALID_ARGUMENT",
    );
    err(
        bw(json!({"root_uri": "viking://resources/d", "operations": [
            {"uri": "viking://resources/d/n.md", "content": "n"},
            {"uri": "viking://resources/d/n.md", "content": "m"}]})),
        400,
        "INVALID_ARGUMENT",
    );
    err(
        bw(json!({"root_uri": "viking://resources/d", "operations": [
            {"uri": "viking://resources/d/sub", "content": "n"}]})),
        409,
        "CONFLICT",
    );
    let r = ok(bw(
        json!({"root_uri": "viking://resources/d", "operations": one, "wait": false}),
    ));
    assert_eq!(r["created"], json!(["viking://resources/d/n.md"]), "{r}");

    let re = |who: &[&str], body: Value| s.json("POST", "/api/v1/content/reindex", who, &body);
    err(
        re(&root, json!({"uri": "viking://resources/d", "mode": "all"})),
        400,
        "UNSUPPORTED_MODE",
    );
    err(
        re(&root, json!({"uri": "viking://user/bob/sessions/s1"})),
        400,
        "UNSUPPORTED_URI",
    );
    err(
        re(&bob, json!({"uri": "viking://resources/d"})),
        403,
        "PERMISSION_DENIED",
    );
    err(
        re(&root, json!({"uri": "viking://resources/none"})),
        404,
        "NOT_FOUND",
    );
    let r = ok(re(
        &root,
        json!({"uri": "viking://resources/d", "wait": false}),
    ));
    assert_eq!(
        (r["status"].as_str(), r["object_type"].as_str()),
        (Some("completed"), Some("resource")),
        "{r}"
    );
    assert!(r["scanned_records"].as_u64().unwrap() >= 3, "{r}");
}

/// `fs/cp` reads its source under the source's lock and writes under the destination's: a
/// tree another process holds (`vikingfs lock --tree`) makes a copy out of it and a copy
/// into it busy (409, OpenViking's `path_busy`), and neither writes anything.
#[test]
fn cp_takes_the_sources_lock_and_the_destinations() {
    let s = Served::new();
    let held = s.ws.join("viking/default/resources/held");
    std::fs::create_dir_all(&held).unwrap();
    std::fs::write(held.join("keep.md"), "kept\n").unwrap();
    std::fs::write(s.ws.join("viking/default/resources/free.md"), "free\n").unwrap();
    let mut holder = crate::support::vikingfs(&s.home)
        .arg("--workspace")
        .arg(&s.ws)
        .args([
            "lock",
            "--tree",
            "viking://resources/held",
            "--",
            "sleep",
            "6",
        ])
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !held.join(".path.ovlock").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "vikingfs lock did not take the lock"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let cp = |from: &str, to: &str, recursive: bool| {
        s.json(
            "POST",
            "/api/v1/fs/cp",
            &[],
            &json!({"from_uri": from, "to_uri": to, "recursive": recursive}),
        )
    };
    for (from, to, recursive) in [
        (
            "viking://resources/held/keep.md",
            "viking://resources/out.md",
            false,
        ),
        ("viking://resources/held", "viking://resources/out", true),
        (
            "viking://resources/free.md",
            "viking://resources/held/in.md",
            false,
        ),
    ] {
        let e = err(cp(from, to, recursive), 409, "CONFLICT");
        assert_eq!(
            e["details"]["conflict_type"], "path_busy",
            "{from} -> {to}: {e}"
        );
    }
    for p in ["out.md", "out", "held/in.md"] {
        assert!(
            !s.ws.join("viking/default/resources").join(p).exists(),
            "{p}: a busy copy wrote nothing"
        );
    }
    assert!(holder.wait().unwrap().success());
    // Released: the same copy goes through.
    ok(cp(
        "viking://resources/held/keep.md",
        "viking://resources/out.md",
        false,
    ));
    assert_eq!(
        std::fs::read_to_string(s.ws.join("viking/default/resources/out.md")).unwrap(),
        "kept\n"
    );
}
