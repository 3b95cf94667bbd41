//! The spool: jobs queued from a latency-sensitive path (the mount's create, rename, unlink)
//! as one append(2) each, moved into the database in batches by a flusher thread.
//!
//! A FUSE request that queues a job must not wait for a SQLite commit, nor for another
//! process's write lock on the database (which can last up to the busy timeout). So the daemon
//! appends each batch of jobs as one line to its spool file, `QUEUE_DIR/spool/{pid}-{n}.spool`,
//! and a flusher thread enqueues everything appended so far in one transaction, then empties
//! the file. Once `write(2)` returns the line is in the page cache: it survives a crash of the
//! process, the durability the database itself gives (WAL, `synchronous=NORMAL`).
//!
//! The process holds an exclusive `flock` on its spool file while it lives. Whoever opens the
//! queue replays every spool file it can lock (its owner died) and deletes it. Replaying a
//! line twice (a crash between the flusher's commit and its truncate) is harmless: a keyed job
//! coalesces with itself, and every job is idempotent.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use super::{NewJob, QueueError};
use crate::sys::{self, FlockOperation};

/// Where a spool's jobs go: the queue's database, by a function the queue gives (so the spool
/// knows nothing of the store). `None` once the queue is gone.
pub(super) type Sink = Box<dyn Fn(&[NewJob]) -> Option<Result<(), QueueError>> + Send>;

/// How long the flusher lets appends gather before it commits them (the delay before a
/// spooled job is visible in the database)...
const GATHER: std::time::Duration = std::time::Duration::from_millis(5);
/// ...unless this many bytes are waiting.
const GATHER_BYTES: u64 = 256 * 1024;

/// One appender's file and how much of it is in the database already.
struct State {
    file: File,
    /// Bytes appended.
    len: u64,
    /// Bytes enqueued into the database.
    flushed: u64,
    /// Set by [`Spool::stop`]: flush what is there and end.
    stopping: bool,
    /// The keyed jobs appended since the flusher last took what was there: appending one of
    /// them again would change nothing (it coalesces with itself in the same transaction),
    /// so it is not written again. A burst of unlinks in one directory queues its summary
    /// once per batch, not once per file.
    waiting: HashSet<String>,
}

impl State {
    /// What the flusher takes now: the bytes `from..to` and whether to stop after them.
    /// Whatever is appended from now on lands after them, so nothing counts as waiting.
    fn take(&mut self) -> (u64, u64, bool) {
        self.waiting.clear();
        (self.flushed, self.len, self.stopping)
    }
}

pub(super) struct Spool {
    path: PathBuf,
    state: Mutex<State>,
    /// Signalled on append (wakes the flusher) and on stop.
    cv: Condvar,
    flusher: Mutex<Option<JoinHandle<()>>>,
}

/// The spool directory of the queue database at `db`.
pub(super) fn dir_of(db: &Path) -> PathBuf {
    db.parent().unwrap_or(Path::new(".")).join("spool")
}

impl Spool {
    /// Create this process's spool file and start its flusher.
    pub(super) fn start(db: &Path, sink: Sink) -> io::Result<std::sync::Arc<Spool>> {
        let dir = dir_of(db);
        std::fs::create_dir_all(&dir)?;
        let name = format!(
            "{}-{}.spool",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        );
        // Locked before it is named (`spoolfile`): a replay never takes it for a dead one's.
        let (file, path) = crate::spoolfile::create_locked(&dir, &name)?;
        let spool = std::sync::Arc::new(Spool::new(path, file));
        let s = spool.clone();
        let t = std::thread::Builder::new()
            .name("vq-spool".into())
            .spawn(move || s.flush_loop(&sink))?;
        *spool.flusher.lock() = Some(t);
        Ok(spool)
    }

    /// A spool in `file` (new, at `path`), without its flusher.
    fn new(path: PathBuf, file: File) -> Spool {
        Spool {
            path,
            state: Mutex::new(State {
                file,
                len: 0,
                flushed: 0,
                stopping: false,
                waiting: HashSet::new(),
            }),
            cv: Condvar::new(),
            flusher: Mutex::new(None),
        }
    }

    /// Append `jobs` as one line; they are in the database within milliseconds.
    pub(super) fn append(&self, jobs: &[NewJob]) -> io::Result<()> {
        let mut st = self.state.lock();
        let mut keys = Vec::new();
        let mut fresh: Vec<&NewJob> = Vec::with_capacity(jobs.len());
        for job in jobs {
            if let Some(key) = &job.key {
                let k = format!("{}\0{key}\0{}", job.queue, job.payload);
                if st.waiting.contains(&k) || keys.contains(&k) {
                    continue;
                }
                keys.push(k);
            }
            fresh.push(job);
        }
        if fresh.is_empty() {
            return Ok(());
        }
        let mut line = serde_json::to_vec(&fresh).map_err(io::Error::other)?;
        line.push(b'\n');
        // One write(2) for the whole line: a crash leaves all of it or none.
        st.file.write_all(&line)?;
        // Only what was written counts as waiting.
        st.waiting.extend(keys);
        let was_idle = st.len == st.flushed;
        st.len += line.len() as u64;
        let full = st.len - st.flushed >= GATHER_BYTES;
        drop(st);
        // Wake the flusher only when it has nothing yet (it then gathers for a moment) or a
        // batch is full: not once per request.
        if was_idle || full {
            self.cv.notify_all();
        }
        Ok(())
    }

    /// Stop the flusher without flushing (the queue handle is gone): what is left is
    /// replayed by the next process to open the queue, as after a crash.
    pub(super) fn abandon(&self) {
        self.state.lock().stopping = true;
        self.cv.notify_all();
    }

    /// Flush what is there, stop the flusher and remove the (empty) spool file.
    pub(super) fn stop(&self) {
        self.state.lock().stopping = true;
        self.cv.notify_all();
        if let Some(t) = self.flusher.lock().take() {
            let _ = t.join();
        }
        let st = self.state.lock();
        if st.len == 0 {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    fn flush_loop(&self, sink: &Sink) {
        loop {
            let (from, to, stopping) = {
                let mut st = self.state.lock();
                while st.flushed == st.len && !st.stopping {
                    self.cv.wait(&mut st);
                }
                // Let a burst of requests gather into one transaction rather than commit
                // after every request: a moment, or until a batch is big enough.
                let deadline = std::time::Instant::now() + GATHER;
                while !st.stopping
                    && st.len - st.flushed < GATHER_BYTES
                    && !self.cv.wait_until(&mut st, deadline).timed_out()
                {}
                st.take()
            };
            if from < to {
                crate::crash_point!("spool.flush.before");
                let Some(flushed) = self.flush_range(sink, from, to) else {
                    return; // The queue is gone.
                };
                match flushed {
                    Ok(()) => {
                        crate::crash_point!("spool.flushed");
                        let mut st = self.state.lock();
                        st.flushed = to;
                        if st.len == to {
                            // Caught up: empty the file so it never grows. Appends hold the
                            // same mutex, so none can land between the check and the truncate.
                            if let Err(e) = st.file.set_len(0) {
                                tracing::warn!(file = %self.path.display(), "emptying the spool: {e}");
                            } else {
                                st.len = 0;
                                st.flushed = 0;
                            }
                        }
                    }
                    Err(e) if stopping => {
                        // Stopping with a database that takes nothing (a full disk): the
                        // lines stay in the spool file, which the next open replays. Never
                        // hang the daemon's exit on it.
                        tracing::warn!(
                            file = %self.path.display(),
                            "spooled jobs kept for the next start: {}",
                            crate::error::Chain(&e)
                        );
                        return;
                    }
                    Err(e) => {
                        // The database is unavailable (another process holds its write lock
                        // past the busy timeout, the disk is full): the lines stay in the
                        // spool; try again.
                        tracing::warn!(
                            "moving spooled jobs into the queue: {}",
                            crate::error::Chain(&e)
                        );
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    }
                }
                continue;
            }
            if stopping {
                return;
            }
        }
    }

    fn flush_range(&self, sink: &Sink, from: u64, to: u64) -> Option<Result<(), QueueError>> {
        let mut buf = vec![0u8; (to - from) as usize];
        let read = self.state.lock().file.read_exact_at(&mut buf, from);
        if let Err(e) = read {
            return Some(Err(QueueError::Spool(self.path.clone(), e)));
        }
        sink(&parse(&buf, &self.path))
    }
}

/// The jobs in spooled bytes; a line that does not parse (torn by a power loss) is skipped.
fn parse(buf: &[u8], path: &Path) -> Vec<NewJob> {
    let mut jobs = Vec::new();
    for line in buf.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        match serde_json::from_slice::<Vec<NewJob>>(line) {
            Ok(j) => jobs.extend(j),
            Err(e) => tracing::warn!(file = %path.display(), "skipping a damaged spool line: {e}"),
        }
    }
    jobs
}

/// Enqueue the jobs of every spool file whose owner is gone, and delete those files.
/// Returns how many jobs were recovered.
pub(super) fn replay_orphans(
    db: &Path,
    enqueue: impl Fn(&[NewJob]) -> Result<(), QueueError>,
) -> Result<usize, QueueError> {
    let dir = dir_of(db);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(QueueError::Spool(dir, e)),
    };
    let mut recovered = 0;
    for e in entries.flatten() {
        let path = e.path();
        if crate::spoolfile::is_making(&path) {
            crate::spoolfile::clear_abandoned(&path);
            continue;
        }
        if path.extension() != Some("spool".as_ref()) {
            continue;
        }
        let Ok(file) = File::open(&path) else {
            continue; // Gone meanwhile: its owner stopped cleanly or another replay took it.
        };
        if sys::flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            continue; // A live process's spool.
        }
        // Locked: its owner is dead. Another replayer may have taken and deleted it between
        // our open and our lock; then it has no name any more.
        let linked = file
            .metadata()
            .map(|m| std::os::unix::fs::MetadataExt::nlink(&m) > 0)
            .unwrap_or(false);
        if !linked {
            continue;
        }
        let bytes = std::fs::read(&path).map_err(|e| QueueError::Spool(path.clone(), e))?;
        let jobs = parse(&bytes, &path);
        if !jobs.is_empty() {
            enqueue(&jobs)?;
            recovered += jobs.len();
            tracing::info!(file = %path.display(), jobs = jobs.len(), "recovered spooled jobs of a dead process");
        }
        std::fs::remove_file(&path).map_err(|e| QueueError::Spool(path.clone(), e))?;
    }
    Ok(recovered)
}

/// Jobs in live processes' spool files not moved into the database yet, for `wait` and
/// `status` (orphans are replayed by [`replay_orphans`], not counted).
pub(super) fn pending_lines(db: &Path) -> u64 {
    let mut n = 0;
    for_live_lines(db, |b| {
        n += b.iter().filter(|&&c| c == b'\n').count() as u64
    });
    n
}

/// Is a job of `queue` and `key` in a live process's spool, not moved into the database yet
/// (a summary's refresh queued a moment ago by a daemon: `find` hides the old summary)?
pub(super) fn has_key(db: &Path, queue: &str, key: &str) -> bool {
    let mut found = false;
    for_live_lines(db, |b| {
        found = found
            || b.split(|&c| c == b'\n').any(|line| {
                serde_json::from_slice::<Vec<NewJob>>(line).is_ok_and(|jobs| {
                    jobs.iter()
                        .any(|j| j.queue == queue && j.key.as_deref() == Some(key))
                })
            })
    });
    found
}

/// Call `f` with the content of each live process's non-empty spool file.
fn for_live_lines(db: &Path, mut f: impl FnMut(&[u8])) {
    let Ok(entries) = std::fs::read_dir(dir_of(db)) else {
        return;
    };
    for e in entries.flatten() {
        if e.path().extension() != Some("spool".as_ref()) {
            continue;
        }
        let Ok(file) = File::open(e.path()) else {
            continue;
        };
        if e.metadata().is_ok_and(|m| m.len() == 0) {
            continue;
        }
        // A lock we can take means no live owner: an orphan, not work in flight.
        if sys::flock(&file, FlockOperation::NonBlockingLockShared).is_ok() {
            continue;
        }
        if let Ok(b) = std::fs::read(e.path()) {
            f(&b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn written(path: &Path) -> Vec<NewJob> {
        parse(&std::fs::read(path).unwrap(), path)
    }

    fn job(queue: &str, key: Option<&str>, n: i64) -> NewJob {
        NewJob::new(queue, key.map(Into::into), json!({ "n": n }))
    }

    /// A spool without its flusher (what `append` writes stays in the file), its path, and
    /// the keyed job both tests append twice.
    fn bare(dir: &Path) -> (Spool, PathBuf, NewJob) {
        let (file, path) = crate::spoolfile::create_locked(dir, "t.spool").unwrap();
        let s = Spool::new(path.clone(), file);
        (s, path, job("semantic", Some("semantic:d"), 0))
    }

    #[test]
    fn a_keyed_job_waiting_in_the_spool_is_not_written_again() {
        let dir = tempfile::tempdir().unwrap();
        let (s, path, summary) = bare(dir.path());
        s.append(&[job("embedding", Some("embed:a"), 0), summary.clone()])
            .unwrap();
        // The same summary again (a burst of changes in one directory): nothing new to write.
        s.append(std::slice::from_ref(&summary)).unwrap();
        // The same key with another payload, and jobs without a key, are written.
        s.append(&[job("semantic", Some("semantic:d"), 1)]).unwrap();
        s.append(&[job("x", None, 0), job("x", None, 0)]).unwrap();
        // Twice in one batch: once.
        s.append(&[
            job("embedding", Some("embed:b"), 0),
            job("embedding", Some("embed:b"), 0),
        ])
        .unwrap();
        let w = written(&path);
        assert_eq!(w.len(), 6, "{w:?}");
        assert_eq!(w.iter().filter(|j| j == &&summary).count(), 1);
        assert_eq!(w.iter().filter(|j| j.queue == "x").count(), 2);
        assert_eq!(
            w.iter()
                .filter(|j| j.key.as_deref() == Some("embed:b"))
                .count(),
            1
        );
    }

    #[test]
    fn a_keyed_job_is_written_again_once_the_flusher_took_it() {
        let dir = tempfile::tempdir().unwrap();
        let (s, path, summary) = bare(dir.path());
        s.append(std::slice::from_ref(&summary)).unwrap();
        // The flusher takes what is there (and may commit it, and a worker run it): a change
        // after that must queue the job again.
        assert_eq!(s.state.lock().take().0, 0);
        s.append(std::slice::from_ref(&summary)).unwrap();
        assert_eq!(written(&path).len(), 2);
    }

    /// A job appended by a live spool is found by its key until it is in the database; a
    /// dead process's spool (no lock held) is an orphan, not work in flight.
    #[test]
    fn a_spooled_key_is_found_while_its_owner_lives() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("queue.db");
        std::fs::create_dir_all(dir_of(&db)).unwrap();
        // Held as `start` holds it while its process lives.
        let (file, path) = crate::spoolfile::create_locked(&dir_of(&db), "1-1.spool").unwrap();
        let s = Spool::new(path, file);
        s.append(&[job("semantic", Some("semantic:d"), 0)]).unwrap();
        assert!(has_key(&db, "semantic", "semantic:d"));
        assert!(!has_key(&db, "semantic", "semantic:e"));
        assert!(!has_key(&db, "embedding", "semantic:d"));
        drop(s);
        assert!(
            !has_key(&db, "semantic", "semantic:d"),
            "an orphan is not in flight"
        );
    }
}
