//! Property test: random acquire/release sequences from two managers (two "processes", whose
//! conflicts go through the on-disk protocol) and several handles each, against a reference
//! model of the conflict table written independently of the engine.

use std::time::Duration;

use proptest::prelude::*;
use vikingfs::config::LockConfig;
use vikingfs::lock::{LockError, LockGuard, LockKind, LockManager};
use vikingfs::workspace::Workspace;

const PATHS: [&str; 7] = [
    "resources",
    "resources/a",
    "resources/a/b",
    "resources/a/b/c.md",
    "resources/a/bc",
    "resources/d.md",
    "agent/x",
];

/// The reference: `held` blocks `want` when they are the same path, or one lies below the other
/// and the upper one is a TREE. Written over component lists, not the engine's VPath logic.
fn model_conflict(held: &str, hk: LockKind, want: &str, wk: LockKind) -> bool {
    let h: Vec<&str> = held.split('/').collect();
    let w: Vec<&str> = want.split('/').collect();
    let n = h.len().min(w.len());
    if h[..n] != w[..n] {
        return false;
    }
    match h.len().cmp(&w.len()) {
        std::cmp::Ordering::Equal => true,
        std::cmp::Ordering::Less => hk == LockKind::Tree,
        std::cmp::Ordering::Greater => wk == LockKind::Tree,
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// Manager index, requests (path index, tree?).
    Acquire(usize, Vec<(usize, bool)>),
    /// Release the n-th live guard (modulo their number).
    Release(usize),
    /// Create a regular file or a directory at a path before the next locks.
    Make(usize, bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..2usize, prop::collection::vec((0..PATHS.len(), any::<bool>()), 1..3))
            .prop_map(|(m, r)| Op::Acquire(m, r)),
        3 => any::<usize>().prop_map(Op::Release),
        1 => (0..PATHS.len(), any::<bool>()).prop_map(|(p, d)| Op::Make(p, d)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn engine_matches_the_conflict_table(ops in prop::collection::vec(op(), 1..40)) {
        let d = tempfile::tempdir().unwrap();
        let ws = Workspace::open(d.path(), "default", "default").unwrap();
        let cfg = LockConfig { timeout: Duration::ZERO, expire: Duration::from_secs(30) };
        let mgrs = [LockManager::new(&ws, cfg.clone()).unwrap(), LockManager::new(&ws, cfg).unwrap()];
        // Live guards with what the model says they hold.
        let mut live: Vec<(LockGuard, Vec<(&str, LockKind)>)> = Vec::new();
        for op in ops {
            match op {
                Op::Acquire(m, reqs) => {
                    let want: Vec<(&str, LockKind)> = reqs.iter()
                        .map(|&(p, t)| (PATHS[p], if t { LockKind::Tree } else { LockKind::Exact }))
                        .collect();
                    let expect_busy = live.iter().any(|(_, held)| held.iter().any(|&(hp, hk)|
                        want.iter().any(|&(wp, wk)| model_conflict(hp, hk, wp, wk))));
                    let vreqs: Vec<_> = want.iter()
                        .map(|&(p, k)| (ws.parse_uri(&format!("viking://{p}")).unwrap(), k))
                        .collect();
                    match mgrs[m].acquire(&vreqs, Duration::ZERO) {
                        Ok(g) => {
                            prop_assert!(!expect_busy, "acquired {want:?} while the model holds {:?}",
                                live.iter().map(|l| &l.1).collect::<Vec<_>>());
                            live.push((g, want));
                        }
                        Err(LockError::Busy { .. }) => prop_assert!(expect_busy, "busy on {want:?}"),
                        // A lock below a regular file made by Op::Make.
                        Err(LockError::NotADirectory { .. }) => {}
                        Err(e) => prop_assert!(false, "{e}"),
                    }
                }
                Op::Release(i) if !live.is_empty() => {
                    let (g, _) = live.remove(i % live.len());
                    g.release().unwrap();
                }
                Op::Release(_) => {}
                Op::Make(p, dir) => {
                    let f = ws.data_root().join(PATHS[p]);
                    if !f.exists() && f.parent().unwrap().is_dir() {
                        if dir { std::fs::create_dir(&f).unwrap() } else { std::fs::write(&f, b"x").unwrap() }
                    }
                }
            }
        }
        drop(live);
        prop_assert!(mgrs[0].list().unwrap().is_empty(), "lock files left after every release");
    }
}
