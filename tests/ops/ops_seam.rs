//! The entry points the FUSE mount calls (unlink, rmdir, rename, file_written, removed,
//! renamed), summary coalescing, and the lifecycle lock across a "restart" — through the
//! library, with the real stores and the real job handlers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use vikingfs::config::{Config, WorkerConfig};
use vikingfs::fs::{RenameMode, ToErrno};
use vikingfs::index::Level;
use vikingfs::ops::{jobs, source_version, Ops, OpsError};
use vikingfs::queue::{self, Job, JobError, JobHandler};
use vikingfs::uri::VPath;
use vikingfs::workspace::Workspace;

fn setup() -> (tempfile::TempDir, Arc<Ops>) {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path().join("ws"), "default", "default").unwrap();
    let ops = Ops::open(&ws, &Config::default()).unwrap();
    (dir, ops)
}

fn p(s: &str) -> VPath {
    VPath::from_rel(s).unwrap()
}

fn drain(ops: &Arc<Ops>) {
    let w = WorkerConfig::default();
    assert!(ops.drain(&w, Duration::from_secs(120), |_| {}).unwrap());
}

fn mkdir(ops: &Ops, rel: &str) {
    std::fs::create_dir_all(ops.workspace().fs_path(&p(rel))).unwrap();
    ops.dir_created(&p(rel)).unwrap();
}

/// The content record of `rel` is current.
fn indexed(ops: &Ops, rel: &str) -> bool {
    let fs = ops.workspace().fs_path(&p(rel));
    let Ok(m) = std::fs::metadata(fs) else {
        return false;
    };
    ops.index().version_of(&p(rel), Level::Content).unwrap() == Some(source_version(&m))
}

#[test]
fn seam_unlink_rmdir_and_rename() {
    let (_d, ops) = setup();
    mkdir(&ops, "resources/d");
    for f in ["a.md", "b.md"] {
        ops.write_file(&p(&format!("resources/d/{f}")), f.as_bytes())
            .unwrap();
    }
    drain(&ops);
    assert!(indexed(&ops, "resources/d/a.md"));
    assert!(ops
        .workspace()
        .fs_path(&p("resources/d/.abstract.md"))
        .exists());

    // rename replaces by default, refuses with noreplace, and EXCHANGE is not supported.
    let e = ops
        .rename(
            &p("resources/d/a.md"),
            &p("resources/d/b.md"),
            RenameMode::NoReplace,
        )
        .unwrap_err();
    assert_eq!(e.errno(), libc::EEXIST);
    let e = ops
        .rename(
            &p("resources/d/a.md"),
            &p("resources/d/b.md"),
            RenameMode::Exchange,
        )
        .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    ops.rename(
        &p("resources/d/a.md"),
        &p("resources/d/b.md"),
        RenameMode::Replace,
    )
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(ops.workspace().fs_path(&p("resources/d/b.md"))).unwrap(),
        "a.md"
    );
    assert!(
        indexed(&ops, "resources/d/b.md"),
        "the record moved with the file"
    );
    assert_eq!(
        ops.index()
            .version_of(&p("resources/d/a.md"), Level::Content)
            .unwrap(),
        None
    );

    // rmdir: a directory with summaries only is empty; with a file it is not.
    assert_eq!(
        ops.rmdir(&p("resources/d")).unwrap_err().errno(),
        libc::ENOTEMPTY
    );
    assert_eq!(
        ops.unlink(&p("resources/d")).unwrap_err().errno(),
        libc::EISDIR
    );
    ops.unlink(&p("resources/d/b.md")).unwrap();
    drain(&ops);
    assert!(ops
        .workspace()
        .fs_path(&p("resources/d/.overview.md"))
        .exists());
    ops.rmdir(&p("resources/d")).unwrap();
    assert!(!ops.workspace().fs_path(&p("resources/d")).exists());
    assert!(ops
        .index()
        .all_uris()
        .unwrap()
        .iter()
        .all(|(u, _)| !u.starts_with(&p("resources/d"))));
    assert_eq!(
        ops.unlink(&p("resources/d/zz.md")).unwrap_err().errno(),
        libc::ENOENT
    );
    assert_eq!(ops.rmdir(&p("resources")).unwrap_err().errno(), libc::EPERM);
}

#[test]
fn seam_notifications_for_changes_the_mount_made_itself() {
    let (_d, ops) = setup();
    mkdir(&ops, "agent/notes");
    let fs = |r: &str| ops.workspace().fs_path(&p(r));
    std::fs::write(fs("agent/notes/x.md"), "xenon").unwrap();
    ops.file_written(&p("agent/notes/x.md")).unwrap();
    drain(&ops);
    assert!(indexed(&ops, "agent/notes/x.md"));

    std::fs::rename(fs("agent/notes/x.md"), fs("agent/notes/y.md")).unwrap();
    ops.removed(&p("agent/notes/x.md")).unwrap();
    ops.file_written(&p("agent/notes/y.md")).unwrap();
    drain(&ops);
    assert!(!indexed(&ops, "agent/notes/x.md"));
    assert!(indexed(&ops, "agent/notes/y.md"));

    std::fs::remove_file(fs("agent/notes/y.md")).unwrap();
    ops.removed(&p("agent/notes/y.md")).unwrap();
    assert_eq!(
        ops.index()
            .version_of(&p("agent/notes/y.md"), Level::Content)
            .unwrap(),
        None
    );
    drain(&ops);
    let ov = std::fs::read_to_string(fs("agent/notes/.overview.md")).unwrap();
    assert!(
        !ov.contains("y.md"),
        "summary regenerated after the removal: {ov}"
    );
}

/// Counts the semantic jobs that run, delegating to the real handler.
struct Counting(jobs::SemanticHandler, Arc<AtomicUsize>);

impl JobHandler for Counting {
    fn handle(&self, job: &Job) -> Result<(), JobError> {
        self.1.fetch_add(1, Ordering::SeqCst);
        self.0.handle(job)
    }
}

#[test]
fn many_changes_to_one_directory_coalesce_into_one_summary() {
    let (_d, ops) = setup();
    mkdir(&ops, "resources/many");
    drain(&ops);
    for i in 0..40 {
        ops.write_file(
            &p(&format!("resources/many/f{i}.md")),
            format!("file {i}").as_bytes(),
        )
        .unwrap();
    }
    let runs = Arc::new(AtomicUsize::new(0));
    let handlers = vec![
        queue::HandlerSpec::new(
            queue::SEMANTIC,
            Arc::new(Counting(jobs::SemanticHandler(ops.clone()), runs.clone())),
            1,
        ),
        queue::HandlerSpec::new(
            queue::EMBEDDING,
            Arc::new(jobs::EmbeddingHandler(ops.clone())),
            2,
        ),
    ];
    assert!(queue::drain(ops.queue(), handlers, Duration::from_secs(120), |_| {}).unwrap());
    // One regeneration of resources/many, then one of its parent `resources`.
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "40 changes were not coalesced"
    );
    let ov = std::fs::read_to_string(ops.workspace().fs_path(&p("resources/many/.overview.md")))
        .unwrap();
    assert!(ov.contains("f39.md"), "the latest version wrote back: {ov}");
}

#[test]
fn lifecycle_lock_goes_stale_without_workers_and_is_reacquired_by_one() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path().join("ws"), "default", "default").unwrap();
    let mut cfg = Config::default();
    cfg.lock.expire = Duration::from_secs(3);
    let local = dir.path().join("res");
    std::fs::create_dir_all(local.join("sub")).unwrap();
    std::fs::write(local.join("a.md"), "alpha").unwrap();
    std::fs::write(local.join("sub/b.md"), "bravo").unwrap();
    let report = {
        // The "CLI": adds and goes away without working the queue.
        let ops = Ops::open(&ws, &cfg).unwrap();
        ops.add_resource(&local, &Default::default(), &mut |_, _| {})
            .unwrap()
    };
    let target = report.target.clone();
    let ops = Ops::open(&ws, &cfg).unwrap();
    match ops.rm(&target, true) {
        Err(e @ OpsError::Busy(..)) => assert!(e.to_string().contains("vfs-lifecycle-")),
        other => panic!("rm during the lifecycle: {other:?}"),
    }
    // Nobody refreshes it: it goes stale after lock_expire (polled, as another host would).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !ops.locks().list().unwrap().iter().all(|l| l.stale) {
        assert!(
            std::time::Instant::now() < deadline,
            "lifecycle lock never went stale"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // A worker starting now takes it back over and finishes the work under it.
    drain(&ops);
    assert!(indexed(&ops, "resources/res/a.md") && indexed(&ops, "resources/res/sub/b.md"));
    assert!(ops.journal().lifecycles().unwrap().is_empty());
    assert!(ops.locks().list().unwrap().is_empty(), "released when done");
    ops.rm(&target, true).unwrap();
}

#[test]
fn symlinks_and_fifos_are_never_read_or_indexed() {
    let (d, ops) = setup();
    mkdir(&ops, "resources/odd");
    let fs = |r: &str| ops.workspace().fs_path(&p(r));
    let secret = d.path().join("outside.txt");
    std::fs::write(&secret, "outside the workspace").unwrap();
    std::os::unix::fs::symlink(&secret, fs("resources/odd/link.md")).unwrap();
    let fifo = std::ffi::CString::new(fs("resources/odd/pipe.md").to_str().unwrap()).unwrap();
    // SAFETY: `fifo` is a NUL-terminated CString alive for the call; mkfifo only reads it.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    std::fs::write(fs("resources/odd/real.md"), "real").unwrap();
    for f in ["link.md", "pipe.md", "real.md"] {
        ops.file_written(&p(&format!("resources/odd/{f}"))).unwrap();
    }
    // A reader opening the FIFO would block here forever.
    drain(&ops);
    assert!(indexed(&ops, "resources/odd/real.md"));
    for f in ["link.md", "pipe.md"] {
        let uri = p(&format!("resources/odd/{f}"));
        assert_eq!(
            ops.index().version_of(&uri, Level::Content).unwrap(),
            None,
            "{f}"
        );
    }
    let hits = ops.find("outside the workspace", 10, None).unwrap();
    assert!(
        hits.iter().all(|h| h.snippet.find("outside").is_none()),
        "{hits:?}"
    );
}

/// A summariser that takes `work` per directory (a slow chat model), reporting each start.
struct Slow {
    work: Duration,
    started: std::sync::Mutex<std::sync::mpsc::Sender<()>>,
}

impl vikingfs::semantic::Summarizer for Slow {
    fn summarize(
        &self,
        input: &vikingfs::semantic::summary::DirInput,
    ) -> Result<vikingfs::semantic::summary::Summary, vikingfs::semantic::SemanticError> {
        let _ = self.started.lock().unwrap().send(());
        std::thread::sleep(self.work);
        Ok(vikingfs::semantic::summary::LocalSummarizer.summarize(input))
    }
    fn summarize_messages(
        &self,
        uri: &str,
        messages: &[vikingfs::semantic::memory::Message],
    ) -> Result<vikingfs::semantic::summary::Summary, vikingfs::semantic::SemanticError> {
        Ok(vikingfs::semantic::summary::LocalSummarizer.summarize_messages(uri, messages))
    }
    fn name(&self) -> &'static str {
        "slow"
    }
}

#[test]
fn lifecycle_lock_stays_fresh_through_a_job_longer_than_lock_expire() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path().join("ws"), "default", "default").unwrap();
    let mut cfg = Config::default();
    cfg.lock.expire = Duration::from_secs(1);
    let (tx, started) = std::sync::mpsc::channel();
    let slow = Arc::new(Slow {
        work: Duration::from_millis(2500),
        started: std::sync::Mutex::new(tx),
    });
    let ops = Ops::with_parts(
        &ws,
        vikingfs::lock::LockManager::new(&ws, cfg.lock.clone()).unwrap(),
        vikingfs::embed::from_config(&cfg.embedding).unwrap(),
        slow,
    )
    .unwrap();
    let local = dir.path().join("res");
    std::fs::create_dir_all(&local).unwrap();
    std::fs::write(local.join("a.md"), "alpha").unwrap();
    let target = ops
        .add_resource(&local, &Default::default(), &mut |_, _| {})
        .unwrap()
        .target;
    let worker = {
        let ops = ops.clone();
        std::thread::spawn(move || drain(&ops))
    };
    // The summary of the resource is being computed, for longer than lock_expire.
    started.recv_timeout(Duration::from_secs(60)).unwrap();
    let other = Ops::open(&ws, &cfg).unwrap();
    let t0 = std::time::Instant::now();
    let mut refused = 0;
    while t0.elapsed() < Duration::from_secs(2) {
        for l in other.locks().list().unwrap() {
            assert!(!l.stale, "lifecycle lock went stale during the job: {l:?}");
        }
        match other.rm(&target, true) {
            Err(e) if e.is_busy() => refused += 1,
            r => panic!("rm while the resource is processed: {r:?}"),
        }
    }
    assert!(refused > 0);
    worker.join().unwrap();
    assert!(other.locks().list().unwrap().is_empty());
    other.rm(&target, true).unwrap();
}

/// A path whose absolute backing path is longer than PATH_MAX (as a path of PATH_MAX-1 bytes
/// through the mount is): the mount's entry points name it relative to the data root.
#[test]
fn seam_paths_whose_backing_path_exceeds_path_max() {
    let (_d, ops) = setup();
    let comp = "d".repeat(230);
    let dir = format!("resources/{}", vec![comp.as_str(); 17].join("/"));
    let root = vikingfs::sys::DataRoot::open(&ops.workspace().data_root()).unwrap();
    root.make_dir_all(dir.as_bytes()).unwrap();
    let a = p(&format!("{dir}/{}", "a".repeat(150)));
    let b = p(&format!("{dir}/{}", "b".repeat(150)));
    assert!(a.as_str().len() < vikingfs::sys::PATH_MAX);
    assert!(ops.workspace().fs_path(&a).as_os_str().len() >= vikingfs::sys::PATH_MAX);
    let exists = |v: &VPath| root.lstat(v.as_str().as_bytes()).is_ok();

    ops.write_file(&a, b"long").unwrap();
    assert!(exists(&a));
    ops.rename(&a, &b, RenameMode::Replace).unwrap();
    assert!(!exists(&a) && exists(&b));
    ops.unlink(&b).unwrap();
    assert!(!exists(&b));
    let sub = p(&format!("{dir}/{}", "s".repeat(100)));
    root.make_dir_all(sub.as_str().as_bytes()).unwrap();
    ops.rmdir(&sub).unwrap();
    assert!(!exists(&sub));
    assert!(ops.locks().list().unwrap().is_empty(), "no lock file left");
}

/// A file held open for writing (a log, a lock file) is patience, not poison: its embedding
/// job waits without spending an attempt however often it comes round, so it never goes
/// dead; the close's enqueue ends the wait at once.
#[test]
fn a_file_open_for_writing_waits_and_never_goes_dead() {
    let (_d, ops) = setup();
    mkdir(&ops, "resources/logs");
    let f = p("resources/logs/app.log");
    ops.write_file(&f, b"started\n").unwrap();
    let open = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let probe = open.clone();
    let held = f.clone();
    ops.set_write_probe(Box::new(move |q| {
        *q == held && probe.load(Ordering::Relaxed)
    }));
    let lease = Duration::from_secs(60);
    let embedding = |ops: &Ops| {
        ops.queue()
            .stats()
            .unwrap()
            .into_iter()
            .find(|s| s.queue == queue::EMBEDDING)
            .expect("the embedding queue has its job")
    };
    for round in 0..8 {
        let job = ops
            .queue()
            .claim(queue::EMBEDDING, "w", lease)
            .unwrap()
            .unwrap_or_else(|| panic!("round {round}: nothing to claim"));
        let err = ops.run_embedding(&job).unwrap_err();
        assert!(matches!(err, JobError::Wait(_)), "round {round}: {err}");
        ops.queue().fail(&job, &err).unwrap();
        let s = embedding(&ops);
        assert_eq!((s.dead, s.retrying), (0, 0), "round {round}: {s:?}");
        // Waiting: not claimable at once; the writer's next change (or its close) ends that.
        assert!(ops
            .queue()
            .claim(queue::EMBEDDING, "w", lease)
            .unwrap()
            .is_none());
        ops.file_written(&f).unwrap();
    }
    open.store(false, Ordering::Relaxed);
    drain(&ops);
    assert!(indexed(&ops, "resources/logs/app.log"));
    assert!(ops.queue().stats().unwrap().iter().all(|s| s.dead == 0));
}

/// fsck tells a lease that ran out under a live worker of this host (hung, or unable to renew
/// on a full disk) from one whose worker exited: it never calls a live daemon's claim a dead
/// worker's.
#[test]
fn fsck_names_a_live_claimant_apart_from_an_exited_one() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path().join("ws"), "default", "default").unwrap();
    let cfg = Config::default();
    let ops = Ops::with_parts(
        &ws,
        vikingfs::lock::LockManager::new(&ws, cfg.lock.clone()).unwrap(),
        None,
        Arc::new(vikingfs::semantic::summary::LocalSummarizer),
    )
    .unwrap();
    let q = ops.queue();
    q.enqueue_many(&[
        queue::NewJob::new("semantic", Some("a".into()), serde_json::json!({})),
        queue::NewJob::new("semantic", Some("b".into()), serde_json::json!({})),
    ])
    .unwrap();
    let mut exited = std::process::Command::new("true").spawn().unwrap();
    let gone = exited.id();
    exited.wait().unwrap();
    let host = vikingfs::process::host_id();
    let me = std::process::id();
    for pid in [me, gone] {
        let worker = format!("{host}-pid{pid}/semantic");
        let job = q
            .claim("semantic", &worker, Duration::from_millis(1))
            .unwrap();
        assert!(job.is_some());
    }
    std::thread::sleep(Duration::from_millis(20));
    let report = ops.fsck(false, false).unwrap();
    let lines: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    let live =
        format!("1 semantic job(s) whose lease ran out while their worker (pid {me}) is alive");
    assert!(lines.iter().any(|l| l.starts_with(&live)), "{lines:#?}");
    let dead = "1 semantic job(s) whose lease expired (their worker exited";
    assert!(lines.iter().any(|l| l.starts_with(dead)), "{lines:#?}");
    assert_eq!(lines.len(), 2, "{lines:#?}");
}

/// A job stuck in its worker keeps its claim no longer than the pool's `max_run`: the
/// heartbeat stops renewing its lease, which runs out, and fsck names it as a job whose lease
/// ran out under a live worker, while it still hangs. (A heartbeat renewing it for as long as
/// it hung left fsck with nothing to say.)
#[test]
fn fsck_names_a_job_running_past_its_deadline() {
    struct Stuck(std::sync::Mutex<std::sync::mpsc::Receiver<()>>);
    impl JobHandler for Stuck {
        fn handle(&self, _: &Job) -> Result<(), JobError> {
            // Until the test ends: the sender is dropped then.
            let _ = self.0.lock().unwrap().recv();
            Ok(())
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path().join("ws"), "default", "default").unwrap();
    let cfg = Config::default();
    let ops = Ops::with_parts(
        &ws,
        vikingfs::lock::LockManager::new(&ws, cfg.lock.clone()).unwrap(),
        None,
        Arc::new(vikingfs::semantic::summary::LocalSummarizer),
    )
    .unwrap();
    let q = ops.queue();
    q.enqueue_many(&[queue::NewJob::new(
        "semantic",
        Some("stuck".into()),
        serde_json::json!({}),
    )])
    .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let opts = queue::PoolOptions {
        max_run: Duration::from_millis(600),
        ..queue::PoolOptions::with_lease(Duration::from_millis(300))
    };
    let pool = queue::WorkerPool::start(
        q.clone(),
        [queue::HandlerSpec::new(
            "semantic",
            Arc::new(Stuck(std::sync::Mutex::new(rx))),
            1,
        )],
        opts,
    );
    // Declared after the pool, so dropped before it: a failed assertion's unwinding frees
    // the stuck worker before the pool's drop joins it.
    let release = tx;
    let me = std::process::id();
    let named =
        format!("1 semantic job(s) whose lease ran out while their worker (pid {me}) is alive");
    let start = std::time::Instant::now();
    loop {
        let report = ops.fsck(false, false).unwrap();
        let lines: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
        if lines.iter().any(|l| l.starts_with(&named)) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "a job hung for 20 s and fsck says: {lines:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(release);
    pool.stop();
}

/// `viking://user` holds every user's tree: it gets no summary (one would quote each user's
/// abstract to every other), and one an older vikingfs wrote, with its records, is removed
/// after the next open of the engine (issue 43, finding 1).
#[test]
fn the_directory_of_every_users_tree_is_never_summarised() {
    let (d, ops) = setup();
    mkdir(&ops, "user/bob");
    ops.write_file(
        &p("user/bob/note.md"),
        b"The garage PIN is 4711 zebrafinch.\n",
    )
    .unwrap();
    drain(&ops);
    let data = ops.workspace().clone();
    let fs = |rel: &str| data.fs_path(&p(rel));
    assert!(
        fs("user/bob/.abstract.md").exists(),
        "bob's own tree is summarised"
    );
    for sidecar in ["user/.abstract.md", "user/.overview.md"] {
        assert!(!fs(sidecar).exists(), "{sidecar}");
    }
    for level in [Level::Abstract, Level::Overview] {
        assert_eq!(ops.index().version_of(&p("user"), level).unwrap(), None);
    }

    // What an older vikingfs left: the summary of `user`, quoting bob, and its records.
    for (sidecar, level) in [
        ("user/.abstract.md", Level::Abstract),
        ("user/.overview.md", Level::Overview),
    ] {
        std::fs::write(
            fs(sidecar),
            "- `bob/` — The garage PIN is 4711 zebrafinch.\n",
        )
        .unwrap();
        ops.index()
            .upsert(&vikingfs::index::Record {
                uri: p("user"),
                level,
                text: "bob: The garage PIN is 4711 zebrafinch.".into(),
                vector: None,
                snippet: "bob: The garage PIN is 4711 zebrafinch.".into(),
                source_version: "old".into(),
                partial: false,
            })
            .unwrap();
    }
    // fsck names it.
    let shared = |ops: &Ops| {
        ops.fsck(false, false)
            .unwrap()
            .problems
            .into_iter()
            .filter(|pr| matches!(pr, vikingfs::ops::Problem::SharedSummary { .. }))
            .count()
    };
    assert_eq!(shared(&ops), 1);
    drop(ops);
    let ws = Workspace::open(d.path().join("ws"), "default", "default").unwrap();
    let ops = Ops::open(&ws, &Config::default()).unwrap();
    drain(&ops);
    for sidecar in ["user/.abstract.md", "user/.overview.md"] {
        assert!(!fs(sidecar).exists(), "{sidecar} removed");
    }
    for level in [Level::Abstract, Level::Overview] {
        assert_eq!(
            ops.index().version_of(&p("user"), level).unwrap(),
            None,
            "{level:?} record removed"
        );
    }
    let hits = ops.find("zebrafinch", 10, None).unwrap();
    assert!(!hits.is_empty(), "bob's note is found");
    assert!(hits.iter().all(|h| h.uri != p("user")), "{hits:?}");
    assert!(
        fs("user/bob/.abstract.md").exists(),
        "bob's own summary stays"
    );
    assert_eq!(shared(&ops), 0);
}

/// A setattr through the mount's seam that changes only times or mode (`tar x`'s second
/// operation per file, `touch -d` after its open, `chmod`) queues nothing: no embedding (the
/// content is as it was) and no summary. A truncate does queue the file's job (the count
/// below is what would show one).
#[test]
fn a_setattr_of_times_or_mode_queues_no_job() {
    use vikingfs::fs::mutations::{AttrChange, Mutations};
    use vikingfs::fs::TimeSpec;
    let (_d, ops) = setup();
    mkdir(&ops, "resources/d");
    ops.write_file(&p("resources/d/a.md"), b"# a\n\nsome text\n")
        .unwrap();
    drain(&ops);
    assert!(indexed(&ops, "resources/d/a.md"));
    let seam = vikingfs::ops::LockedMutations::new(ops.locked().clone());
    let outstanding = || ops.queue().outstanding(None).unwrap();
    assert_eq!(outstanding(), 0);
    let f = p("resources/d/a.md");
    let times = AttrChange {
        atime: Some(TimeSpec::At(1_000_000, 0)),
        mtime: Some(TimeSpec::At(1_000_000, 0)),
        ..AttrChange::default()
    };
    seam.setattr(&f, &times).unwrap();
    let mode = AttrChange {
        mode: Some(0o600),
        ..AttrChange::default()
    };
    seam.setattr(&f, &mode).unwrap();
    seam.setattr(&p("resources/d"), &times).unwrap();
    assert_eq!(outstanding(), 0, "a setattr of times or mode queued a job");
    let md = std::fs::metadata(ops.workspace().fs_path(&f)).unwrap();
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    assert_eq!(
        (md.mtime(), md.permissions().mode() & 0o777),
        (1_000_000, 0o600)
    );
    // A truncate changes the content: its job is queued.
    let cut = AttrChange {
        size: Some(1),
        ..AttrChange::default()
    };
    seam.setattr(&f, &cut).unwrap();
    assert!(outstanding() > 0, "a truncate queued nothing");
}
