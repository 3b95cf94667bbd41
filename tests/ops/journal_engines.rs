//! The operations journal on both engines: intents with compare-and-swap claims, lifecycles
//! and their keys, the same on SQLite and on a real PostgreSQL server; two handles (two
//! processes of a host on one SQLite file, two hosts on one server) see one set of rows, and
//! only one of them can take over a dead owner's intent.

use crate::support::backend::{backends, Backend, Db};

use std::path::PathBuf;
use std::sync::Arc;

use vikingfs::journal::postgres::PgJournal;
use vikingfs::journal::{Intent, Journal};
use vikingfs::lock::LockKind;
use vikingfs::pg::Pg;
use vikingfs::uri::VPath;

/// One test's journal database on a backend; [`JournalTest::handle`] opens another handle
/// on it each time.
struct JournalTest {
    db: Db,
    file: PathBuf,
    _dir: tempfile::TempDir,
}

impl JournalTest {
    fn new(backend: Backend) -> JournalTest {
        let dir = tempfile::tempdir().unwrap();
        JournalTest {
            db: backend.start(),
            file: dir.path().join("ops.db"),
            _dir: dir,
        }
    }

    fn handle(&self) -> Journal {
        match self.db.dsn() {
            None => Journal::open(&self.file).unwrap(),
            Some(dsn) => {
                let pg = Arc::new(Pg::connect(&dsn).unwrap());
                Journal::with_engine(Box::new(PgJournal::open(pg).unwrap()))
            }
        }
    }
}

backends!(
    the_journal_rules_hold,
    two_handles_share_one_journal_and_one_takes_over_a_dead_owners_intent,
    history_entries_go_with_their_intents_close_and_list_by_prefix,
    content_that_cannot_be_hashed_is_marked_and_passed_over,
);

/// The history's rows, the same on every backend: an entry is committed with its intent's
/// close (one transaction), listed newest first for a path and everything under it (not a
/// sibling sharing its prefix), with every field as written, and forgotten by id.
fn history_entries_go_with_their_intents_close_and_list_by_prefix(backend: Backend) {
    let t = JournalTest::new(backend);
    let j = t.handle();
    let entry = |path: &str, blob: Option<&str>| vikingfs::journal::Entry {
        op: "rm".into(),
        path: path.into(),
        new_path: None,
        born_ms: None,
        kind: "file".into(),
        size: 42,
        blob: blob.map(String::from),
        reason: blob.is_none().then(|| "disk full".to_string()),
        mode: 0o100644,
        uid: 1000,
        gid: 100,
        pid: Some(4242),
        cmd: Some("rm -rf d".into()),
    };
    let rm = |path: &str| Intent::Rm {
        path: path.into(),
        dir: false,
        blob: Some("b".into()),
    };
    let a = j.begin(&rm("resources/d/a.md"), "vfs-h-1").unwrap();
    let b = j.begin(&rm("resources/d/b.md"), "vfs-h-1").unwrap();
    let written = [
        entry("resources/d/a.md", Some("blob-a")),
        entry("resources/d/b.md", None),
    ];
    j.finish_recording(&[a, b], &written).unwrap();
    assert!(
        j.intents().unwrap().is_empty(),
        "the intents closed with it"
    );
    j.record(&[entry("resources/dd/c.md", Some("blob-c"))])
        .unwrap();
    let d = VPath::from_rel("resources/d").unwrap();
    let under = j.history(Some(&d), 0).unwrap();
    let paths: Vec<&str> = under.iter().map(|r| r.entry.path.as_str()).collect();
    assert_eq!(
        paths,
        ["resources/d/b.md", "resources/d/a.md"],
        "newest first, no sibling"
    );
    assert_eq!(under[1].entry, written[0]);
    assert_eq!(under[0].entry, written[1]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(
        (under[0].at_ms - now).abs() < 60_000,
        "times are ms since the epoch"
    );
    assert!(j.history(Some(&d), now + 60_000).unwrap().is_empty());
    let all = j.history(None, 0).unwrap();
    assert_eq!(all.len(), 3);
    j.forget_history(&[all[0].id, all[2].id]).unwrap();
    let left = j.history(None, 0).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].entry.path, "resources/d/b.md");
}

/// An entry whose content the hashing job could not read is marked with why: it is not
/// handed to the job again (the others are), it lists with its reason and no hash, a hash
/// set later replaces the mark, and a move to another store keeps the mark.
fn content_that_cannot_be_hashed_is_marked_and_passed_over(backend: Backend) {
    let t = JournalTest::new(backend);
    let j = t.handle();
    let entry = |path: &str, blob: &str| vikingfs::journal::Entry {
        op: "rm".into(),
        path: path.into(),
        new_path: None,
        born_ms: None,
        kind: "file".into(),
        size: 1,
        blob: Some(blob.into()),
        reason: None,
        mode: 0o100644,
        uid: 0,
        gid: 0,
        pid: None,
        cmd: None,
    };
    j.record(&[
        entry("resources/a", "ba"),
        entry("resources/b", "bb"),
        entry("resources/c", "bc"),
    ])
    .unwrap();
    let ids: Vec<i64> = j.unhashed(10).unwrap().iter().map(|(id, _)| *id).collect();
    assert_eq!(ids.len(), 3);
    let why = "Permission denied (os error 13)";
    j.set_hash_failures(&[(ids[1], why.into())]).unwrap();
    let left: Vec<String> = j
        .unhashed(10)
        .unwrap()
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    assert_eq!(left, ["ba", "bc"], "the marked one is passed over");
    let of = |j: &Journal, path: &str| {
        j.history(None, 0)
            .unwrap()
            .into_iter()
            .find(|r| r.entry.path == path)
            .unwrap()
    };
    let b = of(&j, "resources/b");
    assert_eq!((b.sha256, b.hash_error.as_deref()), (None, Some(why)));
    // A move to another store (`vikingfs migrate`) keeps the mark.
    let dir = tempfile::tempdir().unwrap();
    let other = Journal::open(&dir.path().join("ops.db")).unwrap();
    other
        .engine()
        .import(&j.engine().export().unwrap())
        .unwrap();
    assert_eq!(of(&other, "resources/b").hash_error.as_deref(), Some(why));
    assert_eq!(other.unhashed(10).unwrap().len(), 2);
    let h = "ab".repeat(32);
    j.set_hashes(&[(ids[1], h.clone())]).unwrap();
    let b = of(&j, "resources/b");
    assert_eq!((b.sha256, b.hash_error), (Some(h), None));
}

fn the_journal_rules_hold(backend: Backend) {
    let t = JournalTest::new(backend);
    rules_hold(&t.handle());
}

/// What every engine must do.
fn rules_hold(j: &Journal) {
    let i = Intent::Mv {
        src: "resources/a".into(),
        dst: "resources/b".into(),
        dir: true,
    };
    let id = j.begin(&i, "p1").unwrap();
    assert_eq!(j.intents().unwrap()[0].1, i);
    assert!(!j.claim(id, "p0", "p2").unwrap(), "wrong owner");
    assert!(j.claim(id, "p1", "p2").unwrap());
    assert_eq!(j.intents_owned().unwrap()[0].owner, "p2");
    j.finish(id).unwrap();
    assert!(j.intents().unwrap().is_empty());

    let t = VPath::from_rel("resources/r").unwrap();
    let add = Intent::Add {
        temp: "/tmp/x".into(),
        target: "resources/r".into(),
        handle: "h1".into(),
        file: false,
        overlay: false,
    };
    let id = j.begin_add(&add, "p1", &t, LockKind::Tree).unwrap();
    j.lifecycle_start("h1", &t, LockKind::Tree, &["a".into(), "b".into()])
        .unwrap();
    // Started again after a crash: nothing doubles.
    j.lifecycle_start("h1", &t, LockKind::Tree, &["a".into()])
        .unwrap();
    assert!(j.lifecycle_add_key("h1", "c").unwrap());
    assert!(!j.lifecycle_add_key("nope", "c").unwrap());
    assert_eq!(j.lifecycle_done_key("h1", "a").unwrap(), 2);
    assert_eq!(j.lifecycle_done_key("h1", "a").unwrap(), 2, "idempotent");
    let lc = j.lifecycle("h1").unwrap().unwrap();
    assert_eq!(
        (lc.pending, lc.kind, lc.target.clone()),
        (2, LockKind::Tree, t.clone())
    );
    assert_eq!(j.lifecycle_of_target(&t).unwrap().as_deref(), Some("h1"));
    j.finish(id).unwrap();
    j.lifecycle_end("h1").unwrap();
    assert!(j.lifecycles().unwrap().is_empty());
    assert!(!j.lifecycle_add_key("h1", "d").unwrap(), "over");
}

/// On PostgreSQL the two handles are two hosts; on SQLite, two processes of one host.
fn two_handles_share_one_journal_and_one_takes_over_a_dead_owners_intent(backend: Backend) {
    let t = JournalTest::new(backend);
    let (a, b) = (t.handle(), t.handle());
    let id = a
        .begin(
            &Intent::Rm {
                path: "resources/x".into(),
                dir: false,
                blob: None,
            },
            "vfs-hostA-1",
        )
        .unwrap();
    assert_eq!(b.intents().unwrap().len(), 1, "host B sees host A's intent");
    // Both hosts find the owner dead and race to finish it: one wins.
    let (wa, wb) = std::thread::scope(|s| {
        let ta = s.spawn(|| a.claim(id, "vfs-hostA-1", "vfs-hostA-2").unwrap());
        let tb = s.spawn(|| b.claim(id, "vfs-hostA-1", "vfs-hostB-1").unwrap());
        (ta.join().unwrap(), tb.join().unwrap())
    });
    assert!(wa ^ wb, "exactly one claim wins: {wa} {wb}");
    b.finish(id).unwrap();
    assert!(a.intents().unwrap().is_empty());
}

/// A journal made before entries had content hashes opens with the column added, its
/// entries kept, and takes hashes from then on.
#[test]
fn a_journal_from_before_hashes_gets_the_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ops.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE history (
                 id INTEGER PRIMARY KEY, created INTEGER NOT NULL, op TEXT NOT NULL,
                 path TEXT NOT NULL, kind TEXT NOT NULL, size INTEGER NOT NULL,
                 blob TEXT, reason TEXT, mode INTEGER NOT NULL, uid INTEGER NOT NULL,
                 gid INTEGER NOT NULL, pid INTEGER, cmd TEXT, new_path TEXT, born INTEGER);
             INSERT INTO history (created, op, path, kind, size, blob, mode, uid, gid)
                 VALUES (5, 'rm', 'resources/old', 'file', 3, 'b1', 420, 0, 0);",
        )
        .unwrap();
    }
    let j = vikingfs::journal::Journal::open(&path).unwrap();
    let h = j.history(None, 0).unwrap();
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].sha256, None);
    assert_eq!(j.unhashed(10).unwrap(), vec![(h[0].id, "b1".to_string())]);
    j.set_hashes(&[(h[0].id, "ab".repeat(32))]).unwrap();
    assert_eq!(
        j.history(None, 0).unwrap()[0].sha256.as_deref(),
        Some(&*"ab".repeat(32))
    );
    assert!(j.unhashed(10).unwrap().is_empty());
}
