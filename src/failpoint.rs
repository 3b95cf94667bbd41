//! Named crash points for the crash-matrix tests.
//!
//! Built with `--features failpoints`, `crash_point!("name")` aborts the process at once (no
//! unwinding, no destructors: like `kill -9`) when `VIKINGFS_CRASH_AT=name`. Without the feature
//! it compiles to nothing. Every name must be listed in [`POINTS`] (in firing order, with its
//! meaning); [`ALL`], its names, is what `vikingfs debug failpoints` prints and a test checks
//! against the sources.

/// The crash points: each name with what has happened when the process dies there.
macro_rules! points {
    ($($name:literal => $meaning:literal,)*) => {
        /// Every crash point in the code base with its meaning, grouped by operation and, within
        /// each group, in the order the points fire (docs/ops.md describes each operation's
        /// steps).
        pub const POINTS: &[(&str, &str)] = &[$(($name, $meaning)),*];
        /// The names of [`POINTS`], in the same order. Tests compare the set, not the order.
        pub const ALL: &[&str] = &[$($name),*];
    };
}

points! {
    // ops::rm (src/ops/rm.rs): lock → intent (spooled when the content is kept, else
    // journalled) → path removed → (after the reply, in a batch: src/ops/settle.rs) records
    // deleted → intents closed with the history entries → locks released.
    // A file without records and nothing kept takes no intent: locked → removed.
    "rm.locked" => "EXACT/TREE lock held, path re-checked; nothing changed yet",
    "rm.intent" => "rm intent spooled or journalled; records and path still there",
    "rm.removed" => "path renamed into the history (or unlinked, or into .vikingfs/tmp); records and intent still there",
    "rm.index_deleted" => "records under the path deleted (a batch's); intent still open",
    // journal::spool (src/journal/mod.rs): a dead process's spooled intents journalled by
    // the next recovery → its spool file deleted → the intents finished as any.
    "intents.replayed" => "a dead process's open spooled intents journalled; its spool file still there",
    // ops::history (src/ops/history.rs): a replaced version kept (link, reflink or copy) →
    // its entry recorded → the overwrite goes on.
    "history.kept" => "the version an overwrite replaces kept; no entry yet, nothing replaced",
    // session::rollback (src/session/rollback.rs): per memory file, lines out → the archive marked.
    "rollback.rewritten" => "a memory file's lines of the commit taken out; the archive not marked",
    // ops::undo (src/ops/undo.rs): lock → plan journalled (intent) → per version: a whole
    // copy made in a temporary beside its target → renamed into place → jobs queued →
    // entries recorded with the intent's close. Recovery finishes the plan.
    "undo.planned" => "the undo's plan journalled (intent) under the lock; nothing copied yet",
    "undo.made" => "a version copied whole into a temporary beside its target (on disk once its round's syncfs ran); not in place",
    "undo.placed" => "a version renamed into place; the rest of the plan not yet",
    "undo.restored" => "every version in place and the jobs queued; intent open, no undo entry yet",
    // ops::mv (src/ops/mv.rs): lock → intent → rename(2) → (through the mount: the reply)
    // → records moved → tail.
    // A file without records takes no intent: locked → (embedding queued) → renamed.
    "mv.locked" => "both locks held, src and dst re-checked; nothing changed yet",
    "mv.intent" => "mv intent journalled; files and records at src",
    "mv.renamed" => "files at dst (a replaced dst's records gone); records still at src",
    "mv.indexed" => "records renamed to dst too; intent open, locks held",
    // ops::add (src/ops/add.rs), then the lifecycle its jobs end (src/ops/lifecycle.rs).
    "add.staged" => "private staging copy made; nothing locked or visible",
    "add.locked" => "target locked (lifecycle TREE/EXACT), intent + lifecycle journalled",
    "add.synced" => "staging synced into the target; no job queued yet",
    "add.enqueued" => "the target's jobs queued as the lifecycle's keys; staging still there",
    "add.unstaged" => "staging removed; intent still open",
    "lifecycle.before_release" => "the lifecycle's last key done; its lock not yet released",
    // ops::write (src/ops/write.rs): lock → old record dropped → jobs queued → atomic write.
    "write.locked" => "EXACT lock held; old record and old content still there",
    "write.enqueued" => "old record deleted and the file's jobs queued; content still old",
    "write.written" => "new content renamed into place; lock still held",
    // index (one transaction per write: a crash leaves the old state whole). Fire inside the
    // write that calls them: a rename in mv (between mv.renamed and mv.indexed), a vector in
    // the dense job (after job.dense.computed), and every write's commit last.
    "index.rename.between_passes" => "rename_prefix: moved records under placeholder names",
    "index.set_vector.before_commit" => "set_vector: vector placed, transaction not committed",
    "index.write.before_commit" => "any index write: chunks flushed, transaction not committed",
    // queue::spool (src/queue/spool.rs): the mount daemon's spool, moved into the queue.
    "spool.flush.before" => "appended requests taken for a flush; none in SQLite yet",
    "spool.flushed" => "the batch committed to the queue; spool not yet marked/truncated",
    // ops::jobs embedding job (src/ops/jobs.rs): read → lock → record written → finished.
    "job.embed.start" => "job claimed, nothing read yet",
    "job.embed.computed" => "source read and compared with its record; no lock taken yet",
    "job.dense.record_written" => "record upserted by put_record; its dense job not queued yet",
    "job.embed.indexed" => "record (and its dense job) written; job not yet finished",
    // ops::jobs dense job: the vector of one record.
    "job.dense.computed" => "vector computed; not yet set (index.set_vector.* follows)",
    // ops::jobs semantic job: summarise → lock → sidecars written → propagate → index.
    "job.semantic.start" => "job claimed, children not read yet",
    "job.semantic.computed" => "summary computed; no lock taken, no sidecar written",
    "job.semantic.written" => "overview and abstract written; parent not queued, not indexed",
    "job.semantic.propagated" => "parent's summary queued (if the abstract changed); not indexed",
    "job.semantic.indexed" => "both summary records written; job not yet finished",
    // ops::derive rederive job (src/ops/derive.rs): a rule file changed.
    "job.rederive.start" => "job claimed; rules not re-read, nothing removed",
    "job.rederive.underived" => "one newly ignored path's records/sidecars removed (per path)",
    // ops::rebuild (src/ops/rebuild.rs)
    "index.rebuild.file" => "one more file reindexed (per file); progress not yet saved",
    // ops::migrate (src/ops/migrate.rs)
    "migrate.copied" => "every store copied to the target and verified; the switch not yet made",
    // session add (src/session/messages.rs)
    "session.add.before_write" => "locks held, jobs queued; the message line not yet appended",
    // session commit phase 1 (src/session/phase1.rs)
    "session.commit.locked" => "session TREE lock held; nothing changed yet",
    "session.commit.marked_preparing" => "pending_commit (Preparing) stored in .meta.json",
    "session.commit.archive_written" => "archive of the prefix written; phase 2 not queued",
    "session.commit.enqueued" => "phase-2 job queued; live file not trimmed",
    "session.commit.marked_trimming" => "pending_commit (Trimming) stored, records forgotten",
    "session.commit.trim_copied" => "kept lines copied to the front; file not truncated",
    "session.commit.trimmed" => "live file trimmed to the kept lines; meta pending",
    "session.commit.ready" => "commit recorded in .meta.json; lock still held",
    // session commit phase 2 (src/session/phase2.rs)
    "session.job.started" => "job running; archive not read",
    "session.job.summarized" => "archive's summary written; memories not extracted",
    "session.job.diff_written" => "memory diff written; memory files not yet",
    "session.job.memory_written" => "one memory file written and queued (per file)",
    "session.job.indexed" => "archive indexed and memories counted; done marker not written",
    "session.job.done" => "done marker written",
}

#[cfg(feature = "failpoints")]
fn armed() -> Option<&'static str> {
    use std::sync::OnceLock;
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            std::env::var("VIKINGFS_CRASH_AT")
                .ok()
                .filter(|s| !s.is_empty())
        })
        .as_deref()
}

/// `VIKINGFS_PAUSE_AT=NAME:MS`: sleep MS milliseconds at point NAME instead (tests that need
/// background work to hold its locks a while, e.g. `job.embed.indexed`).
#[cfg(feature = "failpoints")]
fn paused() -> Option<(&'static str, std::time::Duration)> {
    use std::sync::OnceLock;
    static PAUSED: OnceLock<Option<(String, std::time::Duration)>> = OnceLock::new();
    PAUSED
        .get_or_init(|| {
            let v = std::env::var("VIKINGFS_PAUSE_AT").ok()?;
            let (name, ms) = v.rsplit_once(':')?;
            Some((
                name.to_string(),
                std::time::Duration::from_millis(ms.parse().ok()?),
            ))
        })
        .as_ref()
        .map(|(n, d)| (n.as_str(), *d))
}

/// Abort the process if `name` is the armed crash point (or pause there, see `paused`).
#[inline]
pub fn hit(name: &'static str) {
    #[cfg(feature = "failpoints")]
    if let Some((p, d)) = paused() {
        if p == name {
            std::thread::sleep(d);
        }
    }
    #[cfg(feature = "failpoints")]
    if armed() == Some(name) {
        // stderr is unbuffered: tests look for this line to know the point was reached.
        eprintln!("vikingfs: crash point {name} reached, aborting");
        std::process::abort();
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}

/// `crash_point!("mv.after_copy")`: see the module docs.
#[macro_export]
macro_rules! crash_point {
    ($name:literal) => {
        $crate::failpoint::hit($name)
    };
}

#[cfg(test)]
mod tests {
    /// Every `crash_point!("...")` in src/ is listed in `ALL`, and every listed name is used.
    #[test]
    fn registry_matches_sources() {
        let mut used = Vec::new();
        let mut stack = vec![std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src"
        ))];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("failpoint.rs") {
                    let text = std::fs::read_to_string(&p).unwrap();
                    for part in text.split("crash_point!(\"").skip(1) {
                        used.push(part.split('"').next().unwrap().to_string());
                    }
                }
            }
        }
        used.sort();
        used.dedup();
        let mut all: Vec<String> = super::ALL.iter().map(|s| s.to_string()).collect();
        all.sort();
        assert_eq!(
            used, all,
            "failpoint::ALL must list exactly the crash points in src/"
        );
    }
}
