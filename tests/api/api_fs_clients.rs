//! The filesystem, content and resource routes driven by OpenViking's real clients: its
//! Python SDK (`sdk_fs.py`) and its `ov` command (`ov_fs.py`), each with a user key, adding
//! a local directory (zipped and uploaded by the client), then working the files, and each
//! refused with 409 CONFLICT while another process holds a lock.

use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::serve::{clients, python, Served};

/// A served workspace with a root key and a user key for bob, and `viking://resources/held`
/// TREE-locked by `vikingfs lock` for `secs`.
fn served_with_held_lock(secs: u32) -> (Served, String, std::process::Child) {
    let s = Served::with_config(json!({ "server": { "root_api_key": "root-secret" } }));
    let key = s.user_key("bob", vikingfs::server::auth::Role::User);
    let held = s.ws.join("viking/default/resources/held");
    std::fs::create_dir_all(&held).unwrap();
    std::fs::write(held.join("keep.md"), "kept").unwrap();
    let child = crate::support::vikingfs(&s.home)
        .arg("--workspace")
        .arg(&s.ws)
        .args(["lock", "--tree", "viking://resources/held", "--", "sleep"])
        .arg(secs.to_string())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !held.join(".path.ovlock").exists() {
        assert!(
            Instant::now() < deadline,
            "vikingfs lock did not take the lock"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (s, key, child)
}

fn assert_passed(out: &Output, script: &str, s: &Served) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "{script} failed ({:?}):\n{stdout}\n{}\nserver log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        s.log()
    );
}

fn finish(mut holder: std::process::Child, s: &Served) {
    assert!(
        holder.wait().unwrap().success(),
        "the lock holder ran to its end"
    );
    assert!(
        s.ws.join("viking/default/resources/held/keep.md").is_file(),
        "the refused rm removed nothing"
    );
}

#[test]
fn openvikings_python_sdk_works_the_files_end_to_end() {
    let Some(clients) = clients() else { return };
    let (s, key, holder) = served_with_held_lock(8);
    let out = python(
        &clients,
        "sdk_fs.py",
        &[&s.url(), "--key", &key, "--held", "viking://resources/held"],
    );
    assert_passed(&out, "sdk_fs.py", &s);
    finish(holder, &s);
}

#[test]
fn openvikings_ov_command_works_the_files_end_to_end() {
    let Some(clients) = clients() else { return };
    let (s, key, holder) = served_with_held_lock(8);
    let ov = clients.join("bin/ov");
    let out = python(
        &clients,
        "ov_fs.py",
        &[
            &s.url(),
            ov.to_str().unwrap(),
            "--key",
            &key,
            "--held",
            "viking://resources/held",
        ],
    );
    assert_passed(&out, "ov_fs.py", &s);
    finish(holder, &s);
}

/// OpenViking's snapshot namespace (`client.snapshot`) over the history: log, show, diff,
/// restore and commit through the real SDK, and a user key refused without paths.
#[test]
fn openvikings_python_sdk_reads_and_restores_snapshots_over_the_history() {
    let Some(clients) = clients() else { return };
    let (s, user_key, holder) = served_with_held_lock(1);
    let out = python(
        &clients,
        "sdk_snapshot.py",
        &[&s.url(), "--key", "root-secret", "--user-key", &user_key],
    );
    assert_passed(&out, "sdk_snapshot.py", &s);
    finish(holder, &s);
    // A symlink made in the workspace (through a mount, by a local user) is not followed for
    // a remote caller, now or in the past.
    // A directory on the way is one too: `snap/etc` -> /etc.
    let evil = s.ws.join("viking/default/resources/snap/etc");
    std::os::unix::fs::symlink("/etc", &evil).unwrap();
    let auth = "Authorization: Bearer root-secret";
    for r in ["main", "2999-01-01T00:00:00Z"] {
        let path =
            format!("/api/v1/snapshot/show?target_ref={r}&path=viking://resources/snap/etc/passwd");
        let (status, bytes) = s.call_raw("GET", &path, &[auth], None);
        let text = String::from_utf8_lossy(&bytes);
        // Not there for the caller (a symlink on the way is no directory), as the content
        // routes answer it.
        assert_eq!(status, 404, "{r}: {text}");
        assert!(!text.contains("root:"), "{r}: {text}");
    }
}
