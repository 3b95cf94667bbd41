//! Named crash points for the crash-matrix tests.
//!
//! Built with `--features failpoints`, `crash_point!("name")` aborts the process at once (no
//! unwinding, no destructors: like `kill -9`) when `VIKINGFS_CRASH_AT=name`. Without the feature
//! it compiles to nothing. Every name must be listed in [`ALL`], which `vikingfs debug
//! failpoints` prints and a test checks against the sources.

/// Every crash point in the code base, grouped by operation. Keep sorted within a group.
pub const ALL: &[&str] = &[
    // index (one SQLite transaction per write: a crash leaves the old state whole)
    "index.rename.between_passes",
    "index.set_vector.before_commit",
    "index.write.before_commit",
    // queue::spool
    "spool.flush.before",
    "spool.flushed",
    // ops::add
    "add.enqueued",
    "add.locked",
    "add.staged",
    "add.synced",
    "add.unstaged",
    // ops::jobs (embedding)
    "job.dense.computed",
    "job.dense.record_written",
    "job.embed.computed",
    "job.embed.indexed",
    "job.embed.start",
    // ops::jobs (semantic)
    "job.semantic.computed",
    "job.semantic.indexed",
    "job.semantic.propagated",
    "job.semantic.start",
    "job.semantic.written",
    // ops::derive (rederive)
    "job.rederive.start",
    "job.rederive.underived",
    // ops::rebuild
    "index.rebuild.file",
    // ops::lifecycle
    "lifecycle.before_release",
    // ops::migrate (the copy done, the switch not yet made)
    "migrate.copied",
    // ops::mv
    "mv.indexed",
    "mv.intent",
    "mv.locked",
    "mv.renamed",
    // ops::rm
    "rm.index_deleted",
    "rm.intent",
    "rm.locked",
    "rm.removed",
    // ops::write
    "write.enqueued",
    "write.locked",
    "write.written",
    // session add (src/session/messages.rs)
    "session.add.before_write",
    // session commit phase 1 (src/session/phase1.rs)
    "session.commit.archive_written",
    "session.commit.enqueued",
    "session.commit.locked",
    "session.commit.marked_preparing",
    "session.commit.marked_trimming",
    "session.commit.ready",
    "session.commit.trim_copied",
    "session.commit.trimmed",
    // session commit phase 2 (src/session/phase2.rs)
    "session.job.diff_written",
    "session.job.done",
    "session.job.indexed",
    "session.job.memory_written",
    "session.job.started",
    "session.job.summarized",
];

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

/// Abort the process if `name` is the armed crash point (or pause there, see [`paused`]).
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
