//! Several hosts on a real shared filesystem: the workspace on a GlusterFS volume
//! (`tests/support/gluster.rs`: glusterd in a network namespace of its own, one brick in the
//! test's directory) with the coherence settings of docs/several-hosts.md, mounted by the two
//! hosts of `mount_hosts.rs`'s rig, each with a daemon over one PostgreSQL. Lock files exclude
//! across hosts, concurrent removals, moves and writes of both leave files, index and history
//! in agreement, undo works from either host, and a host killed mid-work is finished by the
//! other. And a daemon over PostgreSQL refuses a GlusterFS mount whose caches would break the
//! lock protocol, naming each setting.
//!
//! GlusterFS must be installed (`.ci/run` installs it): without it these tests fail saying so.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::mount_hosts::{attempt, deadline, exact_token, run, run_ok, token, Cluster, Host};
use crate::support::daemon::*;
use crate::support::gluster::{self, Gluster};
use crate::support::netns::Lab;
use crate::support::pg::PgServer;
use crate::support::BIN;

/// `fsck --json` on `h` finds nothing at all (no stale lock, no leftover either).
fn fsck_clean(h: &Host) {
    let out = run(&mut h.cli(&["fsck", "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("fsck output: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        v["problems"].as_array().unwrap().len(),
        0,
        "host {}: fsck: {v}",
        h.name()
    );
}

/// `vikingfs lock [--tree] URI -- sh -c 'echo > READY; read _'` on `h`: holds the lock until
/// its stdin closes; returns once the command runs.
fn hold(h: &Host, uri: &str, tree: bool) -> std::process::Child {
    let ready = h.root.join("lock.ready");
    let _ = std::fs::remove_file(&ready);
    let mut args = vec!["lock"];
    if tree {
        args.push("--tree");
    }
    let script = format!("echo > {}; read _ || true", ready.display());
    args.extend([uri, "--", "sh", "-c", &script]);
    let child = h
        .cli(&args)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = deadline(60);
    while !ready.exists() {
        assert!(
            Instant::now() < until,
            "vikingfs lock never ran its command"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// `vikingfs lock --timeout 0 URI` on `h` meets the other host's lock: exit 75 (busy).
fn lock_busy(h: &Host, uri: &str) {
    let out = run(&mut h.cli(&["lock", "--timeout", "0", uri, "--", "true"]));
    assert_eq!(
        out.status.code(),
        Some(75),
        "{uri}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn release(mut child: std::process::Child) {
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "vikingfs lock: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn two_hosts_on_glusterfs_keep_locks_files_index_and_history_consistent() {
    let started = Instant::now();
    let mut c = Cluster::on_gluster(serde_json::json!({
        "agfs": { "pathlock": { "lock_timeout_secs": 0.5, "lock_expire_secs": 3 } }
    }));
    let lease = ("VIKINGFS_JOB_LEASE_MS", "2000");
    c.hosts[0].mount(&[lease]);
    c.hosts[1].mount(&[lease]);
    let ids = c.host_ids();
    assert_ne!(ids[0], ids[1]);
    // Both mounts show one volume: B sees at once what A wrote.
    let (ra, rb) = (c.a().res(), c.b().res());
    ok(&ra, "mkdir held && echo 'held x' > held/x.md && mkdir held/sub && echo 'held y' > held/sub/y.md");
    assert_eq!(
        std::fs::read_to_string(rb.join("held/x.md")).unwrap(),
        "held x\n"
    );
    let backing = c.a().ws.join("viking/default/resources");

    // Locks: an EXACT lock of A's holds B off that file (EBUSY through the mount, 75 from
    // the CLI), and A's own lock file is what B's side reads; a TREE lock holds off the
    // whole subtree.
    let busy = |h: &Host, script: &str| {
        let (done, err) = attempt(&h.res(), script);
        assert!(
            !done && err.contains("Device or resource busy"),
            "{script}: {err}"
        );
    };
    let held = hold(c.a(), "viking://resources/held/x.md", false);
    let (owner, _) = exact_token(&backing.join("held"), "x.md").expect("A's lock file");
    assert!(owner.starts_with(&format!("vfs-{}-", ids[0])), "{owner}");
    busy(c.b(), "echo b > held/x.md");
    lock_busy(c.b(), "viking://resources/held/x.md");
    ok(&rb, "echo b > held/sub/y.md");
    release(held);
    ok(&rb, "echo b > held/x.md");
    let held = hold(c.b(), "viking://resources/held", true);
    busy(c.a(), "echo a > held/sub/y.md");
    busy(c.a(), "rm held/x.md");
    lock_busy(c.a(), "viking://resources/held/sub/y.md");
    release(held);
    ok(&ra, "echo a > held/sub/y.md");
    assert_eq!(
        std::fs::read_to_string(rb.join("held/sub/y.md")).unwrap(),
        "a\n"
    );

    // Concurrent work of both hosts on one tree: A removes and rewrites, B moves and writes,
    // on the same directories at once.
    const DIRS: usize = 4;
    const FILES: usize = 10;
    let mut script = String::from("mkdir race");
    for d in 0..DIRS {
        script += &format!(" && mkdir race/d{d}");
        for f in 0..FILES {
            script += &format!(
                " && echo 'race {d}/{f} {}' > race/d{d}/f{f}.md",
                token(d * 100 + f)
            );
        }
    }
    ok(&ra, &script);
    c.b().wait();
    std::thread::scope(|s| {
        // Each loses some races (EBUSY on a path the other holds, ENOENT on one it took): what
        // counts is what is left.
        s.spawn(|| {
            sh(
                &ra,
                "for d in 0 1 2 3; do rm -f race/d$d/f0.md race/d$d/f1.md; \
                            echo 'rewritten by a' > race/d$d/f2.md; done; rm -rf race/d3",
            )
        });
        s.spawn(|| sh(&rb, "mkdir -p race/moved; for d in 0 1 2 3; do mv race/d$d/f1.md race/moved/d$d-f1.md; \
                            mv race/d$d/f3.md race/moved/d$d-f3.md; echo 'written by b' > race/d$d/new.md; done"));
    });
    c.a().wait();
    c.b().wait();
    // What is left, each file's text the same through both mounts, is found at its path and
    // at no other; fsck on both hosts finds nothing wrong, and neither daemon removed content
    // the history did not keep.
    let mut left = Vec::new();
    for e in walk_files(&ra.join("race")) {
        let text = std::fs::read_to_string(&e).unwrap();
        let rel = e.strip_prefix(&ra).unwrap().to_string_lossy().into_owned();
        let seen_by_b = std::fs::read_to_string(rb.join(&rel)).unwrap();
        assert_eq!(seen_by_b, text, "{rel}");
        left.push((rel, text));
    }
    let with_token: Vec<(String, String)> = left
        .iter()
        .filter_map(|(rel, t)| Some((rel.clone(), t.trim().rsplit(' ').next()?.to_string())))
        .filter(|(_, w)| w.starts_with('r') && w.contains('x'))
        .collect();
    assert!(with_token.len() >= 10, "{left:?}");
    let queries: Vec<String> = with_token.iter().map(|(_, w)| w.clone()).collect();
    for h in &c.hosts {
        let found = h.find_each(&queries);
        for ((rel, w), uris) in with_token.iter().zip(&found) {
            // The file where it is, and no other file (directories' summaries may match too).
            let want = format!("viking://resources/{rel}");
            let files: Vec<_> = uris.iter().filter(|u| u.ends_with(".md")).collect();
            assert_eq!(files, vec![&want], "host {}: {w}", h.name());
        }
        fsck_clean(h);
    }
    for log in [
        c.a().ws.join(".vikingfs/mount.log"),
        c.b().root.join("daemon.log"),
    ] {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lost: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("not in the history"))
            .collect();
        assert!(lost.is_empty(), "{}: {lost:?}", log.display());
    }

    // Undo from either host: B brings back a tree A removed, A a file B removed.
    ok(
        &ra,
        "mkdir keep && echo 'keep one' > keep/one.md && echo 'keep two' > keep/two.md",
    );
    c.b().wait();
    std::thread::sleep(Duration::from_millis(1100));
    let since = ok(Path::new("/"), "date -u +%Y-%m-%dT%H:%M:%SZ")
        .trim()
        .to_string();
    std::thread::sleep(Duration::from_millis(1100));
    ok(&ra, "rm -rf keep");
    let until = deadline(30);
    while rb.join("keep").exists() {
        assert!(Instant::now() < until, "B still shows the removed tree");
        std::thread::sleep(Duration::from_millis(50));
    }
    run_ok(
        &mut c
            .b()
            .cli(&["undo", "--since", &since, "viking://resources/keep"]),
    );
    for (f, text) in [("one", "keep one\n"), ("two", "keep two\n")] {
        let p = ra.join(format!("keep/{f}.md"));
        let got = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert_eq!(got, text);
    }
    ok(&rb, "rm keep/two.md");
    // A's mount shows it once its kernel's cached entry expires (cache_timeout, 1 s).
    let until = deadline(30);
    while ra.join("keep/two.md").exists() {
        assert!(Instant::now() < until, "A still shows the removed file");
        std::thread::sleep(Duration::from_millis(50));
    }
    run_ok(
        &mut c
            .a()
            .cli(&["undo", "--since", &since, "viking://resources/keep/two.md"]),
    );
    assert_eq!(
        std::fs::read_to_string(rb.join("keep/two.md")).unwrap(),
        "keep two\n"
    );
    c.a().wait();
    c.b().wait();
    fsck_clean(c.a());
    fsck_clean(c.b());

    // kill -9 of A mid-work: A's daemon again, whose embedding jobs stop at their start
    // (claimed, lease renewed); B finishes them once their lease runs out, and every file is
    // found once.
    c.hosts[0].unmount();
    c.hosts[0].mount(&[lease, ("VIKINGFS_PAUSE_AT", "job.embed.start:600000")]);
    let mut script = String::from("mkdir bulk");
    for i in 1..=12 {
        script += &format!(" && echo 'bulk {i} {}' > bulk/f{i}.md", token(500 + i));
    }
    ok(&ra, &script);
    let mut db = c.server.client();
    let worker_of_a = format!("{}-pid{}/%", ids[0], c.a().pid.unwrap());
    let until = deadline(60);
    while db
        .query_one(
            "SELECT COUNT(*) FROM vq_jobs WHERE state = 1 AND worker LIKE $1",
            &[&worker_of_a],
        )
        .unwrap()
        .get::<_, i64>(0)
        == 0
    {
        assert!(Instant::now() < until, "host A never claimed a job");
        std::thread::sleep(Duration::from_millis(20));
    }
    c.hosts[0].kill9();
    c.b().wait();
    let left: i64 = db
        .query_one("SELECT COUNT(*) FROM vq_jobs", &[])
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "no job left, none dead");
    let queries: Vec<String> = (1..=12).map(|i| token(500 + i)).collect();
    for (i, uris) in (1..=12).zip(c.b().find_each(&queries)) {
        let files: Vec<_> = uris.iter().filter(|u| u.ends_with(".md")).collect();
        let want = format!("viking://resources/bulk/f{i}.md");
        assert_eq!(files, vec![&want], "{}", token(500 + i));
    }
    c.b().check_index_agrees();
    eprintln!(
        "two hosts on GlusterFS: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Every regular file under `dir`, sorted.
fn walk_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        if e.file_type().unwrap().is_dir() {
            out.extend(walk_files(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out.sort();
    out
}

/// `vikingfs mount` (or `serve`, without `mp`) of the workspace `ws`, with the config in
/// `home`: whether the daemon started (it is stopped then), and its stderr.
fn start_daemon(home: &Path, ws: &Path, mp: Option<&Path>) -> (bool, String) {
    let mut c = Command::new(BIN);
    c.env("HOME", home).env_remove("VIKINGFS_CONFIG");
    let pid_file = home.join("daemon.pid");
    let _ = std::fs::remove_file(&pid_file);
    match mp {
        Some(mp) => {
            c.arg("mount")
                .arg("--pid-file")
                .arg(&pid_file)
                .arg(ws)
                .arg(mp);
            let out = run(&mut c);
            if out.status.success() {
                unmount(home, mp, &pid_file);
            }
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
        None => {
            // serve stays in the foreground: refused, it exits; accepted, it writes its pid
            // file once serving, and is stopped.
            c.arg("--workspace")
                .arg(ws)
                .args(["serve", "--port", "0", "--pid-file"])
                .arg(&pid_file);
            let mut child = c
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let until = deadline(60);
            while child.try_wait().unwrap().is_none() && !pid_file.exists() {
                assert!(Instant::now() < until, "serve neither served nor exited");
                std::thread::sleep(Duration::from_millis(20));
            }
            let served = pid_file.exists();
            if served {
                // SAFETY: kill takes no pointer; the pid is this test's child.
                unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            }
            let out = child.wait_with_output().unwrap();
            (served, String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

#[test]
fn a_daemon_over_postgres_refuses_glusterfs_with_caching_on_and_accepts_the_settings() {
    let lab = Lab::new(2);
    let server = PgServer::start_for(&lab.server_addr(), Some(&lab.subnet()));
    let dir = tempfile::tempdir().unwrap();
    let mut g = Gluster::start(
        &lab.netns(1),
        &lab.host_addr(1),
        &dir.path().join("gluster"),
    );
    g.volume("cached", false);
    g.volume("gv", true);
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".vikingfs")).unwrap();
    let cfg = serde_json::json!({
        "storage": { "backend": "postgres", "postgres": { "dsn": server.dsn() } }
    });
    std::fs::write(home.join(".vikingfs/config.json"), cfg.to_string()).unwrap();
    let mp = dir.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let net = lab.netns(0);
    // GlusterFS's defaults, volume and client: refused, each setting named, on one line.
    let cached = dir.path().join("cached");
    g.mount(&net, "cached", &cached, "");
    let refusal = |(started, err): (bool, String)| -> String {
        assert!(!started, "accepted: {err}");
        let line = err.trim().lines().last().unwrap_or_default().to_string();
        assert!(
            line.contains("GlusterFS") || line.contains("fuse.glusterfs"),
            "{err}"
        );
        line
    };
    for out in [
        start_daemon(&home, &cached.join("ws"), Some(&mp)),
        start_daemon(&home, &cached.join("ws"), None),
    ] {
        let line = refusal(out);
        for want in [
            "gluster volume set cached performance.quick-read off",
            "performance.stat-prefetch",
            "performance.write-behind",
            "performance.open-behind",
            "attribute-timeout=0",
            "entry-timeout=0",
            "fopen-keep-cache=off",
        ] {
            assert!(line.contains(want), "{want}: {line}");
        }
    }
    assert!(
        !std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .contains(&format!(" {} ", mp.display())),
        "nothing mounted"
    );
    // The coherent volume through a client with its default timeouts: the client's settings
    // are named, and only they.
    let late = dir.path().join("late");
    g.mount(&net, "gv", &late, "direct-io-mode=enable");
    let line = refusal(start_daemon(&home, &late.join("ws"), Some(&mp)));
    assert!(
        line.contains("attribute-timeout=0") && line.contains("entry-timeout=0"),
        "{line}"
    );
    assert!(!line.contains("performance."), "{line}");
    // With the settings, both ways of mounting: accepted, by mount and by serve.
    let fstab = dir.path().join("fstab");
    g.mount(&net, "gv", &fstab, gluster::FSTAB_OPTIONS);
    let direct = dir.path().join("direct");
    g.mount_direct(&net, "gv", &direct, gluster::CLIENT_FLAGS);
    for gv in [&fstab, &direct] {
        for mp in [Some(mp.as_path()), None] {
            let (started, err) = start_daemon(&home, &gv.join("ws"), mp);
            assert!(started, "{} ({mp:?}): {err}", gv.display());
        }
    }
}
