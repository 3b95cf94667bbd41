//! The first hour's mistakes at `vikingfs mount`, each refused in one line that says what to
//! do, before anything is created: a mount point that holds files (the mount would hide them),
//! a second daemon for a workspace already mounted, the two arguments swapped, and a user who
//! may not mount.

use std::path::Path;
use std::process::Output;

use crate::support::{self, daemon};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `vikingfs mount [EXTRA...] WS MP` with HOME at `home` and a pid file there.
fn mount(home: &Path, extra: &[&str], ws: &Path, mp: &Path) -> Output {
    support::vikingfs(home)
        .arg("mount")
        .arg("--pid-file")
        .arg(home.join("daemon.pid"))
        .args(extra)
        .arg(ws)
        .arg(mp)
        .output()
        .unwrap()
}

/// Refused with exit 1 and one line on stderr holding every one of `says`.
fn refused(out: &Output, says: &[&str]) -> String {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    for s in says {
        assert!(err.contains(s), "{s:?} missing: {err}");
    }
    err
}

/// A directory holding a file is refused as a mount point (before: mounted over, the file
/// hidden until the unmount), and nothing is created; `-o nonempty` and `--allow-non-empty`
/// mount over it.
#[test]
fn a_non_empty_mount_point_is_refused_unless_asked_for() {
    let d = tempfile::tempdir().unwrap();
    let (ws, mp) = (d.path().join("ws"), d.path().join("mnt"));
    std::fs::create_dir(&mp).unwrap();
    std::fs::write(mp.join("mine.txt"), "mine\n").unwrap();
    let out = mount(d.path(), &[], &ws, &mp);
    refused(
        &out,
        &["not empty", "mine.txt", "-o nonempty", "--allow-non-empty"],
    );
    assert!(!ws.exists(), "the refused mount created its workspace");
    assert!(!crate::support::daemon::is_mounted(&mp));
    for extra in [&["-o", "nonempty"][..], &["--allow-non-empty"]] {
        let out = mount(d.path(), extra, &ws, &mp);
        assert!(out.status.success(), "{extra:?}: {}", stderr(&out));
        assert!(mp.join("resources").is_dir(), "{extra:?}");
        assert!(
            !mp.join("mine.txt").exists(),
            "{extra:?}: the mount hides it"
        );
        daemon::unmount(d.path(), &mp, &d.path().join("daemon.pid"));
        assert_eq!(
            std::fs::read_to_string(mp.join("mine.txt")).unwrap(),
            "mine\n"
        );
    }
}

/// A second mount of a mounted workspace is refused naming where the first one is (before: a
/// second daemon started beside the first, taking over the workspace's socket).
#[test]
fn a_second_daemon_for_a_workspace_is_refused_naming_the_first_mount() {
    let m = daemon::Mount::new();
    let other = m.dir.path().join("mnt2");
    std::fs::create_dir(&other).unwrap();
    let home = tempfile::tempdir().unwrap();
    let out = mount(home.path(), &[], &m.ws, &other);
    let err = refused(&out, &["already mounted at", &m.mp.display().to_string()]);
    assert!(
        err.contains(&format!("vikingfs umount {}", m.mp.display())),
        "{err}"
    );
    assert!(!daemon::is_mounted(&other));
    // The first mount serves on.
    std::fs::write(m.res().join("still.md"), "here\n").unwrap();
    // And `vikingfs serve` of it is a second daemon too.
    let out = support::vikingfs(home.path())
        .args(["serve", "--port", "0", "--workspace"])
        .arg(&m.ws)
        .output()
        .unwrap();
    refused(&out, &["already mounted at", &m.mp.display().to_string()]);
}

/// Two daemons started in the same instant on one workspace: both find no record in the
/// registry (a daemon writes its record once it serves), and before the host's lease both
/// served, on one socket and one queue. Now exactly one serves, the other is refused in one
/// line. Real processes, started together, five rounds.
#[test]
fn two_daemons_started_at_once_leave_one_serving() {
    for round in 0..5 {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("ws");
        let start = || {
            support::vikingfs(d.path())
                .args(["serve", "--port", "0", "--workspace"])
                .arg(&ws)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let mut both = [start(), start()];
        // The loser exits; the winner serves on (until killed below).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let exited = loop {
            let done: Vec<usize> = (0..2)
                .filter(|&i| both[i].try_wait().unwrap().is_some())
                .collect();
            if !done.is_empty() || std::time::Instant::now() > deadline {
                break done;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        // Long enough for a second winner to show itself by still running.
        std::thread::sleep(std::time::Duration::from_millis(500));
        let exited: Vec<usize> = (0..2)
            .filter(|&i| exited.contains(&i) || both[i].try_wait().unwrap().is_some())
            .collect();
        for c in &mut both {
            let _ = c.kill();
        }
        let outs: Vec<Output> = both
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect();
        assert_eq!(
            exited.len(),
            1,
            "round {round}: exactly one refused: {exited:?}"
        );
        let loser = &outs[exited[0]];
        let err = refused(loser, &["one daemon serves a workspace"]);
        assert!(err.contains(&ws.display().to_string()), "{err}");
    }
}

/// The two arguments swapped — a workspace given as the mount point, or a live mount given as
/// the workspace — are named as such, with the order (before: "Operation not permitted", or
/// a new workspace made in the mount point's place).
#[test]
fn swapped_arguments_are_named() {
    let d = tempfile::tempdir().unwrap();
    let (ws, empty) = (d.path().join("ws"), d.path().join("mnt"));
    std::fs::create_dir(&empty).unwrap();
    // A workspace made with defaults, as the first mount or command makes it.
    let out = support::vikingfs(d.path())
        .arg("--workspace")
        .arg(&ws)
        .arg("reindex")
        .output()
        .unwrap();
    support::assert_ok(&out, &["reindex"]);
    let out = mount(d.path(), &[], &empty, &ws);
    refused(
        &out,
        &[
            "arguments look swapped",
            "vikingfs mount WORKSPACE MOUNTPOINT",
            &format!("vikingfs mount {} {}", ws.display(), empty.display()),
        ],
    );
    assert_eq!(
        std::fs::read_dir(&empty).unwrap().count(),
        0,
        "the mount point was made a workspace"
    );
    // A live mount given as the workspace.
    let m = daemon::Mount::new();
    let out = mount(d.path(), &[], &m.mp, &empty);
    refused(&out, &["is a vikingfs mount", "arguments look swapped"]);
}

/// A user who may not mount learns it in one line with the remedy (before: "/dev/fuse:
/// Permission denied" or "Operation not permitted"), and nothing is created.
#[test]
fn a_mount_by_a_user_who_may_not_mount_says_what_to_do() {
    if !vikingfs::sys::is_root() {
        support::skip("running a command as another user needs root");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let (ws, mp) = (d.path().join("ws"), d.path().join("mnt"));
    std::fs::create_dir(&mp).unwrap();
    let bare = support::vikingfs(d.path());
    let mut c = std::process::Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
    ])
    .arg(bare.get_program());
    for (k, v) in bare.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    let out = c.arg("mount").arg(&ws).arg(&mp).output().unwrap();
    refused(&out, &["needs root", "sudo", "vikingfs serve"]);
    assert!(!ws.exists());
}

/// A process that may mount but may not open /dev/fuse (here: root without DAC override, in
/// a mount namespace of its own where /dev/fuse is a file of mode 000) learns it in one line
/// with the remedy, before anything is created (before: "/dev/fuse: Permission denied" from
/// the daemon, after the workspace was made).
#[test]
fn a_mount_without_access_to_dev_fuse_says_what_to_do() {
    if !vikingfs::sys::is_root() {
        support::skip("a mount namespace of its own needs root");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let (ws, mp, denied) = (
        d.path().join("ws"),
        d.path().join("mnt"),
        d.path().join("no-fuse"),
    );
    std::fs::create_dir(&mp).unwrap();
    std::fs::write(&denied, "").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&denied, std::fs::Permissions::from_mode(0o000)).unwrap();
    let bare = support::vikingfs(d.path());
    let mut c = std::process::Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(
            "mount --bind \"$1\" /dev/fuse && exec setpriv \
             --bounding-set -dac_override,-dac_read_search \"$2\" mount \"$3\" \"$4\"",
        )
        .arg("sh")
        .arg(&denied)
        .arg(bare.get_program())
        .arg(&ws)
        .arg(&mp);
    for (k, v) in bare.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    let out = c.output().unwrap();
    refused(
        &out,
        &[
            "/dev/fuse: Permission denied",
            "may not open /dev/fuse",
            "--device /dev/fuse",
        ],
    );
    assert!(!ws.exists(), "the refused mount created its workspace");
}

/// `vikingfs history --json [--all]`'s entries.
fn history(m: &daemon::Mount, all: bool) -> Vec<serde_json::Value> {
    let mut args = vec!["history", "--json"];
    if all {
        args.push("--all");
    }
    let out = m.cli(&args).output().unwrap();
    support::assert_ok(&out, &args);
    serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout).unwrap()
}

fn paths(rows: &[serde_json::Value]) -> Vec<String> {
    rows.iter()
        .map(|r| r["path"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// After a `git commit` and an editor's swap file, `history` shows the user's own change,
/// not git's `index.lock` and `tmp_obj_*` or the `.swp` (before: mostly those); `--all`
/// shows them too.
#[test]
fn history_leaves_out_what_the_ignore_rules_ignore_unless_all() {
    let m = daemon::Mount::new();
    daemon::ok(
        &m.res(),
        "mkdir proj && cd proj && git init -q && echo one > a.md && git add a.md \
         && git -c user.email=t@t -c user.name=t commit -qm one && echo two > a.md \
         && git -c user.email=t@t -c user.name=t commit -qam two \
         && echo swap > .a.md.swp && rm .a.md.swp && rm a.md",
    );
    let shown = paths(&history(&m, false));
    let all = paths(&history(&m, true));
    assert!(
        shown.iter().any(|p| p == "resources/proj/a.md"),
        "the user's rm is shown: {shown:?}"
    );
    assert!(
        shown
            .iter()
            .all(|p| !p.contains("/.git/") && !p.ends_with(".swp")),
        "ignored paths shown: {shown:?}"
    );
    assert!(
        all.iter().any(|p| p.contains("/.git/")) && all.iter().any(|p| p.ends_with(".swp")),
        "--all shows git's and the editor's: {all:?}"
    );
    assert!(all.len() > shown.len());
}

/// A removal is recorded after its reply, with its batch; held back here (2 s), it is
/// recorded after an overwrite that came later. `history` still lists the overwrite first
/// (newest first, by when each happened), with the removal's own time (before: by when
/// recorded, the removal first).
#[test]
fn history_orders_entries_by_when_the_operation_happened() {
    let m = daemon::Mount::with_env(&[("VIKINGFS_PAUSE_AT", "rm.index_deleted:2000")]);
    let r = m.res();
    daemon::ok(&r, "echo a > a.md && echo b > b.md");
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    // Apart by more than the history's millisecond, so "when it happened" orders them.
    daemon::ok(&r, "rm a.md && sleep 0.05 && echo new > b.md");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let rows = loop {
        let rows = history(&m, false);
        if rows.len() >= 2 || std::time::Instant::now() > deadline {
            break rows;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(
        paths(&rows),
        ["resources/b.md", "resources/a.md"],
        "{rows:#?}"
    );
    let (over, rm) = (&rows[0], &rows[1]);
    assert_eq!(rm["op"], "rm", "{rm}");
    // The case at hand: the removal was recorded after the overwrite.
    assert!(rm["at_ms"].as_i64() > over["at_ms"].as_i64(), "{rows:#?}");
    // Its time is the removal's, not its recording's.
    let happened = rm["happened_ms"].as_i64().unwrap();
    assert!(
        happened >= before - 1000 && happened <= over["happened_ms"].as_i64().unwrap(),
        "{rows:#?}"
    );
    assert!(
        rm["at_ms"].as_i64().unwrap() - happened >= 1500,
        "{rows:#?}"
    );
}
