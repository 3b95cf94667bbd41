//! Several hosts, one workspace: two daemons, each in a network namespace of its own (host B
//! also in a PID namespace of its own, so the two are different hosts to the lock owners'
//! liveness check), mount one workspace directory and share one PostgreSQL server, reached over
//! veths at the bridge's address (`tests/support/netns.rs`). What one host writes, the other
//! finds; a host killed with claims in hand loses nothing; a server restart loses nothing; and
//! a live lock of one host is never taken by the other.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::daemon::*;
use crate::support::gluster::{self, Gluster};
use crate::support::netns::Lab;
use crate::support::pg::PgServer;
use crate::support::{alive, wait_gone, BIN};

/// One host: its own HOME (config), mount point and daemon, in its own network namespace.
pub(crate) struct Host {
    pub(crate) idx: usize,
    pub(crate) netns: String,
    /// `DIR/a` or `DIR/b`: HOME, mount point and daemon log.
    pub(crate) root: PathBuf,
    pub(crate) ws: PathBuf,
    pub(crate) mp: PathBuf,
    /// Host B: `unshare --pid --mount-proc`'s process, whose child is the daemon (PID 1 of its
    /// namespace), and `root` bind-mounted on itself as a shared mount, so the FUSE mount the
    /// daemon makes in its own mount namespace (with its own /proc) shows here too.
    pub(crate) pidns: bool,
    pub(crate) unshare: Option<Child>,
    /// The daemon's pid in this (the test's) PID namespace.
    pub(crate) pid: Option<i32>,
}

/// Run first in a host's new mount namespace (`sh -c SCRIPT PROGRAM ARGS...`, then execs
/// PROGRAM), with `VFS_HOST_ROOT` the host's directory. The namespace starts as a copy of the
/// test's, FUSE mounts of other tests and hosts included: those copies would keep their
/// connections open (their daemons never see an unmount) until this host is gone, so they go.
/// First every shared mount but the host's own directory turns private in this namespace, so
/// that those unmounts do not propagate back (into another host's shared directory); what the
/// host mounts under its own directory still shows in the test's namespace. An unmount
/// propagates along its parent mount's peers, and another test's host directory can turn up
/// here (propagated from the test's namespace) after that pass: its parent is made private
/// just before each unmount, or the unmount would take that host's mount away everywhere.
const OWN_MOUNTS_ONLY: &str = r#"
findmnt -rn -o TARGET,PROPAGATION | while read -r t p; do
  case "$p" in shared*) [ "$t" = "$VFS_HOST_ROOT" ] || mount --make-private "$t" ;; esac
done
findmnt -rn -t fuse,fuse.vikingfs,fuse.glusterfs -o TARGET | while read -r m; do
  case "$m" in "$VFS_HOST_ROOT"/*) continue ;; esac
  p=$(findmnt -rn -o TARGET -T "${m%/*}/") || continue
  [ "$p" = "$VFS_HOST_ROOT" ] || mount --make-private "$p"
  umount -l "$m"
done
exec "$0" "$@"
"#;

pub(crate) fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("run a command")
}

pub(crate) fn run_ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

pub(crate) fn deadline(secs: u64) -> Instant {
    Instant::now() + Duration::from_secs(secs)
}

impl Host {
    pub(crate) fn home(&self) -> PathBuf {
        self.root.join("home")
    }

    pub(crate) fn name(&self) -> char {
        (b'a' + self.idx as u8) as char
    }

    /// `MOUNT/resources`.
    pub(crate) fn res(&self) -> PathBuf {
        self.mp.join("resources")
    }

    /// Start the daemon with extra environment; returns once the mount is live.
    pub(crate) fn mount(&mut self, env: &[(&str, &str)]) {
        let bin = self.bin_in_ns();
        if !self.pidns {
            let mut c = bin;
            c.env("HOME", self.home())
                .env_remove("VIKINGFS_CONFIG")
                .envs(env.iter().copied())
                .arg("mount")
                .arg("--pid-file")
                .arg(self.root.join("daemon.pid"))
                .arg(&self.ws)
                .arg(&self.mp);
            run_ok(&mut c);
            let pid = std::fs::read_to_string(self.root.join("daemon.pid")).unwrap();
            self.pid = Some(pid.trim().parse().unwrap());
            return;
        }
        let log = std::fs::File::create(self.root.join("daemon.log")).unwrap();
        let mut c = bin;
        c.env("HOME", self.home())
            .env_remove("VIKINGFS_CONFIG")
            .envs(env.iter().copied())
            .args(["mount", "--foreground"])
            .arg(&self.ws)
            .arg(&self.mp)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let mut child = c.spawn().expect("start host B's daemon");
        let uid = child.id();
        let until = deadline(60);
        // Live once the mount point is another file system than its parent.
        let dev = |p: &Path| std::os::unix::fs::MetadataExt::dev(&std::fs::metadata(p).unwrap());
        while dev(&self.mp) == dev(&self.root) {
            if let Some(st) = child.try_wait().unwrap() {
                panic!(
                    "host {}'s daemon exited ({st}) before its mount was live: {}",
                    self.name(),
                    std::fs::read_to_string(self.root.join("daemon.log")).unwrap_or_default()
                );
            }
            if Instant::now() >= until {
                let _ = child.kill();
                panic!("host {}'s mount never went live", self.name());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // The daemon records itself just after its mount goes live (the foreground mount's
        // ready point, which this wait does not see): wait for the record too.
        let records = self.ws.join(".vikingfs/daemons");
        let mp = self.mp.to_str().unwrap().to_string();
        let recorded = || {
            std::fs::read_dir(&records)
                .into_iter()
                .flatten()
                .flatten()
                .any(|e| {
                    std::fs::read(e.path())
                        .ok()
                        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                        .is_some_and(|r| r["mountpoint"] == mp.as_str())
                })
        };
        while !recorded() {
            assert!(
                Instant::now() < until,
                "host {}'s daemon never recorded itself",
                self.name()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let children = std::fs::read_to_string(format!("/proc/{uid}/task/{uid}/children")).unwrap();
        self.pid = Some(children.split_whitespace().next().unwrap().parse().unwrap());
        self.unshare = Some(child);
    }

    /// The daemon's command line up to the program's arguments: `vikingfs` run in this host's
    /// network namespace (and, for B, in a PID and mount namespace of its own).
    pub(crate) fn bin_in_ns(&self) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{}", self.netns)).arg("--");
        if self.pidns {
            // --kill-child: the daemon goes with unshare (a test that dies leaves no daemon of
            // a PID namespace nobody can enter).
            c.args([
                "unshare",
                "--pid",
                "--fork",
                "--kill-child",
                "--mount",
                "--propagation",
                "unchanged",
                "--mount-proc",
                "--",
                "sh",
                "-c",
                OWN_MOUNTS_ONLY,
            ]);
            c.env("VFS_HOST_ROOT", &self.root);
        }
        c.arg(BIN);
        c
    }

    /// `vikingfs --workspace WS ARGS` as run on this host: in its network namespace, and on B
    /// in the daemon's PID and mount namespaces (its /proc), with this host's config.
    pub(crate) fn cli(&self, args: &[&str]) -> Command {
        let mut c = Command::new("nsenter");
        match (self.pidns, self.pid) {
            (true, Some(pid)) => {
                c.args(["-t", &pid.to_string(), "--net", "--pid", "--mount", "--"]);
            }
            _ => {
                c.arg(format!("--net=/run/netns/{}", self.netns)).arg("--");
            }
        }
        c.arg(BIN)
            .env("HOME", self.home())
            .env_remove("VIKINGFS_CONFIG")
            .arg("--workspace")
            .arg(&self.ws)
            .args(args);
        c
    }

    /// `vikingfs wait`: this host's daemon drains the queues (no other process works them).
    pub(crate) fn wait(&self) {
        run_ok(&mut self.cli(&["wait", "--watch", "--timeout", "300"]));
    }

    /// `find --queries` with one query a line: the URIs of each query's results.
    pub(crate) fn find_each(&self, queries: &[String]) -> Vec<Vec<String>> {
        let file = self.root.join("queries.txt");
        std::fs::write(&file, queries.join("\n") + "\n").unwrap();
        let out = run(&mut self.cli(&[
            "find",
            "--queries",
            file.to_str().unwrap(),
            "--json",
            "--limit",
            "50",
        ]));
        assert!(
            out.status.success() || out.status.code() == Some(1),
            "find on host {}: {}",
            self.name(),
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), queries.len(), "one answer a query: {text}");
        lines
            .iter()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v.as_array()
                    .unwrap()
                    .iter()
                    .map(|h| h["uri"].as_str().unwrap().to_string())
                    .collect()
            })
            .collect()
    }

    /// `fsck --json` on this host: the index agrees with the files (as
    /// [`Mount::check_index_agrees`]), and no queue holds a dead job.
    pub(crate) fn check_index_agrees(&self) {
        let out = run(&mut self.cli(&["fsck", "--json"]));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("fsck output: {e}: {}", String::from_utf8_lossy(&out.stderr))
        });
        for p in v["problems"].as_array().unwrap() {
            let kind = p["kind"].as_str().unwrap();
            assert!(
                matches!(kind, "leftover" | "stale_lock"),
                "index and files disagree: {p}"
            );
        }
        let out = run_ok(&mut self.cli(&["status", "--json"]));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        for (q, s) in v["queues"].as_object().unwrap() {
            assert_eq!(s["dead"], 0, "dead {q} jobs: {s}");
        }
    }

    /// kill -9 the daemon, wait until it is gone and its mount answers ENOTCONN, then lazily
    /// unmount what it left.
    pub(crate) fn kill9(&mut self) {
        let pid = self.pid.take().expect("a running daemon");
        // SAFETY: kill takes no pointer; `pid` is this host's daemon, not the test process.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        wait_gone(pid);
        let until = deadline(60);
        while std::fs::metadata(&self.mp)
            .err()
            .and_then(|e| e.raw_os_error())
            != Some(libc::ENOTCONN)
        {
            assert!(Instant::now() < until, "mount still answers after kill -9");
            std::thread::sleep(Duration::from_millis(10));
        }
        run_ok(Command::new("umount").arg("-l").arg(&self.mp));
        if let Some(mut c) = self.unshare.take() {
            let _ = c.wait();
        }
    }

    /// Unmount and wait for the daemon to exit (lazily, and killing it, if it must).
    pub(crate) fn unmount(&mut self) {
        let Some(pid) = self.pid.take() else {
            return;
        };
        let clean = run(Command::new(BIN)
            .env("HOME", self.home())
            .arg("umount")
            .arg(&self.mp))
        .status
        .success();
        if !clean {
            let _ = run(Command::new("umount").arg("-l").arg(&self.mp));
        }
        wait_gone(pid);
        if let Some(mut c) = self.unshare.take() {
            if alive(c.id() as i32) {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.unmount();
        if self.pidns {
            let _ = run(Command::new("umount").arg("-l").arg(&self.root));
        }
    }
}

/// Two hosts of one workspace and one PostgreSQL server. Fields drop in order: the daemons
/// first, then the server, the network, the directory.
pub(crate) struct Cluster {
    pub(crate) hosts: Vec<Host>,
    /// The GlusterFS server whose volume holds the workspace ([`Cluster::on_gluster`]); else
    /// the hosts share a directory of this machine.
    pub(crate) _gluster: Option<Gluster>,
    pub(crate) server: PgServer,
    pub(crate) _lab: Lab,
    pub(crate) dir: tempfile::TempDir,
}

impl Cluster {
    /// Hosts A and B (not mounted yet), with `storage` merged into each one's config (beside
    /// the backend and its DSN).
    pub(crate) fn new(storage: serde_json::Value) -> Cluster {
        Cluster::with_pidns(storage, [false, true])
    }

    /// [`Cluster::new`] with each host in a PID namespace of its own or not.
    pub(crate) fn with_pidns(storage: serde_json::Value, pidns: [bool; 2]) -> Cluster {
        Cluster::build(storage, pidns, false)
    }

    /// [`Cluster::new`] with the workspace on a GlusterFS volume with the coherence settings
    /// (`tests/support/gluster.rs`), served from a third network namespace: host A mounts it
    /// as the fstab line of docs/several-hosts.md does (`mount -t glusterfs`, direct I/O), host
    /// B as its systemd unit does (`glusterfs --fopen-keep-cache=off`), each at `ROOT/gv`.
    pub(crate) fn on_gluster(storage: serde_json::Value) -> Cluster {
        Cluster::build(storage, [false, true], true)
    }

    fn build(storage: serde_json::Value, pidns: [bool; 2], gluster: bool) -> Cluster {
        let lab = Lab::new(if gluster { 3 } else { 2 });
        let server = PgServer::start_for(&lab.server_addr(), Some(&lab.subnet()));
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let mut gluster = gluster.then(|| {
            let g = Gluster::start(
                &lab.netns(2),
                &lab.host_addr(2),
                &dir.path().join("gluster"),
            );
            g.volume("gv", true);
            g
        });
        let mut cfg = serde_json::json!({
            "storage": { "backend": "postgres", "postgres": { "dsn": server.dsn() } }
        });
        for (k, v) in storage.as_object().unwrap() {
            cfg["storage"][k] = v.clone();
        }
        let hosts = (0..2)
            .map(|idx| {
                let root = dir.path().join(((b'a' + idx as u8) as char).to_string());
                std::fs::create_dir(&root).unwrap();
                let pidns = pidns[idx];
                if pidns {
                    run_ok(Command::new("mount").arg("--bind").arg(&root).arg(&root));
                    run_ok(Command::new("mount").arg("--make-shared").arg(&root));
                }
                let ws = match &mut gluster {
                    Some(g) => {
                        let gv = root.join("gv");
                        match idx {
                            0 => g.mount(&lab.netns(idx), "gv", &gv, gluster::FSTAB_OPTIONS),
                            _ => g.mount_direct(&lab.netns(idx), "gv", &gv, gluster::CLIENT_FLAGS),
                        }
                        gv.join("ws")
                    }
                    None => ws.clone(),
                };
                let host = Host {
                    idx,
                    netns: lab.netns(idx),
                    mp: root.join("mnt"),
                    ws,
                    root,
                    pidns,
                    unshare: None,
                    pid: None,
                };
                std::fs::create_dir_all(host.home().join(".vikingfs")).unwrap();
                std::fs::create_dir(&host.mp).unwrap();
                std::fs::write(host.home().join(".vikingfs/config.json"), cfg.to_string()).unwrap();
                host
            })
            .collect();
        Cluster {
            hosts,
            _gluster: gluster,
            server,
            _lab: lab,
            dir,
        }
    }

    pub(crate) fn a(&self) -> &Host {
        &self.hosts[0]
    }

    pub(crate) fn b(&self) -> &Host {
        &self.hosts[1]
    }

    /// The host part of lock owners and daemon records of each running daemon (from the
    /// workspace's daemon registry), by host index.
    pub(crate) fn host_ids(&self) -> Vec<String> {
        let dir = self.hosts[0].ws.join(".vikingfs/daemons");
        self.hosts
            .iter()
            .map(|h| {
                let mp = h.mp.to_str().unwrap().to_string();
                std::fs::read_dir(&dir)
                    .unwrap()
                    .filter_map(|e| std::fs::read(e.unwrap().path()).ok())
                    .filter_map(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                    .find(|r| r["mountpoint"] == mp.as_str())
                    .unwrap_or_else(|| panic!("no daemon record of host {}", h.name()))["host"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    }
}

/// For each of `texts`, a word (of 8 letters or more) that occurs in it and in none of the
/// others, if it has one (an index page that only names the others has none): a query only
/// that text answers by its words. A word is letters between
/// non-alphanumerics: the letters of `fusermount3` are no term of the index, which keeps
/// such a name whole.
fn unique_words(texts: &[String]) -> Vec<Option<String>> {
    let words = |t: &str| -> std::collections::BTreeSet<String> {
        t.split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| w.len() >= 8 && w.chars().all(|c| c.is_ascii_alphabetic()))
            .map(str::to_lowercase)
            .collect()
    };
    let sets: Vec<_> = texts.iter().map(|t| words(t)).collect();
    sets.iter()
        .enumerate()
        .map(|(i, s)| {
            s.iter()
                .filter(|w| {
                    sets.iter()
                        .enumerate()
                        .all(|(j, o)| j == i || !o.iter().any(|x| x.starts_with(&w[..6])))
                })
                .max_by_key(|w| w.len())
                .cloned()
        })
        .collect()
}

#[test]
fn files_copied_in_on_one_host_are_found_from_the_other() {
    let mut c = Cluster::new(serde_json::json!({}));
    c.hosts[0].mount(&[]);
    c.hosts[1].mount(&[]);
    let ids = c.host_ids();
    assert_ne!(ids[0], ids[1], "B's PID namespace makes it another host");
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let mut names: Vec<String> = std::fs::read_dir(&docs)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".md"))
        .collect();
    names.sort();
    assert!(names.len() >= 3, "{names:?}");
    ok(
        &c.a().res(),
        &format!("cp -r {} docs", docs.to_str().unwrap()),
    );
    let texts: Vec<String> = names
        .iter()
        .map(|n| std::fs::read_to_string(docs.join(n)).unwrap())
        .collect();
    // Host B sees the files through its own mount, as written.
    for (n, t) in names.iter().zip(&texts) {
        assert_eq!(
            &std::fs::read_to_string(c.b().res().join("docs").join(n)).unwrap(),
            t
        );
    }
    c.b().wait();
    let (names, queries): (Vec<&String>, Vec<String>) = names
        .iter()
        .zip(unique_words(&texts))
        .filter_map(|(n, q)| Some((n, q?)))
        .unzip();
    assert!(queries.len() >= 3, "words of their own in {names:?}");
    let found = c.b().find_each(&queries);
    for ((n, q), uris) in names.iter().zip(&queries).zip(&found) {
        let want = format!("viking://resources/docs/{n}");
        assert_eq!(
            uris.iter().filter(|u| **u == want).count(),
            1,
            "host B's find {q:?} names {want} once: {uris:?}"
        );
    }
    c.b().check_index_agrees();
}

#[test]
fn rm_and_mv_on_one_host_keep_find_on_the_other_truthful() {
    let mut c = Cluster::new(serde_json::json!({}));
    c.hosts[0].mount(&[]);
    c.hosts[1].mount(&[]);
    ok(
        &c.a().res(),
        "mkdir -p ledger/old/sub ledger/new
         echo 'ledger entry kept: marigold accounts' > ledger/old/kept.md
         echo 'ledger entry removed: obsidian accounts' > ledger/old/gone.md
         echo 'ledger entry moved: tamarind accounts' > ledger/old/moved.md
         echo 'ledger entry nested: juniper accounts' > ledger/old/sub/deep.md",
    );
    c.a().wait();
    // Each is found where it is before anything changes.
    let queries: Vec<String> = ["marigold", "obsidian", "tamarind", "juniper"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let before = c.a().find_each(&queries);
    let old = |n: &str| format!("viking://resources/ledger/old/{n}");
    let new = |n: &str| format!("viking://resources/ledger/new/{n}");
    for (want, got) in ["kept.md", "gone.md", "moved.md", "sub/deep.md"]
        .iter()
        .zip(&before)
    {
        assert!(got.contains(&old(want)), "{want}: {got:?}");
    }
    // Host B removes one file and moves another, and a directory.
    ok(
        &c.b().res(),
        "rm ledger/old/gone.md && mv ledger/old/moved.md ledger/new/moved.md \
         && mv ledger/old/sub ledger/new/sub",
    );
    // Host A's mount shows it (once its cached entries expire) and its find agrees.
    let until = deadline(30);
    while c.a().res().join("ledger/old/gone.md").exists() {
        assert!(Instant::now() < until, "A still shows the removed file");
        std::thread::sleep(Duration::from_millis(50));
    }
    c.a().wait();
    let mut all = queries.clone();
    all.push("ledger accounts".into());
    let after = c.a().find_each(&all);
    for uris in &after {
        for gone in [old("gone.md"), old("moved.md"), old("sub/deep.md")] {
            assert!(!uris.contains(&gone), "A's find names {gone}: {uris:?}");
        }
        assert!(!uris.iter().any(|u| u.starts_with(&old("sub"))), "{uris:?}");
    }
    assert!(after[0].contains(&old("kept.md")), "{:?}", after[0]);
    assert!(
        !after[1].iter().any(|u| u.ends_with("gone.md")),
        "{:?}",
        after[1]
    );
    assert_eq!(
        after[2].iter().filter(|u| **u == new("moved.md")).count(),
        1,
        "{:?}",
        after[2]
    );
    assert_eq!(
        after[3]
            .iter()
            .filter(|u| **u == new("sub/deep.md"))
            .count(),
        1,
        "{:?}",
        after[3]
    );
    c.a().check_index_agrees();
}

/// `r{i}x{5 digits}`: kept whole by the index's terms, one per file.
pub(crate) fn token(i: usize) -> String {
    format!("r{i}x{:05}", (i * 7919) % 100_000)
}

#[test]
fn jobs_a_killed_host_had_claimed_are_finished_by_the_other_once_their_lease_runs_out() {
    // A's daemon may die holding a write-back lock too: another host frees it after
    // lock_expire (a short one, so the test need not wait the default 30 s).
    let mut c = Cluster::new(serde_json::json!({
        "agfs": { "pathlock": { "lock_expire_secs": 3 } }
    }));
    // A's embedding jobs stop at their start (claimed, lease renewed): A dies holding them.
    c.hosts[0].mount(&[
        ("VIKINGFS_JOB_LEASE_MS", "2000"),
        ("VIKINGFS_PAUSE_AT", "job.embed.start:600000"),
    ]);
    c.hosts[1].mount(&[("VIKINGFS_JOB_LEASE_MS", "2000")]);
    const FILES: usize = 40;
    let mut script = String::from("mkdir bulk");
    for i in 1..=FILES {
        script += &format!(" && echo 'bulk file {i}: {}' > bulk/f{i}.md", token(i));
    }
    ok(&c.a().res(), &script);
    // A claim names its worker's host and pid.
    let worker_of_a = format!("{}-pid{}/%", c.host_ids()[0], c.a().pid.unwrap());
    let mut db = c.server.client();
    let claims_of_a = |db: &mut postgres::Client| -> Vec<(i64, i32)> {
        db.query(
            "SELECT id, attempts FROM vq_jobs WHERE queue = 'embedding' AND state = 1 \
             AND worker LIKE $1 ORDER BY id",
            &[&worker_of_a],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
    };
    let until = deadline(60);
    let held = loop {
        let held = claims_of_a(&mut db);
        if !held.is_empty() {
            break held;
        }
        assert!(Instant::now() < until, "host A never claimed a job");
        std::thread::sleep(Duration::from_millis(20));
    };
    c.hosts[0].kill9();
    // B finishes everything, A's claims too once their lease ran out.
    c.b().wait();
    let ids: Vec<i64> = held.iter().map(|(id, _)| *id).collect();
    let left: i64 = db
        .query_one("SELECT COUNT(*) FROM vq_jobs WHERE id = ANY($1)", &[&ids])
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "A's claimed jobs {held:?} are done");
    let left: i64 = db
        .query_one("SELECT COUNT(*) FROM vq_jobs", &[])
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "no job left, none dead");
    // Every file indexed, each once.
    let queries: Vec<String> = (1..=FILES).map(token).collect();
    for (i, uris) in (1..=FILES).zip(c.b().find_each(&queries)) {
        let want = format!("viking://resources/bulk/f{i}.md");
        assert_eq!(
            uris.iter().filter(|u| **u == want).count(),
            1,
            "{}: {uris:?}",
            token(i)
        );
    }
    let all = &c.b().find_each(&["bulk file".to_string()])[0];
    let files: Vec<_> = all.iter().filter(|u| u.contains("/bulk/f")).collect();
    let distinct: std::collections::BTreeSet<_> = files.iter().collect();
    assert_eq!(files.len(), FILES, "{all:?}");
    assert_eq!(distinct.len(), FILES, "no duplicate record: {all:?}");
    c.b().check_index_agrees();
}

/// What a shell command through a mount did: its exit status and stderr.
pub(crate) fn attempt(dir: &Path, script: &str) -> (bool, String) {
    let out = sh(dir, &format!("timeout 120 sh -c '{script}'"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    )
}

#[test]
fn a_server_restart_mid_run_loses_nothing_either_host_wrote() {
    let mut c = Cluster::new(serde_json::json!({}));
    c.hosts[0].mount(&[]);
    c.hosts[1].mount(&[]);
    let pids: Vec<_> = c.hosts.iter().map(|h| h.pid.unwrap()).collect();
    // (file, content) of every write that succeeded, through either host.
    let mut written: Vec<(String, String)> = Vec::new();
    let mut n = 0;
    let mut write_some = |c: &Cluster, phase: &str, written: &mut Vec<_>| {
        for h in &c.hosts {
            for _ in 0..4 {
                n += 1;
                let (file, text) = (format!("{phase}/f{n}.md"), format!("{phase} {}", token(n)));
                let (done, err) = attempt(
                    &h.res(),
                    &format!("mkdir -p {phase} && echo \"{text}\" > {file}"),
                );
                // A write never needs the server: its job waits in the spool.
                assert!(done, "host {}: writing {file}: {err}", h.name());
                written.push((file, text));
            }
        }
    };
    write_some(&c, "before", &mut written);
    ok(
        &c.b().res(),
        "mkdir moving && echo 'moving quillwort' > moving/m.md && echo 'doomed sorrel' > moving/d.md",
    );
    c.a().wait();
    c.server.stop();
    write_some(&c, "during", &mut written);
    // mv and rm journal their intent on the server: without it they fail with an errno and
    // change nothing (or, had they waited, succeed).
    let mv = attempt(&c.b().res(), "mv moving/m.md moving/m2.md");
    let rm = attempt(&c.a().res(), "rm moving/d.md");
    for (what, (done, err)) in [("mv", &mv), ("rm", &rm)] {
        assert!(
            *done || err.ends_with("Input/output error"),
            "{what} while the server is down: {err}"
        );
    }
    let backing = c.dir.path().join("ws/viking/default/resources/moving");
    assert_eq!(backing.join("m.md").exists(), !mv.0, "mv all or nothing");
    assert_eq!(backing.join("m2.md").exists(), mv.0, "mv all or nothing");
    assert_eq!(backing.join("d.md").exists(), !rm.0, "rm all or nothing");
    c.server.start_again();
    // Both daemons lived through it and their mounts answer; mv and rm work again.
    for (h, pid) in c.hosts.iter().zip(&pids) {
        assert!(alive(*pid), "host {}'s daemon died", h.name());
    }
    ok(
        &c.b().res(),
        "[ -e moving/m2.md ] || mv moving/m.md moving/m2.md",
    );
    ok(&c.a().res(), "[ ! -e moving/d.md ] || rm moving/d.md");
    write_some(&c, "after", &mut written);
    c.a().wait();
    // Every file either host wrote, before, during and after, is there and found, once.
    for (file, text) in &written {
        assert_eq!(
            std::fs::read_to_string(c.b().res().join(file)).unwrap(),
            format!("{text}\n")
        );
    }
    let mut queries: Vec<String> = written
        .iter()
        .map(|(_, t)| t.split(' ').nth(1).unwrap().to_string())
        .collect();
    queries.extend(["quillwort".to_string(), "sorrel".to_string()]);
    for h in &c.hosts {
        let found = h.find_each(&queries);
        for ((file, _), uris) in written.iter().zip(&found) {
            let want = format!("viking://resources/{file}");
            assert_eq!(
                uris.iter().filter(|u| **u == want).count(),
                1,
                "host {}: {file}: {uris:?}",
                h.name()
            );
        }
        let moved = &found[written.len()];
        assert!(
            moved.contains(&"viking://resources/moving/m2.md".to_string())
                && !moved.iter().any(|u| u.ends_with("moving/m.md")),
            "{moved:?}"
        );
        assert!(
            !found[written.len() + 1].iter().any(|u| u.ends_with("d.md")),
            "{:?}",
            found[written.len() + 1]
        );
        h.check_index_agrees();
    }
}

/// The token in the EXACT lock file of `dir/name` (backing directory): `(owner, time_ns)`.
pub(crate) fn exact_token(dir: &Path, name: &str) -> Option<(String, u64)> {
    let prefix = format!(".exact.ovlock.{name}.");
    let file = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&prefix)
        })?;
    let raw = std::fs::read_to_string(file).ok()?;
    let mut it = raw.rsplitn(3, ':');
    let (_kind, time, owner) = (it.next()?, it.next()?, it.next()?);
    Some((owner.to_string(), time.parse().ok()?))
}

pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

#[test]
fn a_live_lock_of_one_host_is_not_taken_by_the_other() {
    const EXPIRE: u64 = 6;
    let mut c = Cluster::new(serde_json::json!({
        "agfs": { "pathlock": { "lock_timeout_secs": 0.5, "lock_expire_secs": EXPIRE } }
    }));
    c.hosts[0].mount(&[]);
    c.hosts[1].mount(&[]);
    ok(
        &c.a().res(),
        "mkdir held && echo 'first x' > held/x.md && echo 'first y' > held/y.md",
    );
    c.a().wait();
    let ids = c.host_ids();
    let backing = c.dir.path().join("ws/viking/default/resources/held");
    // `vikingfs lock` on host A (its PID namespace) holds both files while its command runs.
    let hold = |name: &str| {
        let ready = c.a().root.join(format!("{name}.ready"));
        let child = c
            .a()
            .cli(&[
                "lock",
                &format!("viking://resources/held/{name}"),
                "--",
                "sh",
                "-c",
                &format!("echo > {}; read _", ready.display()),
            ])
            .stdin(Stdio::piped())
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
        let (owner, _) = exact_token(&backing, name).expect("the lock file");
        assert!(owner.starts_with(&format!("vfs-{}-", ids[0])), "{owner}");
        child
    };
    let mut holders = [hold("x.md"), hold("y.md")];
    // Held past lock_expire: the holder refreshes its token, so it is never stale.
    let (owner, first) = exact_token(&backing, "x.md").unwrap();
    let until = deadline(60);
    loop {
        let (o, t) = exact_token(&backing, "x.md").unwrap();
        assert_eq!(o, owner);
        if t >= first + EXPIRE * 1_000_000_000 {
            break;
        }
        assert!(Instant::now() < until, "the token was never refreshed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let busy = |h: &Host, name: &str| {
        let err = fails(&h.res(), &format!("echo second > held/{name}"));
        assert!(err.contains("Device or resource busy"), "{err}");
    };
    busy(c.b(), "x.md");
    assert_eq!(
        std::fs::read_to_string(backing.join("x.md")).unwrap(),
        "first x\n"
    );
    assert_eq!(exact_token(&backing, "x.md").unwrap().0, owner);
    // Nor does B's fsck call it stale.
    let out = run(&mut c.b().cli(&["fsck", "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        !v["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["kind"] == "stale_lock"),
        "{v}"
    );
    // The holder dies without releasing. A sees its own host's dead owner at once; B cannot
    // check another host's process and waits for lock_expire since the last refresh.
    for h in &mut holders {
        h.kill().unwrap();
        h.wait().unwrap();
    }
    let (_, last_x) = exact_token(&backing, "x.md").unwrap();
    let (_, last_y) = exact_token(&backing, "y.md").unwrap();
    busy(c.b(), "x.md");
    ok(&c.a().res(), "echo second > held/y.md");
    assert!(
        now_ns() < last_y + EXPIRE * 1_000_000_000,
        "A took its dead owner's lock before lock_expire"
    );
    let until = deadline(60);
    while !sh(&c.b().res(), "echo second > held/x.md").status.success() {
        assert!(Instant::now() < until, "B never took the expired lock");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        now_ns() >= last_x + EXPIRE * 1_000_000_000,
        "B took another host's lock only once it expired"
    );
    for n in ["x.md", "y.md"] {
        assert_eq!(
            std::fs::read_to_string(backing.join(n)).unwrap(),
            "second\n"
        );
    }
}

#[test]
fn two_hosts_whose_daemons_have_the_same_pid_keep_their_own_records() {
    // Both daemons are PID 1 of a namespace of their own, as in two containers.
    let mut c = Cluster::with_pidns(serde_json::json!({}), [true, true]);
    c.hosts[0].mount(&[]);
    c.hosts[1].mount(&[]);
    let daemons = |h: &Host| -> Vec<serde_json::Value> {
        let out = run_ok(&mut h.cli(&["status", "--json"]));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["daemons"].as_array().unwrap().clone()
    };
    let logs = |c: &Cluster| -> String {
        c.hosts
            .iter()
            .map(|h| std::fs::read_to_string(h.root.join("daemon.log")).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n---\n")
    };
    let listed = daemons(c.b());
    assert_eq!(
        listed.len(),
        2,
        "{listed:?}; the daemons' logs: {}",
        logs(&c)
    );
    assert!(listed.iter().all(|d| d["pid"] == 1), "{listed:?}");
    assert_ne!(listed[0]["host"], listed[1]["host"], "{listed:?}");
    // A stops: its record goes, B's stays.
    c.hosts[0].unmount();
    let listed = daemons(c.b());
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        listed[0]["mountpoint"],
        c.b().mp.to_str().unwrap(),
        "{listed:?}"
    );
}

#[test]
fn jobs_a_host_spooled_before_it_died_are_taken_in_by_the_other_hosts_daemon() {
    let mut c = Cluster::new(serde_json::json!({}));
    c.hosts[0].mount(&[("VIKINGFS_JOB_LEASE_MS", "2000")]);
    c.hosts[1].mount(&[("VIKINGFS_JOB_LEASE_MS", "2000")]);
    let apid = c.a().pid.unwrap();
    let spool = c.dir.path().join("ws/.vikingfs/spool");
    let spools_of_a = || -> Vec<PathBuf> {
        std::fs::read_dir(&spool)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let n = p.file_name().unwrap().to_string_lossy().into_owned();
                n.starts_with(&format!("{apid}-")) && std::fs::metadata(p).unwrap().len() > 0
            })
            .collect()
    };
    // With the server down, A's jobs can only wait in its spool; then A dies.
    c.server.stop();
    const FILES: usize = 10;
    let mut script = String::from("mkdir spooled");
    for i in 1..=FILES {
        script += &format!(" && echo 'spooled {}' > spooled/s{i}.md", token(100 + i));
    }
    ok(&c.a().res(), &script);
    assert!(!spools_of_a().is_empty(), "A's jobs wait in its spool");
    c.hosts[0].kill9();
    c.server.start_again();
    // Nobody runs a command that opens the queue: B's daemon takes the dead host's spool in.
    let until = deadline(60);
    while !spools_of_a().is_empty() {
        assert!(
            Instant::now() < until,
            "B's daemon never took in A's spool: {:?}",
            spools_of_a()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    c.b().wait();
    let queries: Vec<String> = (1..=FILES).map(|i| token(100 + i)).collect();
    for (i, uris) in (1..=FILES).zip(c.b().find_each(&queries)) {
        let want = format!("viking://resources/spooled/s{i}.md");
        assert!(uris.contains(&want), "{want}: {uris:?}");
    }
    c.b().check_index_agrees();
}

/// Both hosts `rm -rf` one tree at once: every file is removed by one of them and kept by
/// whichever did (each removal takes the path's lock, which the other host respects), so a
/// rewind from host A brings every file back whole, and neither daemon lost kept content
/// ("removed content not in the history").
#[test]
fn simultaneous_removals_on_two_hosts_keep_every_file() {
    let mut c = Cluster::new(serde_json::json!({}));
    c.hosts[0].mount(&[]);
    c.hosts[1].mount(&[]);
    const DIRS: usize = 8;
    const FILES: usize = 40;
    let mut script = String::new();
    for d in 0..DIRS {
        script += &format!("mkdir -p both/d{d} && ");
        for f in 0..FILES {
            script += &format!(
                "echo 'file {d}/{f} {}' > both/d{d}/f{f}.md && ",
                token(d * 100 + f)
            );
        }
    }
    script += "true";
    ok(&c.a().res(), &script);
    c.a().wait();
    std::thread::sleep(Duration::from_millis(1100));
    let since = ok(Path::new("/"), "date -u +%Y-%m-%dT%H:%M:%SZ")
        .trim()
        .to_string();
    std::thread::sleep(Duration::from_millis(1100));
    // A removes from the first directory on, B from the last back, so they meet in the
    // middle, on the same directories and files.
    let (ra, rb) = (c.a().res(), c.b().res());
    std::thread::scope(|s| {
        let a = s.spawn(|| sh(&ra, "rm -rf both"));
        let b = s.spawn(|| {
            sh(
                &rb,
                "for d in $(ls -r both); do find both/$d -depth -delete; done; rm -rf both",
            )
        });
        let _ = (a.join().unwrap(), b.join().unwrap());
    });
    assert!(!ra.join("both").exists() && !rb.join("both").exists());
    c.a().wait();
    c.b().wait();
    for h in &c.hosts {
        let log = std::fs::read_to_string(h.root.join("daemon.log")).unwrap_or_default();
        let lost: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("not in the history"))
            .collect();
        assert!(
            lost.is_empty(),
            "host {} lost kept content: {lost:?}",
            h.name()
        );
    }
    run_ok(
        &mut c
            .a()
            .cli(&["undo", "--since", &since, "viking://resources/both"]),
    );
    for d in 0..DIRS {
        for f in 0..FILES {
            let p = ra.join(format!("both/d{d}/f{f}.md"));
            let text = std::fs::read_to_string(&p)
                .unwrap_or_else(|e| panic!("{} not restored: {e}", p.display()));
            assert_eq!(text, format!("file {d}/{f} {}\n", token(d * 100 + f)));
        }
    }
}
