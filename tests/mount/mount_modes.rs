//! Modes: what a caller makes through the mount gets the caller's mode (its umask applied,
//! whatever the daemon's), and what the daemon makes for itself is never left open to
//! everyone — the history and its blobs 0700, the upload folder 0700, a file written over the
//! API as any program's, and the parents `undo` makes again as they were.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::json;

use crate::support::daemon::{ok, Mount};
use crate::support::serve::http;
use crate::support::{self};

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// A shell in the mount with umask 027 (and 002, whose group-write bit the daemon's own
/// umask, 022 here, would take off): a directory, a file and a FIFO get the modes a native
/// filesystem gives them.
#[test]
fn what_a_caller_makes_through_the_mount_honours_its_umask() {
    let m = Mount::new();
    let res = m.res();
    for (umask, dir, file) in [("027", 0o750, 0o640), ("002", 0o775, 0o664)] {
        let d = format!("d{umask}");
        ok(
            &res,
            &format!(
                "umask {umask} && mkdir {d} && echo x > {d}/f && mkfifo {d}/p && \
                 mkdir -m 0777 {d}/open && touch {d}/g && chmod 0606 {d}/g"
            ),
        );
        let here = res.join(&d);
        assert_eq!(mode(&here), dir, "mkdir under umask {umask}");
        assert_eq!(mode(&here.join("f")), file, "a file under umask {umask}");
        assert_eq!(mode(&here.join("p")), file, "a FIFO under umask {umask}");
        // mkdir -m and chmod set exactly what they ask, as natively.
        assert_eq!(mode(&here.join("open")), 0o777, "mkdir -m 0777");
        assert_eq!(mode(&here.join("g")), 0o606, "chmod");
        // And so the workspace holds them.
        let back = m.backing().join(&d);
        assert_eq!(
            (mode(&back), mode(&back.join("f"))),
            (dir, file),
            "backing of {d}"
        );
    }
}

/// The daemon's own files: the history and its blobs 0700 once a removal is kept; the
/// upload folder 0700; a file written over the API 0644 (the daemon's umask, 022 here, as
/// any program's); the directories above a file `undo` puts back made again with the modes
/// they had (750 and 755), not 0777.
#[test]
fn the_daemons_own_files_get_private_or_recorded_modes() {
    let tmp = tempfile::tempdir().unwrap();
    let tmpdir = tmp.path().to_str().unwrap();
    let (m, addr) = Mount::with_api("{}", &[("TMPDIR", tmpdir)]);
    let res = m.res();
    ok(
        &res,
        "mkdir -p a/b && echo kept > a/b/f && chmod 0750 a && chmod 0755 a/b && rm -rf a",
    );
    // Every mode is checked before the test fails, so that one run names all that is wrong.
    let mut wrong = Vec::new();
    let mut want = |what: &str, p: &Path, m: u32| {
        let got = mode(p);
        if got != m {
            wrong.push(format!("{what}: {got:o}, not {m:o}"));
        }
    };
    let history = m.ws.join(".vikingfs/history");
    want("history/", &history, 0o700);
    want("history/blobs/", &history.join("blobs"), 0o700);

    // undo of the one file: its parents come back as they were.
    let out = m
        .cli(&["undo", "viking://resources/a/b/f"])
        .output()
        .unwrap();
    support::assert_ok(&out, &["undo", "viking://resources/a/b/f"]);
    assert_eq!(
        std::fs::read_to_string(m.backing().join("a/b/f")).unwrap(),
        "kept\n"
    );
    want("a, made again by undo", &m.backing().join("a"), 0o750);
    want("a/b, made again by undo", &m.backing().join("a/b"), 0o755);

    // An upload waits in a folder of the daemon's own, 0700.
    let boundary = "b0undary";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"n.md\"\r\n\
         Content-Type: application/octet-stream\r\n\r\nnote\r\n--{boundary}--\r\n"
    )
    .into_bytes();
    let ct = format!("Content-Type: multipart/form-data; boundary={boundary}");
    let (code, v) = http(
        addr,
        "POST",
        "/api/v1/resources/temp_upload",
        &[&ct],
        Some(&body),
    );
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&v));
    let folders: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("vikingfs-uploads-")
        })
        .collect();
    assert_eq!(folders.len(), 1, "{folders:?}");
    want("the upload folder", &folders[0].path(), 0o700);
    body.clear();

    // A file the API writes is no one else's to write.
    let req = serde_json::to_vec(&json!({
        "uri": "viking://resources/api.md", "content": "over the API", "mode": "create"
    }))
    .unwrap();
    let (code, v) = http(
        addr,
        "POST",
        "/api/v1/content/write",
        &["Content-Type: application/json"],
        Some(&req),
    );
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&v));
    want(
        "a file written over the API",
        &m.backing().join("api.md"),
        0o644,
    );
    assert!(wrong.is_empty(), "{wrong:#?}");
}
