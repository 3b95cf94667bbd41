//! The single-path operations the API's content and filesystem routes run: `append_file`
//! (read and replaced under one EXACT lock, so concurrent appends never lose one another),
//! `mkdir` with and without parents (each level under its lock, refused busy under a held
//! tree), and add-resource into a named parent.

use std::collections::BTreeSet;
use std::sync::Arc;

use vikingfs::config::Config;
use vikingfs::ops::{AddOptions, Ops, OpsError};
use vikingfs::uri::{UriError, VPath};
use vikingfs::workspace::Workspace;

fn engine() -> (tempfile::TempDir, Workspace, Arc<Ops>) {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path().join("ws"), "default", "default").unwrap();
    let ops = Ops::open(&ws, &Config::default()).unwrap();
    (dir, ws, ops)
}

fn p(s: &str) -> VPath {
    VPath::from_rel(s).unwrap()
}

#[test]
fn concurrent_appends_never_lose_one_another() {
    let (_d, ws, ops) = engine();
    let f = p("resources/log.md");
    assert_eq!(
        ops.append_file(&f, b"start\n").unwrap(),
        6,
        "a missing file is created"
    );
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let (ops, f) = (ops.clone(), f.clone());
            std::thread::spawn(move || {
                for i in 0..20 {
                    ops.append_file(&f, format!("t{t} line {i}\n").as_bytes())
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let text = std::fs::read_to_string(ws.fs_path(&f)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "start");
    assert_eq!(lines.len(), 121, "{text}");
    let unique: BTreeSet<&str> = lines.iter().copied().collect();
    assert_eq!(unique.len(), 121, "no append was lost or doubled");
    // Each thread's lines in its own order.
    for t in 0..6 {
        let mine: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| l.starts_with(&format!("t{t} ")))
            .collect();
        let want: Vec<String> = (0..20).map(|i| format!("t{t} line {i}")).collect();
        assert_eq!(mine, want);
    }
    // A directory is not appended to; a derived summary is not the user's.
    std::fs::create_dir(ws.fs_path(&p("resources/d"))).unwrap();
    assert!(matches!(
        ops.append_file(&p("resources/d"), b"x"),
        Err(OpsError::IsADirectory(_))
    ));
    assert!(matches!(
        ops.append_file(&p("resources/d/.abstract.md"), b"x"),
        Err(OpsError::Derived(_))
    ));
}

#[test]
fn mkdir_makes_each_missing_level_under_its_lock() {
    let (_d, ws, ops) = engine();
    let deep = p("resources/a/b/c");
    assert!(
        matches!(ops.mkdir(&deep, false), Err(OpsError::NotFound(u)) if u == "viking://resources/a/b")
    );
    assert!(
        !ws.fs_path(&p("resources/a")).exists(),
        "nothing made without parents"
    );
    ops.mkdir(&deep, true).unwrap();
    assert!(ws.fs_path(&deep).is_dir());
    assert!(matches!(ops.mkdir(&deep, true), Err(OpsError::Exists(_))));
    ops.mkdir(&p("resources/a/b/c2"), false).unwrap();
    // No lock file is left behind.
    let names: Vec<_> = std::fs::read_dir(ws.fs_path(&p("resources/a/b")))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("ovlock"))
        .collect();
    assert!(names.is_empty(), "{names:?}");
    // A file on the way; a scope root; a held tree above.
    ops.write_file(&p("resources/f.md"), b"x").unwrap();
    assert!(matches!(
        ops.mkdir(&p("resources/f.md/sub"), true),
        Err(OpsError::NotADirectory(_))
    ));
    assert!(matches!(
        ops.mkdir(&p("resources"), true),
        Err(OpsError::ScopeRoot(_))
    ));
    let held = ops.locks().tree(&p("resources/a")).unwrap();
    let e = ops.mkdir(&p("resources/a/b/c3"), false).unwrap_err();
    assert!(e.is_busy(), "{e}");
    assert!(!ws.fs_path(&p("resources/a/b/c3")).exists());
    drop(held);
    ops.mkdir(&p("resources/a/b/c3"), false).unwrap();
}

#[test]
fn add_resource_goes_into_the_parent_named() {
    let (d, ws, ops) = engine();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("notes")).unwrap();
    std::fs::write(src.join("notes/n.md"), "note").unwrap();
    ops.mkdir(&p("resources/shelf"), false).unwrap();
    let opts = AddOptions {
        parent: Some(p("resources/shelf")),
        ..AddOptions::default()
    };
    let first = ops
        .add_resource(&src.join("notes"), &opts, &mut |_, _| {})
        .unwrap();
    assert_eq!(first.target, p("resources/shelf/notes"));
    let again = ops
        .add_resource(&src.join("notes"), &opts, &mut |_, _| {})
        .unwrap();
    assert_eq!(
        again.target,
        p("resources/shelf/notes_1"),
        "a taken name gets a suffix"
    );
    assert!(ws.fs_path(&p("resources/shelf/notes_1/n.md")).is_file());
    let missing = AddOptions {
        parent: Some(p("resources/nope")),
        ..AddOptions::default()
    };
    assert!(matches!(
        ops.add_resource(&src.join("notes"), &missing, &mut |_, _| {}),
        Err(OpsError::NotFound(_))
    ));
}

/// add-resource puts content under resources/ only (OpenViking's
/// `validate_content_target_uri(kind="resource")`), whichever face asks: an agent's tree, a
/// user's memories or sessions are refused before anything is copied.
#[test]
fn add_resource_refuses_a_target_outside_resources() {
    let (d, ws, ops) = engine();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("notes")).unwrap();
    std::fs::write(src.join("notes/n.md"), "note").unwrap();
    for (to, parent) in [
        (Some("agent/notes"), None),
        (Some("user/alice/memories/notes"), None),
        (Some("user/alice/sessions/s1/notes"), None),
        (None, Some("agent")),
        (None, Some("user/alice/memories")),
    ] {
        let opts = AddOptions {
            to: to.map(p),
            parent: parent.map(p),
        };
        let e = ops
            .add_resource(&src.join("notes"), &opts, &mut |_, _| {})
            .unwrap_err();
        assert!(
            matches!(e, OpsError::Uri(UriError::NotForResources(_))),
            "{to:?} {parent:?}: {e}"
        );
    }
    assert!(!ws.fs_path(&p("agent/notes")).exists());
    assert!(!ws.fs_path(&p("user/alice/memories/notes")).exists());
    let opts = AddOptions {
        to: Some(p("user/alice/resources/notes")),
        parent: None,
    };
    let r = ops
        .add_resource(&src.join("notes"), &opts, &mut |_, _| {})
        .unwrap();
    assert_eq!(r.target, p("user/alice/resources/notes"));
}

/// An add-resource update keeps what it replaces and what it drops: each in the history
/// (op `add`), and `undo` of the target gives the old version back, file for file.
#[test]
fn an_add_resource_update_keeps_what_it_replaces_and_drops() {
    let env = crate::support::ops::Env::new();
    let v1 = [
        ("a.md", "alpha v1\n".to_string()),
        ("b.md", "bravo\n".to_string()),
        ("sub/c.md", "charlie\n".to_string()),
    ];
    let src = env.local("docs", &v1);
    env.add_waited(&src, "viking://resources/docs");
    // The new version: a.md changed, b.md and sub/ gone, d.md new.
    std::fs::write(src.join("a.md"), "alpha v2\n").unwrap();
    std::fs::remove_file(src.join("b.md")).unwrap();
    std::fs::remove_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("d.md"), "delta\n").unwrap();
    env.add_waited(&src, "viking://resources/docs");
    let backing = env.ws().join("viking/default/resources/docs");
    let read = |rel: &str| std::fs::read_to_string(backing.join(rel)).ok();
    assert_eq!(read("a.md").as_deref(), Some("alpha v2\n"));
    assert_eq!(read("b.md"), None);
    let listed = env.ok(&["history", "--json", "viking://resources/docs"]);
    let v: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let kept: BTreeSet<(String, String)> = v
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["blob"].is_string())
        .map(|e| {
            (
                e["op"].as_str().unwrap().into(),
                e["path"].as_str().unwrap().into(),
            )
        })
        .collect();
    for path in [
        "resources/docs/a.md",
        "resources/docs/b.md",
        "resources/docs/sub",
    ] {
        assert!(
            kept.contains(&("add".to_string(), path.to_string())),
            "{path} kept: {kept:?}"
        );
    }
    env.ok(&["undo", "--force", "viking://resources/docs"]);
    assert_eq!(read("a.md").as_deref(), Some("alpha v1\n"));
    assert_eq!(read("b.md").as_deref(), Some("bravo\n"));
    assert_eq!(read("sub/c.md").as_deref(), Some("charlie\n"));
}

/// A crash after a replaced version was kept and before its entry (`history.kept`) leaves
/// the file as it was and content without an entry, which `fsck` names and `--repair`
/// clears; the write then goes through and is kept as any other.
#[cfg(feature = "failpoints")]
#[test]
fn a_crash_between_a_kept_version_and_its_entry_loses_nothing() {
    let env = crate::support::ops::Env::new();
    let from = env
        .local("src", &[("new.md", "new\n".to_string())])
        .join("new.md");
    let from = from.to_str().unwrap();
    env.ok(&["write", "viking://resources/w.md", "--from", from]);
    let old = env
        .local("src2", &[("old.md", "old\n".to_string())])
        .join("old.md");
    env.ok(&[
        "write",
        "viking://resources/w.md",
        "--from",
        old.to_str().unwrap(),
    ]);
    let args = ["write", "viking://resources/w.md", "--from", from];
    let out = env
        .cmd(&args)
        .env("VIKINGFS_CRASH_AT", "history.kept")
        .output()
        .unwrap();
    crate::support::assert_crashed_at(&out, "history.kept", &args);
    assert_eq!(
        std::fs::read_to_string(env.data("resources/w.md")).unwrap(),
        "old\n"
    );
    // Content kept moments ago counts as in flight: here it is not (the writer died).
    let fsck = env
        .cmd(&["fsck", "--json"])
        .env("VIKINGFS_HISTORY_IN_FLIGHT_MS", "0")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&fsck.stdout).unwrap();
    assert!(
        v["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["kind"].as_str().unwrap_or_default().contains("history")),
        "fsck names the content without an entry: {v}"
    );
    env.check_repair();
    env.ok(&args);
    assert_eq!(
        std::fs::read_to_string(env.data("resources/w.md")).unwrap(),
        "new\n"
    );
    let listed = env.ok(&["history", "--json", "viking://resources/w.md"]);
    let h: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert!(
        h.as_array().unwrap().iter().any(|e| e["blob"].is_string()),
        "{h}"
    );
}

/// unlink and rmdir take their lock without looking first: what is not there, or not the kind
/// asked for, is refused as before, nothing is made for the lock file, and no lock file stays.
#[test]
fn removals_of_what_is_not_there_make_nothing_and_leave_no_lock() {
    let (_d, ws, ops) = engine();
    std::fs::create_dir(ws.fs_path(&p("resources/d"))).unwrap();
    std::fs::write(ws.fs_path(&p("resources/f")), "x").unwrap();
    let missing = |r: OpsError| matches!(r, OpsError::NotFound(_));
    assert!(missing(ops.unlink(&p("resources/nope/x")).unwrap_err()));
    assert!(missing(ops.rmdir(&p("resources/nope/x")).unwrap_err()));
    assert!(missing(ops.rm(&p("resources/nope/x"), false).unwrap_err()));
    assert!(missing(ops.unlink(&p("resources/d/x")).unwrap_err()));
    assert!(missing(ops.rmdir(&p("resources/d/x")).unwrap_err()));
    assert!(
        !ws.fs_path(&p("resources/nope")).exists(),
        "no directory made for a lock on a missing path"
    );
    assert!(matches!(
        ops.unlink(&p("resources/d")),
        Err(OpsError::IsADirectory(_))
    ));
    assert!(matches!(
        ops.rmdir(&p("resources/f")),
        Err(OpsError::NotADirectory(_))
    ));
    let names = |d: &str| -> BTreeSet<String> {
        std::fs::read_dir(ws.fs_path(&p(d)))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(names("resources/d"), BTreeSet::new(), "no lock file left");
    assert!(
        names("resources").iter().all(|n| !n.contains("ovlock")),
        "no lock file left: {:?}",
        names("resources")
    );
    assert!(ws.fs_path(&p("resources/d")).is_dir());
    assert!(ws.fs_path(&p("resources/f")).is_file());
    // And what is there goes.
    ops.unlink(&p("resources/f")).unwrap();
    ops.rmdir(&p("resources/d")).unwrap();
    assert!(!ws.fs_path(&p("resources/f")).exists() && !ws.fs_path(&p("resources/d")).exists());
}
