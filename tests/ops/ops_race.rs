//! rm and mv racing the background workers: a job that read a file before it was removed or
//! moved must never write a record for it afterwards (no resurrection), and an old job's result
//! must never overwrite a newer one. Checked against the index itself, not through `find`
//! (which would hide orphans by deleting them).

use crate::support::ops;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use vikingfs::config::{Config, WorkerConfig};
use vikingfs::index::Level;
use vikingfs::ops::{jobs, source_version, Ops};
use vikingfs::queue::{PoolOptions, WorkerPool};
use vikingfs::uri::VPath;
use vikingfs::workspace::Workspace;

/// What the checker expects of every path the test touched.
#[derive(Debug, Clone, PartialEq)]
enum Want {
    /// Exists with this content; its record must match its current version.
    File(String),
    /// Removed or moved away: no record may name it.
    Gone,
}

/// The index holds a current record for every wanted file and none for anything gone; no
/// record names a missing source.
fn check_index(ops: &Ops, want: &BTreeMap<VPath, Want>) {
    let ws = ops.workspace();
    for (uri, level) in ops.index().all_uris().unwrap() {
        let meta = std::fs::metadata(ws.fs_path(&uri));
        assert!(
            meta.as_ref()
                .is_ok_and(|m| m.is_dir() == level.names_directory()),
            "record {uri} ({level}) names a missing source"
        );
    }
    for (p, w) in want {
        let rec = ops.index().version_of(p, Level::Content).unwrap();
        match w {
            Want::Gone => assert_eq!(rec, None, "{p}: a job resurrected its record"),
            Want::File(text) => {
                let fs = ws.fs_path(p);
                assert_eq!(&std::fs::read_to_string(&fs).unwrap(), text, "{p}");
                let v = source_version(&std::fs::metadata(&fs).unwrap());
                assert_eq!(rec, Some(v), "{p}: record is missing or stale");
            }
        }
    }
}

#[test]
fn rm_and_mv_race_the_worker_threads() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open(dir.path().join("ws"), "default", "default").unwrap();
    let ops = Ops::open(&ws, &Config::default()).unwrap();
    let workers = WorkerConfig {
        semantic: 2,
        embedding: 4,
        dense: 1,
        session_commit: 0,
    };
    let pool = WorkerPool::start(
        ops.queue().clone(),
        jobs::handlers(&ops, &workers),
        PoolOptions::default(),
    );
    let race = VPath::from_rel("resources/race").unwrap();
    std::fs::create_dir_all(ws.fs_path(&race)).unwrap();
    let mut want = BTreeMap::new();
    for i in 0..120 {
        let p = race.join(&format!("f{i}.md")).unwrap();
        let text = format!("file {i} version one");
        ops.write_file(&p, text.as_bytes()).unwrap();
        match i % 4 {
            0 => {
                ops.rm(&p, false).unwrap();
                want.insert(p, Want::Gone);
            }
            1 => {
                let q = race.join(&format!("m{i}.md")).unwrap();
                ops.mv(&p, &q).unwrap();
                want.insert(p, Want::Gone);
                want.insert(q, Want::File(text));
            }
            2 => {
                // Rewritten while its first job may be running: the newer version must win.
                let text = format!("file {i} version two");
                ops.write_file(&p, text.as_bytes()).unwrap();
                want.insert(p, Want::File(text));
            }
            _ => {
                want.insert(p, Want::File(text));
            }
        }
    }
    pool.stop();
    assert!(ops
        .drain(&workers, Duration::from_secs(120), |_| {})
        .unwrap());
    check_index(&ops, &want);
}

/// The same race across real processes: worker processes (`vikingfs wait`) work the
/// queue while this process writes, removes and moves files through the CLI.
#[test]
fn rm_and_mv_race_worker_processes() {
    let env = ops::Env::new();
    env.ok(&["config", "show"]);
    let race = env.data("resources/race");
    std::fs::create_dir_all(&race).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            let mut cmd = env.cmd(&["wait", "--timeout", "120"]);
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let out = cmd.output().unwrap();
                    assert!(
                        out.status.success(),
                        "{}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            })
        })
        .collect();
    let mut want = BTreeMap::new();
    let write = |uri: &str, text: &str| {
        use std::io::Write;
        let mut c = env.cmd(&["write", uri]);
        c.stdin(std::process::Stdio::piped());
        let mut ch = c.spawn().unwrap();
        ch.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        assert!(ch.wait().unwrap().success(), "write {uri}");
    };
    for i in 0..24 {
        let uri = format!("viking://resources/race/f{i}.md");
        let p = VPath::from_rel(&format!("resources/race/f{i}.md")).unwrap();
        let text = format!("file {i} version one");
        write(&uri, &text);
        match i % 3 {
            0 => {
                env.ok(&["rm", &uri]);
                want.insert(p, Want::Gone);
            }
            1 => {
                let to = format!("viking://resources/race/m{i}.md");
                env.ok(&["mv", &uri, &to]);
                want.insert(p, Want::Gone);
                want.insert(
                    VPath::from_rel(&format!("resources/race/m{i}.md")).unwrap(),
                    Want::File(text),
                );
            }
            _ => {
                let text = format!("file {i} version two");
                write(&uri, &text);
                want.insert(p, Want::File(text));
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.join().unwrap();
    }
    env.drain();
    let ws = Workspace::open(env.ws(), "default", "default").unwrap();
    let ops = Ops::open(&ws, &Config::default()).unwrap();
    check_index(&ops, &want);
    env.check_fsck_clean();
}
