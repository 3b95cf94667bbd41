//! Plain programs (cp, mv, rm, cat, ls, touch, ln, find, stat, git) through a real vikingfs
//! mount.

use crate::support::{self, daemon};

use std::path::Path;
use std::process::Command;

use daemon::{fails, ls_user, ok, sh, stale_token, tree, user_tree, Mount};

/// Drain the queues: the daemon's workers have written every summary that was due.
fn drain(m: &Mount) {
    let out = m.cli(&["wait", "--timeout", "300"]).output().unwrap();
    assert!(
        out.status.success(),
        "vikingfs wait: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether the workers wrote both summaries of the backing directory `d`.
fn summarised(d: &Path) -> bool {
    d.join(".abstract.md").is_file() && d.join(".overview.md").is_file()
}

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
    // The workers may have summarised the copy meanwhile: the backing directory holds what
    // users made and the summaries; the mount lists only what users made.
    assert_eq!(tree(&r.join("tree")), tree(&src));
    assert_eq!(user_tree(&m.backing().join("tree")), tree(&src));
    ok(&r, "echo more >> tree/a.md");
    assert_eq!(ok(&r, "cat tree/a.md"), "content 0\nmore\n");
    ok(&r, "mv tree moved && touch moved/new.md");
    assert!(!m.backing().join("tree").exists());
    assert_eq!(
        ok(&r, "find moved -type f | sort"),
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
    // Summaries are not listed (see `summaries_are_read_by_name_but_not_listed`)...
    assert_eq!(ok(&d, "ls -a"), ".\n..\n");
    // ...but answer by name. Read before anything changes in d (a change has the workers
    // write a new summary).
    assert_eq!(ok(&d, "ls -a .overview.md"), ".overview.md\n");
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
    let out = support::vikingfs(m.dir.path())
        .arg("umount")
        .arg(&m.mp)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    support::wait_gone(pid);
    assert_eq!(std::fs::read(m.backing().join("d/copy")).unwrap(), before);
    m.mount();
    assert_eq!(std::fs::read(r.join("d/copy")).unwrap(), before);
}

#[test]
fn mount_refuses_unknown_options_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let mp = dir.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let out = support::vikingfs(dir.path())
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
    // SAFETY: kill takes no pointer and writes no memory; `pid` is the mount's daemon.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    support::wait_gone(pid);
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
    let out = support::vikingfs(m.dir.path())
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
        // SAFETY: the CString temporaries `c(x)` and `c(y)` are NUL-terminated and live until
        // the end of this statement, past the call; renameat2 only reads them.
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

/// The summaries the workers write are derived data: no listing shows them (so `ls -a` and
/// `find` see only what users made), yet they answer by name, read-only.
#[test]
fn summaries_are_read_by_name_but_not_listed() {
    let m = Mount::new();
    let r = m.res();
    ok(
        &r,
        "mkdir -p d/e && echo alpha > d/a.md && echo beta > d/e/b.md",
    );
    drain(&m);
    for d in ["d", "d/e"] {
        assert!(summarised(&m.backing().join(d)), "no summaries in {d}");
    }
    assert_eq!(ok(&r, "LC_ALL=C ls -a d"), ".\n..\na.md\ne\n");
    assert_eq!(ok(&r, "find d | sort"), "d\nd/a.md\nd/e\nd/e/b.md\n");
    let overview = std::fs::read_to_string(m.backing().join("d/.overview.md")).unwrap();
    assert!(overview.contains("a.md"), "{overview}");
    assert_eq!(ok(&r, "cat d/.overview.md"), overview);
    assert_eq!(
        ok(&r, "stat -c '%n %A' d/e/.abstract.md"),
        "d/e/.abstract.md -r--r--r--\n"
    );
    assert!(fails(&r, "echo x > d/.overview.md").contains("denied"));
    assert_eq!(
        std::fs::read_to_string(m.backing().join("d/.overview.md")).unwrap(),
        overview
    );
}

/// `-o show_summaries` lists them as files of the directory (after the user's entries in
/// readdir order); they stay read-only.
#[test]
fn show_summaries_lists_them() {
    let m = Mount::with_options(&["show_summaries"]);
    let r = m.res();
    ok(&r, "mkdir d && echo alpha > d/a.md");
    drain(&m);
    assert!(summarised(&m.backing().join("d")));
    assert_eq!(
        ok(&r, "LC_ALL=C ls -a d"),
        ".\n..\n.abstract.md\n.overview.md\na.md\n"
    );
    assert_eq!(
        ok(&r, "find d -name '.*.md' | sort"),
        "d/.abstract.md\nd/.overview.md\n"
    );
    assert!(fails(&r, "echo x > d/.overview.md").contains("denied"));
}

/// `mount -t fuse.vikingfs -o show_summaries` and an fstab line run the mount helper
/// `mount.fuse.vikingfs SOURCE MOUNTPOINT -o OPTIONS` (a link to the binary): the option
/// goes through it to the core.
#[test]
fn show_summaries_comes_through_the_mount_helper() {
    let dir = tempfile::tempdir().unwrap();
    let (ws, mp) = (dir.path().join("ws"), dir.path().join("mnt"));
    std::fs::create_dir(&mp).unwrap();
    let helper = dir.path().join("mount.fuse.vikingfs");
    std::os::unix::fs::symlink(support::BIN, &helper).unwrap();
    let out = std::process::Command::new(&helper)
        .env("HOME", dir.path())
        .env_remove("VIKINGFS_CONFIG")
        .arg(&ws)
        .arg(&mp)
        .args(["-o", "rw,nosuid,nodev,_netdev,show_summaries"])
        .output()
        .unwrap();
    // Unmounted on drop from here on.
    let m = Mount {
        dir,
        ws,
        mp,
        options: Vec::new(),
    };
    assert!(
        out.status.success(),
        "mount helper: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let b = m.backing().join("d");
    std::fs::create_dir(&b).unwrap();
    std::fs::write(b.join(".overview.md"), "overview").unwrap();
    assert_eq!(ok(&m.res(), "ls -a d"), ".\n..\n.overview.md\n");
}

/// A git repository on the mount: the summaries the workers write into its directories are
/// neither added nor reported as untracked.
#[test]
fn git_status_is_clean_after_the_workers_summarised() {
    let m = Mount::new();
    let repo = m.res().join("repo");
    ok(
        &m.res(),
        "mkdir -p repo/src/lib && echo 'fn main() {}' > repo/src/main.rs \
         && echo 'pub fn x() {}' > repo/src/lib/x.rs && echo '# r' > repo/README.md",
    );
    // Summaries first, so that `git add .` would find them if they were listed.
    drain(&m);
    for d in ["repo", "repo/src", "repo/src/lib"] {
        assert!(summarised(&m.backing().join(d)), "no summaries in {d}");
    }
    ok(
        &repo,
        "git init -q && git add . \
         && git -c user.name=t -c user.email=t@example.com commit -qm init",
    );
    assert_eq!(
        ok(&repo, "git ls-files"),
        "README.md\nsrc/lib/x.rs\nsrc/main.rs\n"
    );
    // The commit changed the directories: let the workers summarise them again.
    drain(&m);
    assert!(summarised(&m.backing().join("repo/src")));
    assert_eq!(
        ok(&repo, "git status --porcelain --untracked-files=all"),
        ""
    );
}

/// rmdir and `rm -rf` remove directories that hold summaries, listed or not: a full tree, a
/// directory whose only entries left are its summaries, and with rmdir such a directory.
#[test]
fn rm_rf_of_a_summarised_tree_leaves_nothing() {
    for show in [false, true] {
        let m = Mount::with_options(if show { &["show_summaries"] } else { &[] });
        let r = m.res();
        ok(
            &r,
            "mkdir -p t/a/b t/only e && echo 1 > t/f && echo 2 > t/a/g && echo 3 > t/a/b/h \
             && echo 4 > t/only/x && echo 5 > e/y",
        );
        drain(&m);
        // t/only and e now hold nothing but the summaries written before.
        ok(&r, "rm t/only/x e/y");
        drain(&m);
        for d in ["t", "t/a", "t/a/b", "t/only", "e"] {
            assert!(summarised(&m.backing().join(d)), "no summaries in {d}");
        }
        let listed = if show {
            ".abstract.md\n.overview.md\n"
        } else {
            ""
        };
        assert_eq!(ok(&r, "LC_ALL=C ls -A e"), listed, "show_summaries={show}");
        ok(&r, "rmdir e");
        assert!(!m.backing().join("e").exists(), "show_summaries={show}");
        ok(&r, "rm -rf t/only");
        assert!(
            !m.backing().join("t/only").exists(),
            "show_summaries={show}"
        );
        ok(&r, "rm -rf t");
        assert!(!m.backing().join("t").exists(), "show_summaries={show}");
        // What the removals queued ran: nothing came back, the index agrees.
        m.check_index_agrees();
        assert!(!m.backing().join("t").exists(), "show_summaries={show}");
        assert_eq!(ls_user(&r), "");
        assert_eq!(ls_user(&m.backing()), "");
    }
}

/// `cp -r` out of the mount copies what users made, no summaries; `mv` of a directory that
/// holds only its summaries (within the mount, onto it, and out to another filesystem, which
/// is a copy and `rm -rf`) moves it like an empty directory.
#[test]
fn cp_r_and_mv_of_summarised_directories() {
    let m = Mount::new();
    let r = m.res();
    let out = m.dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    ok(
        &r,
        "mkdir -p t/sub only1 only2 && echo 1 > t/f && echo 2 > t/sub/g \
         && echo 3 > only1/x && echo 4 > only2/x",
    );
    drain(&m);
    ok(&r, "rm only1/x only2/x");
    drain(&m);
    for d in ["t", "t/sub", "only1", "only2"] {
        assert!(summarised(&m.backing().join(d)), "no summaries in {d}");
    }
    let want = vec![
        ("f".to_string(), "file 1\n".to_string()),
        ("sub".to_string(), "dir".to_string()),
        ("sub/g".to_string(), "file 2\n".to_string()),
    ];
    ok(&r, &format!("cp -r t {}", out.join("t").display()));
    assert_eq!(tree(&out.join("t")), want);
    // Within the mount.
    ok(&r, "mv only1 moved");
    assert!(!m.backing().join("only1").exists());
    assert_eq!(ok(&r, "ls -A moved"), "");
    // Onto it: rename(2) replaces a directory that looks empty.
    ok(&r, "mkdir new && echo 5 > new/k && mv -T new moved");
    assert_eq!(ok(&r, "ls -A moved && cat moved/k"), "k\n5\n");
    // Out of the mount.
    ok(&r, &format!("mv only2 {}", out.display()));
    assert!(!m.backing().join("only2").exists());
    assert_eq!(tree(&out.join("only2")), vec![]);
    ok(&r, &format!("mv t {}", out.join("t2").display()));
    assert!(!m.backing().join("t").exists());
    assert_eq!(tree(&out.join("t2")), want);
    m.check_index_agrees();
}

/// POSIX: a directory stream that is rewound sees names created after it was opened
/// (xfstests generic/471).
#[test]
fn names_created_after_opendir_appear_after_rewinddir() {
    let m = Mount::new();
    let r = m.res();
    ok(&r, "mkdir d && touch d/a");
    let script = r#"perl -e 'opendir(my $d, ".") or die; my @a = readdir($d); open(my $f, ">", "b") or die; close $f; rewinddir($d); print join(",", sort grep { !/^\./ } readdir($d)), "\n"'"#;
    assert_eq!(ok(&r.join("d"), script), "a,b\n");
}

/// `mount -o remount,ro` and `remount,rw` (mount(8) runs the helper with those options): the
/// live mount turns read-only (writes answer EROFS, reads work) and back, with the same
/// daemon serving throughout.
#[test]
fn remount_ro_and_rw_through_the_mount_helper() {
    let m = Mount::new();
    let pid = m.pid();
    let r = m.res();
    ok(&r, "echo before > f");
    let helper = m.dir.path().join("mount.fuse.vikingfs");
    std::os::unix::fs::symlink(support::BIN, &helper).unwrap();
    let remount = |how: &str| {
        let out = std::process::Command::new(&helper)
            .env("HOME", m.dir.path())
            .arg(&m.ws)
            .arg(&m.mp)
            .args(["-o", &format!("remount,{how}")])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "remount,{how}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    remount("ro");
    let out = sh(&r, "echo more >> f");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Read-only file system"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ok(&r, "cat f"), "before\n");
    remount("rw");
    ok(&r, "echo after >> f");
    assert_eq!(ok(&r, "cat f"), "before\nafter\n");
    assert_eq!(m.pid(), pid);
    assert!(support::alive(pid));
}

/// `vikingfs umount` returns once the daemon has exited (its databases closed), not when
/// the kernel let the mount go.
#[test]
fn umount_returns_after_the_daemon_exited() {
    let m = Mount::new();
    let pid = m.pid();
    ok(
        &m.res(),
        "mkdir d && i=0; while [ $i -lt 300 ]; do echo $i > d/f$i; i=$((i+1)); done",
    );
    let out = support::vikingfs(m.dir.path())
        .arg("umount")
        .arg(&m.mp)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !support::alive(pid),
        "umount returned while the daemon still ran"
    );
}

/// A directory opened before names were made in it, then read (after a rewind), lists them
/// (POSIX; xfstests generic/471): the listing is taken at the read, not at the open. A rewind
/// after a removal drops the name.
#[test]
fn a_read_after_rewind_lists_the_directory_as_it_is() {
    let m = Mount::new();
    ok(&m.res(), "mkdir d");
    let script = format!(
        "import os\n\
         d = '{}'\n\
         fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)\n\
         for n in ('a', 'b', 'c'): open(os.path.join(d, n), 'w').close()\n\
         print(' '.join(sorted(os.listdir(fd))))\n\
         os.unlink(os.path.join(d, 'b'))\n\
         print(' '.join(sorted(os.listdir(fd))))\n",
        m.res().join("d").display()
    );
    let out = Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "a b c\na c\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Device nodes: a mount is `nodev` by default (a node made on it cannot be opened), and
/// `-o dev` lets them be opened, also across a remount.
#[test]
fn dev_is_honoured_and_nodev_is_the_default() {
    let open_null = |m: &Mount| {
        ok(&m.res(), "rm -f null && mknod null c 1 3");
        sh(&m.res(), "echo x > null && cat null")
    };
    let m = Mount::new();
    let out = open_null(&m);
    assert!(
        !out.status.success(),
        "a device node opened on a nodev mount"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"));
    drop(m);
    let m = Mount::with_options(&["dev"]);
    let out = open_null(&m);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let helper = Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(&m.mp)
        .status();
    if helper.is_ok_and(|s| s.success()) {
        let out = sh(&m.res(), "cat null");
        assert!(
            out.status.success(),
            "remount dropped dev: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(Command::new("mount")
            .args(["-o", "remount,rw"])
            .arg(&m.mp)
            .status()
            .unwrap()
            .success());
    }
}

/// `mount` right after an umount whose daemon is still stopping waits for it (a bounded
/// time), then mounts: the previous daemon here is a stand-in process under its record, which
/// exits a moment later; the new daemon serves the workspace's socket, and the CLI reaches it.
#[test]
fn a_mount_waits_for_the_previous_daemon_of_its_mount_point() {
    let m = Mount::new();
    let reg = m.ws.join(".vikingfs/daemons");
    let record = std::fs::read_dir(&reg)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .unwrap();
    let mut rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    m.unmount();
    // A process still "stopping": its record names the mount point.
    let mut stopping = Command::new("sleep").arg("1.5").spawn().unwrap();
    let pid = stopping.id();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let start: u64 = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    rec["pid"] = pid.into();
    rec["start"] = start.into();
    let host = rec["host"].as_str().unwrap().to_string();
    std::fs::write(reg.join(format!("{host}-{pid}.json")), rec.to_string()).unwrap();
    let waiter = std::thread::spawn(move || {
        stopping.wait().unwrap();
        std::time::Instant::now()
    });
    m.mount();
    let mounted = std::time::Instant::now();
    let exited = waiter.join().unwrap();
    assert!(exited <= mounted, "mounted beside the previous daemon");
    ok(&m.res(), "echo after > a.md");
    let out = m.cli(&["status", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["daemons"].as_array().unwrap().len(), 1, "{v}");
    assert!(
        m.ws.join(".vikingfs/daemon.sock").exists(),
        "the new daemon serves the socket"
    );
}

/// Names up to the kernel's limits relative to the mount (the C pjdfstest's `*/03.t`): a
/// 4,095-byte path below a directory of the mount (longer than PATH_MAX from the data root)
/// can be created, written, read, chmod-ed, chown-ed, its times set, truncated, renamed,
/// linked and removed; so can a directory, a symlink, a FIFO and a mknod-made file there.
#[test]
fn paths_at_the_kernels_limit_below_the_mount_work() {
    let m = Mount::new();
    let script = r#"python3 -c "
import os
os.mkdir('t'); os.chdir('t')
d = '/'.join(['x' * 255] * 15)
os.makedirs(d)
f, w = d + '/' + 'y' * 255, d + '/' + 'w' * 255
assert len(f) == 4095
fd = os.open(f, os.O_CREAT | os.O_WRONLY, 0o644); os.write(fd, b'deep'); os.close(fd)
assert open(f).read() == 'deep'
os.chmod(f, 0o600); assert os.stat(f).st_mode & 0o777 == 0o600
os.truncate(f, 2); assert open(f).read() == 'de'
g = d + '/' + 'z' * 255
os.rename(f, g); os.link(g, f); assert os.stat(f).st_nlink == 2
os.unlink(f); os.unlink(g); assert not os.path.exists(g)
os.mkdir(w); os.rmdir(w)
os.symlink('target', f); assert os.readlink(f) == 'target'; os.unlink(f)
os.mkfifo(f, 0o600); import stat; assert stat.S_ISFIFO(os.lstat(f).st_mode); os.unlink(f)
os.mknod(f, 0o600 | stat.S_IFREG); assert os.stat(f).st_size == 0
os.chown(f, 1234, 5678); st = os.stat(f); assert (st.st_uid, st.st_gid) == (1234, 5678)
os.lchown(f, 4321, 8765); assert os.lstat(f).st_uid == 4321
os.utime(f, (1000000000, 1000000000)); assert os.stat(f).st_mtime == 1000000000
os.unlink(f)
print('ok')
""#;
    assert_eq!(ok(&m.res(), script), "ok\n");
}

/// chmod, chown and utimens of what has no name in the namespace take effect: the mount
/// root, and a file unlinked while open (both changed through the inode's own descriptor).
#[test]
fn setattr_of_the_root_and_of_an_unlinked_open_file_takes_effect() {
    let m = Mount::new();
    let script = r#"python3 -c "
import os, sys
root = sys.argv[1]
os.chmod(root, 0o751); assert os.stat(root).st_mode & 0o7777 == 0o751, oct(os.stat(root).st_mode)
os.chown(root, 1234, 5678); st = os.stat(root); assert (st.st_uid, st.st_gid) == (1234, 5678), st
os.utime(root, (1000000000, 1000000001)); st = os.stat(root)
assert (st.st_atime, st.st_mtime) == (1000000000, 1000000001), st
fd = os.open('u.md', os.O_CREAT | os.O_RDWR, 0o644); os.write(fd, b'open'); os.unlink('u.md')
os.fchmod(fd, 0o600); assert os.fstat(fd).st_mode & 0o7777 == 0o600, oct(os.fstat(fd).st_mode)
os.fchown(fd, 4321, 8765); st = os.fstat(fd); assert (st.st_uid, st.st_gid) == (4321, 8765), st
os.utime(fd, (1000000002, 1000000003)); st = os.fstat(fd)
assert (st.st_atime, st.st_mtime) == (1000000002, 1000000003), st
os.close(fd)
print('ok')
""#;
    let out = sh(&m.res(), &format!("{script} {}", m.mp.display()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
    // The backing root changed too, not just what the kernel cached.
    let st = std::fs::metadata(m.ws.join("viking/default")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (st.mode() & 0o7777, st.uid(), st.gid(), st.mtime()),
        (0o751, 1234, 5678, 1000000001)
    );
}

/// A directory's times as `stat` through the mount shows them (cached for 0 s).
fn dir_times(p: &Path) -> ((i64, i64), (i64, i64)) {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::symlink_metadata(p).unwrap();
    ((md.mtime(), md.mtime_nsec()), (md.ctime(), md.ctime_nsec()))
}

/// The lock protocol leaves no trace in a directory's times (pjdfstest link/00, xfstests
/// generic/003): changing a file — mode, owner, times, size, content, and the summaries the
/// workers then write beside it — leaves its directory's mtime and ctime as they were, while a
/// change of the directory's entries moves both, and a chmod of the directory its ctime alone.
#[test]
fn directory_times_move_only_with_its_entries() {
    let m = Mount::with_options(&["cache_timeout=0"]);
    let d = m.res().join("d");
    ok(&m.res(), "mkdir d && echo one > d/f");
    drain(&m);
    let tick = || std::thread::sleep(std::time::Duration::from_millis(30));
    let file_changes = [
        ("chmod", "chmod 600 f"),
        ("chown", "chown 1234:1234 f"),
        ("touch", "touch -d @1000000000 f"),
        ("truncate", "truncate -s 2 f"),
        ("write", "echo two words of new content >> f"),
        ("read", "cat f > /dev/null && ls -la > /dev/null"),
    ];
    for (what, script) in file_changes {
        let before = dir_times(&d);
        tick();
        ok(&d, script);
        drain(&m);
        tick();
        assert_eq!(
            dir_times(&d),
            before,
            "{what} (`{script}`) moved the directory's times"
        );
    }
    assert!(
        summarised(&m.backing().join("d")),
        "the workers wrote d's summaries meanwhile"
    );
    let entry_changes = [
        ("create", "touch g"),
        ("link", "ln g h"),
        ("rename", "mv h i"),
        ("unlink", "rm i"),
        ("mkdir", "mkdir s"),
        ("rmdir", "rmdir s"),
        ("symlink", "ln -s f l"),
    ];
    for (what, script) in entry_changes {
        let (m0, c0) = dir_times(&d);
        tick();
        ok(&d, script);
        let (m1, c1) = dir_times(&d);
        assert!(
            m1 > m0 && c1 > c0,
            "{what}: mtime {m0:?} -> {m1:?}, ctime {c0:?} -> {c1:?}"
        );
        drain(&m);
    }
    let (m0, c0) = dir_times(&d);
    tick();
    ok(&m.res(), "chmod 700 d");
    let (m1, c1) = dir_times(&d);
    assert_eq!(m1, m0, "chmod of the directory moved its mtime");
    assert!(c1 > c0, "chmod of the directory left its ctime");
}

/// POSIX: a store through a shared writable mapping marks the file changed — its mtime and
/// ctime move by the time the next `stat` looks, without an msync (xfstests generic/080,
/// generic/215). Holds with passthrough (the default): the kernel writes the backing file's
/// pages itself. With `-o nopassthrough` the times move only once the pages are written back.
#[test]
fn mmap_writes_move_mtime_and_ctime() {
    use std::os::fd::AsRawFd;
    let m = Mount::with_options(&["cache_timeout=0"]);
    let p = m.res().join("mapped");
    std::fs::write(&p, vec![b'a'; 8192]).unwrap();
    drain(&m);
    let (m0, c0) = dir_times(&p);
    std::thread::sleep(std::time::Duration::from_millis(30));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&p)
        .unwrap();
    // SAFETY: a fresh shared mapping of 8 KiB of an open file, unmapped below, touched only here.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
    // SAFETY: within the 8 KiB mapped above.
    unsafe { std::ptr::copy_nonoverlapping(b"hello".as_ptr(), map.cast::<u8>(), 5) };
    let (m1, c1) = dir_times(&p);
    // SAFETY: the mapping made above, not used after (unmapped before asserting, so that a
    // failure does not leave the mount busy).
    assert_eq!(unsafe { libc::munmap(map, 8192) }, 0);
    drop(f);
    assert!(
        m1 > m0 && c1 > c0,
        "mtime {m0:?} -> {m1:?}, ctime {c0:?} -> {c1:?}"
    );
    drain(&m);
    assert_eq!(&std::fs::read(&p).unwrap()[..6], b"helloa");
}

/// `-o metrics=ADDR` on an address someone else listens on: the mount fails with one line
/// naming the endpoint and the address, and nothing is left mounted.
#[test]
fn a_metrics_address_in_use_fails_the_mount_in_one_line() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let (ws, mp) = (dir.path().join("ws"), dir.path().join("mnt"));
    std::fs::create_dir_all(&mp).unwrap();
    let out = support::vikingfs(dir.path())
        .arg("mount")
        .arg("-o")
        .arg(format!("metrics={addr}"))
        .arg(&ws)
        .arg(&mp)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "mounted with its metrics address taken"
    );
    assert!(
        err.contains("metrics endpoint") && err.contains(&addr),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(!mounts.contains(mp.to_str().unwrap()), "left mounted");
}

/// A write through a shared mapping moves mtime and ctime for a stat right after the writer
/// exits, whether it kept its descriptor or closed it before writing (xfstests generic/080
/// and 215). Under passthrough the kernel writes the backing file without asking us, so what
/// it cached must not outlive the writer.
#[test]
fn mapped_writes_move_mtime_and_ctime_at_once() {
    let m = Mount::new();
    let r = m.res();
    let writer = r#"import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 4096)
if sys.argv[2] == "close-first":
    os.close(fd)
m[0:6] = b"mapped"
m.close()
"#;
    for how in ["keep-fd", "close-first"] {
        let f = r.join(format!("{how}.txt"));
        let mut file = std::fs::File::create(&f).unwrap();
        std::io::Write::write_all(&mut file, &[b'x'; 4096]).unwrap();
        file.sync_all().unwrap();
        drop(file);
        // stat(1), as generic/080 asks: std's metadata asks statx for the birth time too,
        // which the kernel never takes from its cache.
        let stamp = |f: &Path| {
            let out = Command::new("stat")
                .args(["-c", "%.9Y %.9Z"])
                .arg(f)
                .output()
                .unwrap();
            support::assert_ok(&out, &["stat", how]);
            let s = String::from_utf8(out.stdout).unwrap();
            let v: Vec<f64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();
            (v[0], v[1])
        };
        let before = stamp(&f);
        // Past the attribute timeout, as generic/080 sleeps: the writer's own lookup is
        // what the kernel caches.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let out = Command::new("python3")
            .args(["-c", writer])
            .arg(&f)
            .arg(how)
            .output()
            .unwrap();
        support::assert_ok(&out, &["mmap writer", how]);
        let after = stamp(&f);
        assert!(after.0 > before.0, "{how}: mtime {before:?} -> {after:?}");
        assert!(after.1 > before.1, "{how}: ctime {before:?} -> {after:?}");
        assert_eq!(&std::fs::read(&f).unwrap()[..6], b"mapped");
    }
}
