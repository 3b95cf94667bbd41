//! Many real processes (each with two threads) contend on overlapping EXACT and TREE paths.
//! Every holder appends `enter`/`exit` records to one O_APPEND log while it holds its lock; a
//! checker replays the log and proves no two conflicting holders were ever inside together.

use std::io::Write;
use std::process::Command;
use std::time::Duration;

use rand::Rng;
use vikingfs::config::LockConfig;
use vikingfs::lock::{conflicts, LockKind, LockManager};
use vikingfs::uri::VPath;
use vikingfs::workspace::Workspace;

const CHILD_ENV: &str = "VIKINGFS_LOCK_TEST_CHILD";
const PROCS: usize = 6;
const THREADS: usize = 2;
const ROUNDS: usize = 25;

const PATHS: [&str; 6] = [
    "resources/p",
    "resources/p/q",
    "resources/p/q/f.md",
    "resources/p/r.md",
    "resources/p/q2",
    "resources/s.md",
];

fn child(ws_dir: &str, log: &str, id: &str) {
    let ws = Workspace::open(ws_dir, "default", "default").unwrap();
    let m = LockManager::new(
        &ws,
        LockConfig {
            timeout: Duration::from_secs(120),
            expire: Duration::from_secs(30),
        },
    )
    .unwrap();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (m, ws) = (&m, &ws);
            s.spawn(move || {
                let mut rng = rand::rng();
                let mut f = std::fs::OpenOptions::new().append(true).open(log).unwrap();
                for _ in 0..ROUNDS {
                    let n = rng.random_range(1..=2);
                    let reqs: Vec<(VPath, LockKind)> = (0..n)
                        .map(|_| {
                            let p = PATHS[rng.random_range(0..PATHS.len())];
                            let k = if rng.random_bool(0.4) {
                                LockKind::Tree
                            } else {
                                LockKind::Exact
                            };
                            (ws.parse_uri(&format!("viking://{p}")).unwrap(), k)
                        })
                        .collect();
                    let g = m.acquire(&reqs, Duration::from_secs(120)).unwrap();
                    let desc: Vec<String> = reqs
                        .iter()
                        .map(|(p, k)| format!("{}={}", p.as_str(), k.as_str()))
                        .collect();
                    let who = format!("{id}.{t}");
                    // One write(2) per record: O_APPEND keeps records whole and ordered.
                    f.write_all(format!("enter {who} {}\n", desc.join(",")).as_bytes())
                        .unwrap();
                    for _ in 0..rng.random_range(0..2000) {
                        std::hint::black_box(rng.random::<u64>());
                    }
                    std::thread::yield_now();
                    f.write_all(format!("exit {who}\n").as_bytes()).unwrap();
                    drop(g);
                }
            });
        }
    });
}

#[test]
fn processes_never_overlap_on_conflicting_locks() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let mut it = spec.splitn(3, '|');
        let (ws, log, id) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
        child(ws, log, id);
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let ws_dir = d.path().join("ws");
    let ws = Workspace::open(&ws_dir, "default", "default").unwrap();
    let log = d.path().join("log");
    std::fs::write(&log, "").unwrap();
    let exe = std::env::current_exe().unwrap();
    let kids: Vec<_> = (0..PROCS)
        .map(|i| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "lock_multiproc::processes_never_overlap_on_conflicting_locks",
                    "--nocapture",
                ])
                .env(
                    CHILD_ENV,
                    format!("{}|{}|{i}", ws_dir.display(), log.display()),
                )
                .spawn()
                .unwrap()
        })
        .collect();
    for mut k in kids {
        assert!(k.wait().unwrap().success(), "a contender failed");
    }

    // Replay: the set inside at each point of the log must be pairwise compatible.
    let text = std::fs::read_to_string(&log).unwrap();
    let mut inside: Vec<(String, Vec<(VPath, LockKind)>)> = Vec::new();
    let (mut enters, mut exits, mut overlaps_seen) = (0, 0, 0);
    for line in text.lines() {
        let mut w = line.split(' ');
        match (w.next(), w.next(), w.next()) {
            (Some("enter"), Some(who), Some(desc)) => {
                let mine: Vec<(VPath, LockKind)> = desc
                    .split(',')
                    .map(|e| {
                        let (p, k) = e.split_once('=').unwrap();
                        let k = if k == "tree" {
                            LockKind::Tree
                        } else {
                            LockKind::Exact
                        };
                        (VPath::from_rel(p).unwrap(), k)
                    })
                    .collect();
                for (other, theirs) in &inside {
                    for (a, ka) in &mine {
                        for (b, kb) in theirs {
                            assert!(
                                !conflicts(a, *ka, b, *kb),
                                "{who} took {a} ({ka}) while {other} held {b} ({kb})"
                            );
                        }
                    }
                }
                if !inside.is_empty() {
                    overlaps_seen += 1;
                }
                inside.push((who.to_string(), mine));
                enters += 1;
            }
            (Some("exit"), Some(who), None) => {
                let i = inside
                    .iter()
                    .position(|(w, _)| w == who)
                    .expect("exit without enter");
                inside.remove(i);
                exits += 1;
            }
            _ => panic!("torn log record {line:?}"),
        }
    }
    assert_eq!(enters, PROCS * THREADS * ROUNDS);
    assert_eq!(exits, enters);
    // Compatible holders did run side by side: the locks are not one global mutex.
    assert!(
        overlaps_seen > 0,
        "no two holders were ever inside together"
    );
    let m = LockManager::new(&ws, LockConfig::default()).unwrap();
    assert!(m.list().unwrap().is_empty(), "lock files left behind");
}
