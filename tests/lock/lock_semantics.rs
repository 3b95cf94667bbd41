//! The lock engine's semantics through its public API: the conflict table in every on-disk
//! shape (existing file, directory, missing path), nesting, batches, mv, corrupt and foreign
//! tokens, stale takeover, refresh, and release on every path out.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vikingfs::config::LockConfig;
use vikingfs::lock::{codec, resolver, LockError, LockKind, LockManager};
use vikingfs::uri::VPath;
use vikingfs::workspace::Workspace;

use LockKind::{Exact, Tree};

fn setup(expire: Duration) -> (tempfile::TempDir, Workspace, Arc<LockManager>) {
    let d = tempfile::tempdir().unwrap();
    let ws = Workspace::open(d.path(), "default", "default").unwrap();
    let m = LockManager::new(
        &ws,
        LockConfig {
            timeout: Duration::ZERO,
            expire,
        },
    )
    .unwrap();
    (d, ws, m)
}

fn vp(ws: &Workspace, rel: &str) -> VPath {
    ws.parse_uri(&format!("viking://{rel}")).unwrap()
}

fn lock_files(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else if resolver::is_lock_name(name.as_bytes()) {
                out.push(e.path().to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

/// The shapes a locked path can have on disk when the lock is taken.
#[derive(Clone, Copy, Debug)]
enum Shape {
    File,
    Dir,
    Missing,
}

fn make(ws: &Workspace, rel: &str, shape: Shape) {
    let p = ws.data_root().join(rel);
    match shape {
        Shape::File => {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, b"x").unwrap();
        }
        Shape::Dir => std::fs::create_dir_all(&p).unwrap(),
        Shape::Missing => {}
    }
}

/// Held lock vs wanted lock, for same path / wanted below held / wanted above held, with the
/// lower path a file, a directory or missing. Two managers stand for two processes (their
/// conflicts go through the disk protocol); one manager's two handles for two threads.
#[test]
fn conflict_table_in_every_shape() {
    let relations = [
        ("resources/x", "resources/x"),     // same path
        ("resources/x", "resources/x/y/z"), // wanted below held
        ("resources/x/y/z", "resources/x"), // wanted above held
        ("resources/x", "resources/xy"),    // sibling with a common prefix
    ];
    for (held_rel, want_rel) in relations {
        for hk in [Exact, Tree] {
            for wk in [Exact, Tree] {
                for shape in [Shape::File, Shape::Dir, Shape::Missing] {
                    for two_processes in [true, false] {
                        let (_d, ws, m1) = setup(Duration::from_secs(30));
                        let m2 = if two_processes {
                            LockManager::new(&ws, m1.config().clone()).unwrap()
                        } else {
                            m1.clone()
                        };
                        let deeper = if held_rel.len() > want_rel.len() {
                            held_rel
                        } else {
                            want_rel
                        };
                        if held_rel != want_rel || !matches!(shape, Shape::Missing) {
                            make(&ws, deeper, shape);
                        }
                        let (h, w) = (vp(&ws, held_rel), vp(&ws, want_rel));
                        let expect = vikingfs::lock::conflicts(&h, hk, &w, wk);
                        let g = m1.acquire(&[(h.clone(), hk)], Duration::ZERO).unwrap();
                        let ctx = format!(
                            "held {hk} {held_rel}, want {wk} {want_rel}, {shape:?}, two={two_processes}"
                        );
                        match m2.acquire(&[(w.clone(), wk)], Duration::ZERO) {
                            Ok(g2) => {
                                assert!(!expect, "{ctx}: should conflict");
                                drop(g2);
                            }
                            Err(LockError::Busy { owner, .. }) => {
                                assert!(expect, "{ctx}: should not conflict");
                                assert_eq!(owner, g.owner(), "{ctx}");
                            }
                            Err(e) => panic!("{ctx}: {e}"),
                        }
                        drop(g);
                        assert!(lock_files(&ws.data_root()).is_empty(), "{ctx}: leftovers");
                        // Once released, the wanted lock is free.
                        m2.acquire(&[(w, wk)], Duration::ZERO).unwrap();
                    }
                }
            }
        }
    }
}

#[test]
fn guards_can_move_between_threads() {
    fn send<T: Send>() {}
    send::<vikingfs::lock::LockGuard>();
    send::<Arc<LockManager>>();
}

#[test]
fn files_are_named_as_openviking_names_them() {
    let (_d, ws, m) = setup(Duration::from_secs(30));
    let root = ws.data_root();
    let p = vp(&ws, "resources/a/b.md");
    let g = m.exact(&p).unwrap();
    let name = resolver::exact_file_name("/local/default/resources/a/b.md", "b.md");
    assert_eq!(g.files(), vec![root.join("resources/a").join(&name)]);
    let token = std::fs::read_to_string(&g.files()[0]).unwrap();
    assert!(token.starts_with(&format!("{}:", g.owner())), "{token}");
    assert!(token.ends_with(":E"), "{token}");
    drop(g);
    // TREE on a directory: {dir}/.path.ovlock with a T token.
    let g = m.tree(&vp(&ws, "resources/a")).unwrap();
    assert_eq!(g.files(), vec![root.join("resources/a/.path.ovlock")]);
    drop(g);
    // TREE on an existing file: the file's sidecar, with a T token.
    make(&ws, "resources/a/b.md", Shape::File);
    let g = m.tree(&p).unwrap();
    assert_eq!(g.files(), vec![root.join("resources/a").join(&name)]);
    assert!(std::fs::read_to_string(&g.files()[0])
        .unwrap()
        .ends_with(":T"));
    drop(g);
    // EXACT on an existing directory: its .path.ovlock with an E token.
    let g = m.exact(&vp(&ws, "resources/a")).unwrap();
    assert_eq!(g.files(), vec![root.join("resources/a/.path.ovlock")]);
    drop(g);
    // TREE on a missing path creates the directory after checking.
    let g = m.tree(&vp(&ws, "resources/new/deep")).unwrap();
    assert!(root.join("resources/new/deep/.path.ovlock").is_file());
    drop(g);
    assert!(lock_files(&root).is_empty());
}

#[test]
fn exact_checks_both_candidate_files() {
    let (_d, ws, m) = setup(Duration::from_secs(30));
    let p = vp(&ws, "resources/d");
    // A foreign peer holds the directory form ({d}/.path.ovlock) of the path.
    make(&ws, "resources/d", Shape::Dir);
    let dl = ws.data_root().join("resources/d/.path.ovlock");
    std::fs::write(&dl, format!("peer-rust-1:{}:E", codec::now_ns())).unwrap();
    assert!(matches!(m.exact(&p), Err(LockError::Busy { owner, .. }) if owner == "peer-rust-1"));
    std::fs::remove_file(&dl).unwrap();
    // And the sidecar form (left from when the path was a file), while it is a directory.
    let side = ws
        .data_root()
        .join("resources")
        .join(resolver::exact_file_name("/local/default/resources/d", "d"));
    std::fs::write(
        &side,
        format!("6f1c2a4e-8a8b-4c1e-9d57-0d7b1c9f3e21:{}:E", codec::now_ns()),
    )
    .unwrap();
    assert!(matches!(m.exact(&p), Err(LockError::Busy { .. })));
    assert!(matches!(m.tree(&p), Err(LockError::Busy { .. })));
}

#[test]
fn corrupt_and_empty_tokens_are_held_never_deleted() {
    let (_d, ws, m) = setup(Duration::from_secs(30));
    make(&ws, "resources/c", Shape::Dir);
    let f = ws.data_root().join("resources/c/.path.ovlock");
    std::fs::write(&f, "not a token").unwrap();
    match m.tree(&vp(&ws, "resources/c")) {
        Err(LockError::CorruptToken { file, content }) => {
            assert_eq!(file, f);
            assert_eq!(content, "not a token");
        }
        r => panic!("{r:?}"),
    }
    // Below it (as an ancestor) and above it (as a descendant) too.
    assert!(matches!(
        m.exact(&vp(&ws, "resources/c/x")),
        Err(LockError::CorruptToken { .. })
    ));
    assert!(matches!(
        m.tree(&vp(&ws, "resources")),
        Err(LockError::CorruptToken { .. })
    ));
    assert_eq!(m.clear_stale().unwrap(), 0);
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "not a token");
    let l = m.list().unwrap();
    assert_eq!(l.len(), 1);
    assert!(!l[0].stale && l[0].stale_reason.as_deref().unwrap().contains("corrupt"));
    // An empty lock file is a holder midway through writing: held.
    std::fs::write(&f, "").unwrap();
    assert!(matches!(
        m.tree(&vp(&ws, "resources/c")),
        Err(LockError::Busy { .. })
    ));
}

#[test]
fn lock_below_a_file_is_a_clear_error() {
    let (_d, ws, m) = setup(Duration::from_secs(30));
    make(&ws, "resources/f.txt", Shape::File);
    for k in [Exact, Tree] {
        match m.acquire(&[(vp(&ws, "resources/f.txt/x/y"), k)], Duration::ZERO) {
            Err(e @ LockError::NotADirectory { .. }) => {
                assert!(e.to_string().contains("viking://resources/f.txt"), "{e}")
            }
            r => panic!("{r:?}"),
        }
    }
    assert!(lock_files(&ws.data_root()).is_empty());
}

#[test]
fn foreign_tokens_expire_and_are_taken_over_by_cas() {
    let (_d, ws, m) = setup(Duration::from_secs(30));
    make(&ws, "resources/s", Shape::Dir);
    let f = ws.data_root().join("resources/s/.path.ovlock");
    let fresh = format!("peer-rust-1:{}:T", codec::now_ns());
    std::fs::write(&f, &fresh).unwrap();
    assert!(matches!(
        m.exact(&vp(&ws, "resources/s/x")),
        Err(LockError::Busy { kind: Tree, .. })
    ));
    // 31 s old: stale for a foreign owner. Taken over in place (same inode).
    let old = format!("peer-rust-1:{}:T", codec::now_ns() - 31_000_000_000);
    std::fs::write(&f, &old).unwrap();
    let info = m.list().unwrap();
    assert!(
        info[0].stale
            && info[0]
                .stale_reason
                .as_deref()
                .unwrap()
                .contains("not refreshed")
    );
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(&f).unwrap().ino();
    let g = m.tree(&vp(&ws, "resources/s")).unwrap();
    assert_eq!(std::fs::metadata(&f).unwrap().ino(), ino);
    assert!(std::fs::read_to_string(&f).unwrap().starts_with(g.owner()));
    drop(g);
    // A dead local owner is stale at once, whatever its token's age.
    let dead = format!(
        "vfs-{}-4194400-1-1:{}:E",
        vikingfs::process::host_id(),
        codec::now_ns()
    );
    std::fs::write(&f, &dead).unwrap();
    assert_eq!(m.clear_stale().unwrap(), 1);
    assert!(!f.exists());
}

#[test]
fn nested_exact_under_own_tree_and_batches() {
    let (_d, ws, m) = setup(Duration::from_secs(30));
    let dir = vp(&ws, "resources/n");
    let t = m.tree(&dir).unwrap();
    let inner = t.nested(&[(vp(&ws, "resources/n/a.md"), Exact)]).unwrap();
    // Another handle still conflicts with both.
    assert!(m.exact(&vp(&ws, "resources/n/a.md")).is_err());
    // Nested on the tree root itself is already held by this owner.
    let same = t.nested(&[(dir.clone(), Exact)]).unwrap();
    assert!(same.files().is_empty());
    drop(same);
    drop(inner);
    drop(t);
    // Batches de-duplicate, TREE winning, and take all or nothing.
    let g = m
        .acquire(
            &[
                (dir.clone(), Exact),
                (dir.clone(), Tree),
                (vp(&ws, "resources/o"), Exact),
            ],
            Duration::ZERO,
        )
        .unwrap();
    assert_eq!(g.files().len(), 2);
    assert!(std::fs::read_to_string(&g.files()[0])
        .unwrap()
        .ends_with(":T"));
    let blocker = m.exact(&vp(&ws, "resources/p")).unwrap();
    let r = m.acquire(
        &[
            (vp(&ws, "resources/q"), Exact),
            (vp(&ws, "resources/p"), Exact),
        ],
        Duration::ZERO,
    );
    assert!(matches!(r, Err(LockError::Busy { .. })));
    drop((g, blocker));
    assert!(lock_files(&ws.data_root()).is_empty());
    // mv: directory = TREE src + EXACT dst; file = EXACT both.
    make(&ws, "resources/m/sub", Shape::Dir);
    let g = m
        .mv(&vp(&ws, "resources/m"), &vp(&ws, "resources/m2"), true)
        .unwrap();
    assert!(m.exact(&vp(&ws, "resources/m/sub/f")).is_err());
    assert!(m.exact(&vp(&ws, "resources/m2")).is_err());
    assert!(m.exact(&vp(&ws, "resources/other")).is_ok());
    drop(g);
    let g = m
        .mv(&vp(&ws, "resources/m/f"), &vp(&ws, "resources/g"), false)
        .unwrap();
    assert!(m.exact(&vp(&ws, "resources/m/other")).is_ok());
    drop(g);
}

#[test]
fn released_on_panic_and_waiters_wake() {
    let (_d, ws, m) = setup(Duration::from_secs(30));
    let p = vp(&ws, "resources/w");
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _g = m.exact(&p).unwrap();
        panic!("boom");
    }));
    assert!(r.is_err());
    assert!(lock_files(&ws.data_root()).is_empty());

    let g = m.tree(&p).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let m2 = m.clone();
    let p2 = vp(&ws, "resources/w/inner");
    let waiter = std::thread::spawn(move || {
        tx.send(()).unwrap();
        let t0 = Instant::now();
        let g = m2.acquire(&[(p2, Exact)], Duration::from_secs(60)).unwrap();
        (t0.elapsed(), g.owner().to_string())
    });
    rx.recv().unwrap();
    let released_at = Instant::now();
    drop(g);
    let (_, owner) = waiter.join().unwrap();
    assert!(!owner.is_empty());
    assert!(released_at.elapsed() < Duration::from_secs(30));
}

#[test]
fn refresh_keeps_tokens_fresh() {
    // lock_expire 600 ms: the refresh thread rewrites every 200 ms.
    let (_d, ws, m) = setup(Duration::from_millis(600));
    let g = m.exact(&vp(&ws, "resources/r")).unwrap();
    let f = g.files()[0].clone();
    let first = std::fs::read_to_string(&f).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = 0;
    // Wait until we have seen two refreshes, checking the token never aged past expire.
    let mut last = first.clone();
    while seen < 2 {
        assert!(Instant::now() < deadline, "token never refreshed");
        let now = std::fs::read_to_string(&f).unwrap();
        // An empty read is a rewrite midway; a different token is a refresh.
        if !now.is_empty() && now != last {
            seen += 1;
            assert!(now.starts_with(g.owner()));
            last = now;
        }
        std::thread::yield_now();
    }
    g.release().unwrap();
    assert!(!f.exists());
}

/// Lock files of a path whose lock file path is longer than PATH_MAX, even relative to the
/// data root: the engine names them relative to descriptors, walking the path in chunks.
/// Exclusion between two managers and cleanup on release hold there as anywhere.
#[test]
fn paths_beyond_path_max_lock_and_release() {
    let (_d, ws, a) = setup(Duration::from_secs(30));
    let b = LockManager::new(&ws, LockConfig::default()).unwrap();
    // 20 components of 230 bytes: ~4.6 KB below the data root.
    let comp = "d".repeat(230);
    let dir_rel = format!("resources/{}", vec![comp.as_str(); 20].join("/"));
    assert!(dir_rel.len() > vikingfs::sys::PATH_MAX);
    let root = vikingfs::sys::DataRoot::open(&ws.data_root()).unwrap();
    let dir_fd = root.make_dir_all(dir_rel.as_bytes()).unwrap();
    let name = "f".repeat(200);
    let flags =
        vikingfs::sys::OFlags::CREATE | vikingfs::sys::OFlags::EXCL | vikingfs::sys::OFlags::WRONLY;
    drop(vikingfs::sys::openat(&dir_fd, name.as_str(), flags, 0o644).unwrap());
    let file = vp(&ws, &format!("{dir_rel}/{name}"));
    let dir = vp(&ws, &dir_rel);

    let g = a.exact(&file).unwrap();
    let held = a.list().unwrap();
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].uri, file.uri());
    assert!(matches!(b.exact(&file), Err(LockError::Busy { .. })));
    assert!(
        matches!(b.tree(&dir), Err(LockError::Busy { .. })),
        "a TREE above sees the EXACT below"
    );
    g.release().unwrap();
    assert!(a.list().unwrap().is_empty(), "released lock file removed");

    let t = b.tree(&dir).unwrap();
    assert!(matches!(a.exact(&file), Err(LockError::Busy { .. })));
    drop(t);
    // A missing path below: the lock makes the directory its lock file needs.
    let deeper = vp(&ws, &format!("{dir_rel}/new/{}", "g".repeat(200)));
    drop(a.exact(&deeper).unwrap());
    let new_dir = format!("{dir_rel}/new");
    assert!(root.lstat(new_dir.as_bytes()).unwrap().is_dir());
    assert!(a.list().unwrap().is_empty());
}
