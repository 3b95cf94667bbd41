//! The mount under the locked operations, with plain programs: `vikingfs find` agrees with the
//! files after each tool; a TREE lock held by `vikingfs lock` makes `rm -rf` fail busy and lose
//! nothing while other directories answer, and the directory's summaries answer busy too; two
//! daemons on one workspace respect each other's locks.

use crate::support::{self, daemon};

use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use daemon::{ls_user, ok, sh, user_tree, Mount};
use support::token;

/// Locks wait this long before EBUSY: long enough that "answers at once" is unambiguous on a
/// loaded machine, short enough for the test.
const CONFIG: &str = r#"{"storage": {"agfs": {"pathlock": {"lock_timeout_secs": 8}}}}"#;

fn note(tag: &str) -> String {
    format!("# {tag}\n\nThis note is about {}.\n", token(tag))
}

/// `vikingfs find --json TOKEN`: (uri, level) best first.
fn find(m: &Mount, query: &str) -> Vec<(String, u64)> {
    let out = m
        .cli(&["find", query, "--json", "--limit", "5"])
        .output()
        .unwrap();
    support::hits(&out)
        .into_iter()
        .map(|(uri, level, _)| (uri, level))
        .collect()
}

/// After the queues drained: every `find` result names something the mount shows, and each
/// live file is the best file result for its token.
fn check_find(m: &Mount, live: &[(&str, &str)], gone: &[&str]) {
    m.check_index_agrees();
    let on_mount = |uri: &str| m.mp.join(uri.strip_prefix("viking://").unwrap());
    for (rel, tag) in live {
        let hits = find(m, &token(tag));
        for (u, _) in &hits {
            assert!(on_mount(u).exists(), "find {tag} names missing {u}");
        }
        let best = hits.iter().find(|h| h.1 == 2).map(|h| h.0.as_str());
        assert_eq!(
            best,
            Some(format!("viking://resources/{rel}").as_str()),
            "find {tag}: {hits:?}"
        );
    }
    for tag in gone {
        for (u, _) in find(m, &token(tag)) {
            assert!(on_mount(&u).exists(), "find {tag} names missing {u}");
        }
    }
}

#[test]
fn find_agrees_with_the_files_after_plain_tools() {
    let m = Mount::new();
    let src = m.dir.path().join("src");
    for (rel, tag) in [
        ("a.md", "alpha"),
        ("d/b.md", "bravo"),
        ("d/e/c.md", "charlie"),
    ] {
        let p = src.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, note(tag)).unwrap();
    }
    let r = m.res();
    ok(&r, &format!("cp -r {} tree", src.display()));
    check_find(
        &m,
        &[
            ("tree/a.md", "alpha"),
            ("tree/d/b.md", "bravo"),
            ("tree/d/e/c.md", "charlie"),
        ],
        &[],
    );
    ok(&r, &format!("echo '{}' >> tree/d/b.md", token("delta")));
    ok(&r, &format!("echo '{}' > tree/new.md", token("echo")));
    ok(&r, "mv tree moved && touch moved/empty.md");
    check_find(
        &m,
        &[
            ("moved/a.md", "alpha"),
            ("moved/d/b.md", "delta"),
            ("moved/new.md", "echo"),
            ("moved/d/e/c.md", "charlie"),
        ],
        &[],
    );
    ok(&r, "rm moved/a.md && ln moved/new.md moved/d/e/hard.md");
    assert_eq!(
        ok(&r, "cat moved/d/e/hard.md"),
        format!("{}\n", token("echo"))
    );
    check_find(&m, &[("moved/d/e/c.md", "charlie")], &["alpha", "echo"]);
    ok(&r, "rm -rf moved");
    assert_eq!(ls_user(&r), "");
    check_find(&m, &[], &["alpha", "bravo", "charlie", "delta", "echo"]);
}

/// A `vikingfs lock` holding a lock until its stdin closes; returns once the lock is held.
struct Holder {
    child: Child,
}

impl Holder {
    fn tree(m: &Mount, uri: &str) -> Holder {
        let ready = m.dir.path().join(format!("ready-{}", uri.len()));
        let mut child = m
            .cli(&["lock", "--tree", uri, "--", "sh", "-c"])
            .arg(format!("touch {} && read line", ready.display()))
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ready.exists() {
            assert!(child.try_wait().unwrap().is_none(), "vikingfs lock exited");
            assert!(Instant::now() < deadline, "vikingfs lock never held {uri}");
            std::thread::sleep(Duration::from_millis(10));
        }
        Holder { child }
    }

    fn release(mut self) {
        let _ = self.child.stdin.take().unwrap().write_all(b"go\n");
        assert!(self.child.wait().unwrap().success());
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run `script` in the background in `dir`.
fn spawn_sh(dir: &Path, script: &str) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn tree_lock_makes_rm_rf_busy_loses_nothing_and_other_dirs_answer() {
    let m = Mount::with_config(CONFIG);
    let r = m.res();
    ok(
        &r,
        "mkdir -p locked/sub other && echo 1 > locked/f && echo 2 > locked/sub/g",
    );
    ok(&r, "echo 3 > other/x");
    let before = user_tree(&r.join("locked"));
    let holder = Holder::tree(&m, "viking://resources/locked");
    let mut rm = spawn_sh(&r, "rm -rf locked");
    // While rm waits for the lock, another directory answers at once.
    assert_eq!(ok(&r, "ls other && cat other/x"), "x\n3\n");
    ok(&r, "echo 4 > other/y && mv other/y other/z");
    assert!(
        rm.try_wait().unwrap().is_none(),
        "rm -rf finished before the other directory answered"
    );
    let out = rm.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Device or resource busy"), "{err}");
    assert_eq!(
        user_tree(&r.join("locked")),
        before,
        "rm -rf lost something"
    );
    assert_eq!(user_tree(&m.backing().join("locked")), before);
    holder.release();
    ok(&r, "rm -rf locked");
    assert_eq!(ls_user(&r), "other\n");
    m.check_index_agrees();
}

/// With the default `lock_timeout` (0), a user's lock refuses at once: `rm -rf` of a locked
/// tree does not wait a second per entry (15 files once took 15 s), and loses nothing.
#[test]
fn a_users_lock_refuses_at_once_by_default() {
    let m = Mount::new();
    let r = m.res();
    ok(
        &r,
        "mkdir -p locked && for i in $(seq 1 15); do echo $i > locked/f$i.md; done",
    );
    let before = user_tree(&r.join("locked"));
    let holder = Holder::tree(&m, "viking://resources/locked");
    let t = Instant::now();
    let out = sh(&r, "rm -rf locked");
    let took = t.elapsed();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Device or resource busy"), "{err}");
    assert_eq!(
        user_tree(&r.join("locked")),
        before,
        "rm -rf lost something"
    );
    // 15 refusals at once, far below one second each (a bound no loaded machine reaches).
    assert!(took < Duration::from_secs(5), "rm -rf took {took:?}");
    let out = sh(&r, "rm locked/f1.md");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Device or resource busy"));
    holder.release();
    ok(&r, "rm -rf locked");
    m.check_index_agrees();
}

/// The errno of unlink(2) of `p`, or 0.
fn unlink_errno(p: &Path) -> i32 {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated CString alive for the call; unlink only reads it.
    if unsafe { libc::unlink(c.as_ptr()) } == 0 {
        return 0;
    }
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

/// A summary is read-only while its directory holds user entries (EACCES), but under someone
/// else's TREE lock on the directory its unlink answers EBUSY, as the user entries' do: the
/// lock, not the summary, is what stops it. So `rm -rf` of a locked directory whose summaries
/// it lists (`-o show_summaries`) reports only busy entries, and succeeds once the lock goes.
#[test]
fn a_summary_under_a_foreign_lock_is_busy_not_read_only() {
    for show in [false, true] {
        let m = Mount::with_options(if show { &["show_summaries"] } else { &[] });
        let r = m.res();
        ok(&r, "mkdir d && echo 1 > d/f");
        let out = m.cli(&["wait", "--timeout", "300"]).output().unwrap();
        assert!(out.status.success());
        let b = m.backing().join("d");
        assert!(b.join(".overview.md").exists() && b.join(".abstract.md").exists());
        let holder = Holder::tree(&m, "viking://resources/d");
        assert_eq!(unlink_errno(&r.join("d/.overview.md")), libc::EBUSY);
        assert_eq!(unlink_errno(&r.join("d/f")), libc::EBUSY);
        let out = sh(&r, "rm -rf d");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("'d/f': Device or resource busy"), "{err}");
        assert!(!err.contains("Permission denied"), "{err}");
        if show {
            assert!(
                err.contains("'d/.overview.md': Device or resource busy"),
                "{err}"
            );
        }
        assert!(b.join("f").exists() && b.join(".overview.md").exists());
        holder.release();
        // Free, with a user entry left: read-only.
        assert_eq!(unlink_errno(&r.join("d/.overview.md")), libc::EACCES);
        ok(&r, "rm -rf d");
        assert!(!b.exists(), "show_summaries={show}");
    }
}

/// A second daemon serving the same workspace at another mount point; unmounted on drop.
struct SecondMount {
    mp: PathBuf,
    pid_file: PathBuf,
    home: PathBuf,
}

impl SecondMount {
    fn new(m: &Mount) -> SecondMount {
        let mp = m.dir.path().join("mnt2");
        std::fs::create_dir_all(&mp).unwrap();
        let pid_file = m.dir.path().join("daemon2.pid");
        // One daemon serves a workspace on a host unless this says otherwise: here the two
        // stand for two hosts' daemons meeting over the same lock files.
        let out = support::vikingfs(m.dir.path())
            .env("VIKINGFS_ALLOW_SECOND_DAEMON", "1")
            .arg("mount")
            .arg("--pid-file")
            .arg(&pid_file)
            .arg(&m.ws)
            .arg(&mp)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "second mount: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SecondMount {
            mp,
            pid_file,
            home: m.dir.path().to_path_buf(),
        }
    }

    fn res(&self) -> PathBuf {
        self.mp.join("resources")
    }
}

impl Drop for SecondMount {
    fn drop(&mut self) {
        daemon::unmount(&self.home, &self.mp, &self.pid_file);
    }
}

/// Daemon A blocks while holding a file's EXACT lock: its open for writing of the file waits
/// for a read lease this test holds on the backing file to be given up (the kernel makes the
/// opener wait up to lease-break-time, 45 s). Meanwhile daemon B must see the lock: its `rm`
/// of the file fails busy and removes nothing; both mounts keep answering elsewhere. Once the
/// lease goes, A's write completes and B's `rm` succeeds.
#[test]
fn two_daemons_on_one_workspace_respect_each_others_locks() {
    let a = Mount::with_config(CONFIG);
    let b = SecondMount::new(&a);
    let (ra, rb) = (a.res(), b.res());
    ok(&ra, "mkdir d other && echo old > d/f && echo x > other/x");
    assert_eq!(ok(&rb, "cat d/f"), "old\n");

    let backing = a.backing().join("d/f");
    let lease_fd = std::fs::File::open(&backing).unwrap();
    // SAFETY: F_SETLEASE on `lease_fd`, a file we hold open, takes an int, not a pointer.
    let rc = unsafe { libc::fcntl(lease_fd.as_raw_fd(), libc::F_SETLEASE, libc::F_RDLCK) };
    assert_eq!(rc, 0, "F_SETLEASE: {}", std::io::Error::last_os_error());
    // SIGIO tells a lease holder of a break; this test gives the lease up itself.
    // SAFETY: SIG_IGN installs no handler, so no code of ours runs in signal context.
    unsafe { libc::signal(libc::SIGIO, libc::SIG_IGN) };
    let writer = spawn_sh(&ra, "echo new >> d/f");
    // Daemon A now holds d/f's EXACT lock while its open waits for the lease.
    let lock_dir = a.backing().join("d");
    let deadline = Instant::now() + Duration::from_secs(40);
    while !std::fs::read_dir(&lock_dir).unwrap().any(|e| {
        e.unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with(".exact.ovlock.f.")
    }) {
        assert!(Instant::now() < deadline, "daemon A never locked d/f");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Both mounts answer elsewhere at once.
    assert_eq!(ok(&rb, "cat other/x"), "x\n");
    assert_eq!(ok(&ra, "ls other"), "x\n");
    // B respects A's lock.
    let out = sh(&rb, "rm d/f");
    assert!(!out.status.success(), "rm through B ignored A's lock");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Device or resource busy"), "{err}");
    assert!(backing.exists());
    let out = sh(&rb, "mv d/f d/g");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Device or resource busy"));
    // Give the lease up: A's write goes through, then B may remove the file.
    // SAFETY: F_SETLEASE on `lease_fd`, still open, takes an int, not a pointer.
    let rc = unsafe { libc::fcntl(lease_fd.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) };
    assert_eq!(rc, 0);
    drop(lease_fd);
    let out = writer.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ok(&rb, "cat d/f"), "old\nnew\n");
    ok(&rb, "rm d/f");
    assert_eq!(ls_user(&ra.join("d")), "");
    a.check_index_agrees();
}

/// Foreground first: right after `cp -r` of 2,000 files the daemon's workers are writing
/// records back under EXACT locks (each held 20 ms here, at a pause point, so that they
/// always are). A user's `vikingfs lock --tree` (lock_timeout 0) and an `rm -rf` through the
/// mount wait for those short locks, and the workers give way, instead of failing busy.
#[cfg(feature = "failpoints")]
#[test]
fn background_work_never_fails_the_users_lock_or_rm() {
    let m = Mount::new();
    m.unmount();
    m.mount_with_env(&[("VIKINGFS_PAUSE_AT", "job.embed.indexed:20")]);
    let src = m.dir.path().join("many");
    for d in 0..20 {
        let dir = src.join(format!("d{d:02}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            std::fs::write(dir.join(format!("f{f:03}.md")), note(&format!("{d}-{f}"))).unwrap();
        }
    }
    let r = m.res();
    ok(&r, &format!("cp -r {} tree", src.display()));
    for i in 0..20 {
        let out = m
            .cli(&["lock", "--tree", "viking://resources/tree", "--", "true"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "lock --tree #{i} while the workers index: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for i in 0..20 {
        let dir = format!("d{i:02}");
        let out = sh(&r.join("tree"), &format!("rm -rf {dir}"));
        assert!(
            out.status.success(),
            "rm -rf {dir}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // And a fresh copy to remove while its own jobs run.
        ok(&r, &format!("cp -r {}/d00 again{i}", src.display()));
        let out = sh(&r, &format!("rm -rf again{i}"));
        assert!(
            out.status.success(),
            "rm -rf again{i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(ls_user(&r.join("tree")), "");
    m.check_index_agrees();
}

/// A lock file that holds no token (garbage) is never taken as free: what it covers answers
/// EBUSY (not EIO) through the mount, plain `fsck --repair` keeps it, and
/// `fsck --repair --break-corrupt-locks` removes it, after which the path works again.
#[test]
fn a_garbage_lock_token_answers_busy_until_fsck_breaks_it() {
    let m = Mount::new();
    let r = m.res();
    ok(&r, "mkdir x && echo keep > x/a.md");
    let lock = m.backing().join("x/.path.ovlock");
    std::fs::write(&lock, "garbage").unwrap();
    for script in [
        "touch x/new",
        "mkdir x/sub",
        "rm x/a.md",
        "mv x/a.md x/b.md",
    ] {
        let out = sh(&r, script);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{script} under a garbage lock succeeded"
        );
        assert!(err.contains("Device or resource busy"), "{script}: {err}");
    }
    assert_eq!(ok(&r, "cat x/a.md"), "keep\n");
    let out = m.cli(&["fsck", "--repair"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("corrupt lock"), "{text}");
    assert!(lock.exists(), "plain --repair keeps a lock it cannot read");
    let out = m
        .cli(&["fsck", "--repair", "--break-corrupt-locks"])
        .output()
        .unwrap();
    assert!(!lock.exists(), "{}", String::from_utf8_lossy(&out.stderr));
    ok(&r, "touch x/new && mv x/a.md x/b.md && cat x/b.md");
    m.check_index_agrees();
}

/// The metrics endpoint (`-o metrics=ADDR:PORT`, port 0: the system picks one, which the
/// daemon's record names) answers in the middle of a workload and counts it: requests by
/// operation, an EBUSY, lock batches, jobs; the stores' gauges (queue depth, index size,
/// store state, disk); and `vikingfs status` shows its summary.
#[test]
fn metrics_endpoint_counts_a_workload_while_it_runs() {
    use vikingfs::metrics::scrape;
    let m = Mount::with_options(&["metrics=127.0.0.1:0"]);
    let out = m.cli(&["status", "--json"]).output().unwrap();
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let addr = st["daemons"][0]["metrics"]
        .as_str()
        .unwrap_or_else(|| panic!("no metrics address in {st}"))
        .to_string();
    let creates = |s: &vikingfs::metrics::Samples| {
        s.sum(
            "vikingfs_fuse_request_duration_seconds_count",
            &[("op", "create")],
        )
    };
    let r = m.res();
    let write = |from: usize, to: usize| {
        for i in from..to {
            std::fs::write(r.join(format!("n{i}.md")), note(&format!("n{i}"))).unwrap();
        }
    };
    // A scrape between the two halves of the workload sees the first half and no more.
    write(0, 150);
    // A request is counted just after its reply: the last ones may be a moment late.
    let deadline = Instant::now() + Duration::from_secs(10);
    let midway = loop {
        let n = creates(&scrape(&addr, Duration::from_secs(5)).unwrap());
        if n >= 150.0 || Instant::now() > deadline {
            break n;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(midway, 150.0, "creates counted midway");
    write(150, 300);
    // An EBUSY: a file under someone else's TREE lock.
    let holder = Holder::tree(&m, "viking://resources/n0.md");
    assert_eq!(unlink_errno(&r.join("n0.md")), libc::EBUSY);
    holder.release();
    let out = m.cli(&["wait", "--timeout", "300"]).output().unwrap();
    assert!(out.status.success());

    let s = scrape(&addr, Duration::from_secs(5)).unwrap();
    assert!(creates(&s) >= 300.0, "creates: {}", creates(&s));
    assert!(
        s.sum(
            "vikingfs_fuse_errors_total",
            &[("op", "unlink"), ("errno", "EBUSY")]
        ) >= 1.0
    );
    assert!(s.sum("vikingfs_lock_busy_total", &[("work", "foreground")]) >= 1.0);
    assert!(
        s.sum(
            "vikingfs_lock_wait_seconds_count",
            &[("work", "foreground")]
        ) >= 300.0
    );
    assert!(s.sum("vikingfs_jobs_total", &[("outcome", "done")]) >= 300.0);
    assert_eq!(s.sum("vikingfs_jobs_total", &[("outcome", "failed")]), 0.0);
    assert!(s.sum("vikingfs_index_records", &[]) >= 300.0);
    assert!(s.sum("vikingfs_index_size_bytes", &[]) > 0.0);
    for q in ["embedding", "semantic"] {
        assert!(
            s.label_values("vikingfs_queue_jobs", "queue")
                .contains(&q.to_string()),
            "no {q} queue gauge"
        );
        assert_eq!(
            s.sum("vikingfs_queue_jobs", &[("queue", q), ("state", "dead")]),
            0.0
        );
    }
    for store in ["index", "queue"] {
        assert_eq!(
            s.sum("vikingfs_store_state", &[("store", store), ("state", "ok")]),
            1.0
        );
    }
    assert_eq!(s.sum("vikingfs_disk_full", &[]), 0.0);

    let out = m.cli(&["status"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("metrics http://{addr}/metrics:")) && text.contains("EBUSY"),
        "{text}"
    );
}
