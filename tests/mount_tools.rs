//! Plain programs (cp, mv, rm, cat, ls, touch, ln, find, stat) through a real vikingfs mount.

mod common;

use common::{fails, ls_user, ok, sh, stale_token, user_tree, Mount};

#[test]
fn root_shows_the_scopes_and_type_is_fuse_vikingfs() {
    let m = Mount::new();
    assert_eq!(ok(&m.mp, "ls"), "agent\nresources\nuser\n");
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let line = mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(m.mp.to_str().unwrap()))
        .expect("mount listed");
    let f: Vec<_> = line.split(' ').collect();
    assert_eq!(f[0], m.ws.canonicalize().unwrap().to_str().unwrap());
    assert_eq!(f[2], "fuse.vikingfs");
    fails(&m.mp, "mkdir other");
    fails(&m.mp, "rmdir resources");
}

#[test]
fn copy_move_append_remove_with_plain_tools() {
    let m = Mount::new();
    let src = m.dir.path().join("src");
    std::fs::create_dir_all(src.join("d/e")).unwrap();
    for (i, p) in ["a.md", "d/b.md", "d/e/c.md"].iter().enumerate() {
        std::fs::write(src.join(p), format!("content {i}\n")).unwrap();
    }
    let r = m.res();
    ok(&r, &format!("cp -r {} tree", src.display()));
    // The workers may have summarised the copy meanwhile: compare what users made.
    assert_eq!(user_tree(&r.join("tree")), user_tree(&src));
    assert_eq!(user_tree(&m.backing().join("tree")), user_tree(&src));
    ok(&r, "echo more >> tree/a.md");
    assert_eq!(ok(&r, "cat tree/a.md"), "content 0\nmore\n");
    ok(&r, "mv tree moved && touch moved/new.md");
    assert!(!m.backing().join("tree").exists());
    assert_eq!(
        ok(
            &r,
            "find moved -type f ! -name .abstract.md ! -name .overview.md | sort"
        ),
        "moved/a.md\nmoved/d/b.md\nmoved/d/e/c.md\nmoved/new.md\n"
    );
    ok(&r, "rm -rf moved");
    assert_eq!(ls_user(&r), "");
    assert_eq!(ls_user(&m.backing()), "");
}

#[test]
fn hard_links_share_an_inode_and_nlink_at_once() {
    let m = Mount::new();
    let r = m.res();
    ok(&r, "echo x > f && ln f g && mkdir d && ln f d/h");
    let out = ok(&r, "stat -c '%i %h' f g d/h");
    let lines: Vec<_> = out.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines.iter().all(|l| *l == lines[0]), "{out}");
    assert!(lines[0].ends_with(" 3"), "{out}");
    ok(&r, "rm g");
    assert!(ok(&r, "stat -c '%h' f d/h").lines().all(|l| l == "2"));
    ok(&r, "ln -s f s");
    assert_eq!(ok(&r, "readlink s && cat s"), "f\nx\n");
}

#[test]
fn internal_names_are_invisible_and_sidecars_read_only() {
    let m = Mount::new();
    let b = m.backing().join("d");
    std::fs::create_dir_all(&b).unwrap();
    // Lock files a crashed OpenViking process left behind.
    std::fs::write(b.join(".path.ovlock"), stale_token('T')).unwrap();
    std::fs::write(b.join(".exact.ovlock.abc"), stale_token('E')).unwrap();
    std::fs::write(b.join(".redirect.json"), "{}").unwrap();
    std::fs::write(b.join(".abstract.md"), "summary").unwrap();
    std::fs::write(b.join(".overview.md"), "overview").unwrap();
    let d = m.res().join("d");
    assert_eq!(ok(&d, "ls -a"), ".\n..\n.abstract.md\n.overview.md\n");
    // Read before anything changes in d (a change has the workers write a new summary).
    assert_eq!(ok(&d, "cat .abstract.md"), "summary");
    ok(&d, "echo x > f");
    fails(&d, "cat .path.ovlock");
    fails(&d, "cat .redirect.json");
    let e = fails(&d, "touch .vikingfs.x");
    assert!(e.contains("not permitted"), "{e}");
    let e = fails(&d, "echo x > .abstract.md");
    assert!(e.contains("denied"), "{e}");
    fails(&d, "rm -f .overview.md");
    fails(&d, "mv f .overview.md");
    fails(&d, "mv .abstract.md other");
    ok(&d, "rm f");
    // Only sidecars and lock files left: the directory goes with rm -rf.
    ok(&m.res(), "rm -rf d");
    assert!(!b.exists());
}

#[test]
fn sidecars_go_with_rm_rf_of_a_full_directory() {
    let m = Mount::new();
    let b = m.backing().join("d/e");
    std::fs::create_dir_all(&b).unwrap();
    for d in [b.parent().unwrap(), &b] {
        std::fs::write(d.join(".abstract.md"), "summary").unwrap();
        std::fs::write(d.join(".overview.md"), "overview").unwrap();
        std::fs::write(d.join(".path.ovlock"), stale_token('T')).unwrap();
    }
    std::fs::write(b.join("zzz.md"), "user file").unwrap();
    ok(&m.res(), "rm -rf d");
    assert!(!m.backing().join("d").exists());
}

#[test]
fn errors_carry_the_right_errno() {
    let m = Mount::new();
    let r = m.res();
    ok(&r, "mkdir d && touch d/f && touch f");
    assert!(fails(&r, "rmdir d").contains("not empty"));
    assert!(fails(&r, "cat nope").contains("No such file"));
    assert!(fails(&r, "mkdir d").contains("exists"));
    assert!(fails(&r, "cat d").contains("Is a directory"));
    assert!(fails(&r, "ls f/x").contains("Not a directory"));
    let long = "x".repeat(300);
    assert!(fails(&r, &format!("touch {long}")).contains("too long"));
    let out = sh(&r, "touch -d '2001-02-03 04:05:06' f && stat -c %Y f");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "981173106");
}

#[test]
fn data_survives_unmount_and_remount() {
    let m = Mount::new();
    let r = m.res();
    ok(
        &r,
        "head -c 3000000 /dev/urandom > big && cp big copy && mkdir d && mv copy d/",
    );
    let before = std::fs::read(r.join("big")).unwrap();
    let pid = m.pid();
    let out = common::vikingfs(m.dir.path())
        .arg("umount")
        .arg(&m.mp)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    common::wait_gone(pid);
    assert_eq!(std::fs::read(m.backing().join("d/copy")).unwrap(), before);
    m.mount();
    assert_eq!(std::fs::read(r.join("d/copy")).unwrap(), before);
}

#[test]
fn mount_refuses_unknown_options_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let mp = dir.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let out = common::vikingfs(dir.path())
        .args(["mount", "-o", "rw,nosuid,frobnicate"])
        .arg(dir.path().join("ws"))
        .arg(&mp)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err, "vikingfs: unknown mount option \"frobnicate\"\n");
}

#[test]
fn stale_mount_of_a_killed_daemon_is_cleared() {
    let m = Mount::new();
    ok(&m.res(), "echo kept > f");
    m.kill9();
    let e = std::fs::metadata(&m.mp).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTCONN));
    m.mount();
    assert_eq!(ok(&m.res(), "cat f"), "kept\n");
}

#[test]
fn sigterm_unmounts_and_the_daemon_exits() {
    let m = Mount::new();
    ok(&m.res(), "echo x > f");
    let pid = m.pid();
    unsafe { libc::kill(pid, libc::SIGTERM) };
    common::wait_gone(pid);
    assert!(!std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(m.mp.to_str().unwrap())));
    assert_eq!(std::fs::read(m.backing().join("f")).unwrap(), b"x\n");
}

#[test]
fn umount_of_a_busy_mount_says_so_and_keeps_it() {
    let m = Mount::new();
    ok(&m.res(), "echo x > f");
    let f = std::fs::File::open(m.res().join("f")).unwrap();
    let out = common::vikingfs(m.dir.path())
        .arg("umount")
        .arg(&m.mp)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("is busy"), "{err}");
    assert_eq!(ok(&m.res(), "cat f"), "x\n");
    drop(f);
}

#[test]
fn rename_exchange_is_refused_with_einval_and_changes_nothing() {
    use std::os::unix::ffi::OsStrExt;
    let m = Mount::new();
    let r = m.res();
    ok(&r, "echo one > a && mkdir d && echo two > d/b");
    let before = user_tree(&r);
    let c = |p: &str| std::ffi::CString::new(r.join(p).as_os_str().as_bytes()).unwrap();
    for (x, y) in [("a", "d/b"), ("a", "d")] {
        let rc = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                c(x).as_ptr(),
                libc::AT_FDCWD,
                c(y).as_ptr(),
                libc::RENAME_EXCHANGE,
            )
        };
        assert_eq!(rc, -1, "RENAME_EXCHANGE of {x} and {y} succeeded");
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EINVAL)
        );
    }
    assert_eq!(user_tree(&r), before);
    assert_eq!(user_tree(&m.backing()), before);
}

/// `-o cache_timeout=SECS` is how long the kernel trusts what it cached: a file removed behind
/// the mount (here straight from the workspace, as the CLI or OpenViking would) is gone at
/// once through a mount with 0, and still answered from the kernel's cache with 60.
#[test]
fn cache_timeout_sets_how_long_the_kernel_trusts_a_name() {
    for (timeout, still_seen) in [("0", false), ("60", true)] {
        let m = Mount::with_options(&[&format!("cache_timeout={timeout}")]);
        let f = m.res().join("cached.md");
        std::fs::write(&f, "x").unwrap();
        assert!(std::fs::metadata(&f).is_ok());
        std::fs::remove_file(m.backing().join("cached.md")).unwrap();
        assert_eq!(
            std::fs::metadata(&f).is_ok(),
            still_seen,
            "cache_timeout={timeout}"
        );
    }
}
