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
);

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
