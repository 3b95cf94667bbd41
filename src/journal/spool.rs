//! The intent spool: the intent of a removal that keeps its content in the history, written
//! as one append(2) instead of a journal commit.
//!
//! `rm -rf` through the mount is one unlink after another, and each one's intent must be
//! durable before the path goes. A journal commit per unlink was the largest part of it
//! (~100 µs). Such an intent needs no row of its own: it is closed by its removal's history
//! entry, which names the intent's blob and is committed with the batch's others
//! ([`crate::ops`]' settle). So the process appends `{"owner":…,"intent":…}` as one line to
//! its spool file, `.vikingfs/intents/{pid}-{uuid}.intents`; once `write(2)` returns the line
//! survives a crash of the process — the durability the journal itself gives (WAL,
//! `synchronous=NORMAL`). A line is open until the history holds an entry for its blob.
//!
//! The process holds an exclusive `flock` on its spool files while it lives. Whoever recovers
//! ([`super::Journal::replay_spools`], run first by every recovery) takes each spool file it
//! can lock (its owner died), journals every intent in it whose blob has no entry and that is
//! not journalled already (an intent a replay journalled before dying), then deletes the
//! file; recovery then finishes those intents as it finishes any. A line whose removal is
//! settled is closed by the entry committed with it, so a replay never redoes a removal that
//! was done. A file whose lines are all settled is emptied (the one taking lines) or deleted
//! (an older one, after the spool moved on at [`ROTATE_BYTES`]), so it never grows.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::Intent;
use crate::sys::{self, FlockOperation};

/// The spool directory's name, in the workspace's internal directory.
pub const DIR: &str = "intents";

/// A spool file that has taken this many bytes is left for a new one (deleted once all its
/// lines are settled): a long run of removals whose last is never settled before the next
/// begins never empties the file it writes.
const ROTATE_BYTES: u64 = 1 << 20;

/// Where an intent was spooled: which of the process's spool files holds its line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spooled {
    file: u64,
}

/// One spool line.
#[derive(Serialize, Deserialize)]
struct Line {
    owner: String,
    intent: Intent,
}

struct SpoolFile {
    /// Numbers the files of one process ([`Spooled::file`]).
    n: u64,
    path: PathBuf,
    file: File,
    /// Bytes appended (since it was last emptied).
    len: u64,
    /// Lines appended and not settled.
    open: usize,
}

/// One process's intent spool. Its first file is made at the first append.
pub struct IntentSpool {
    dir: PathBuf,
    /// Oldest first; the last takes new lines.
    files: Mutex<Vec<SpoolFile>>,
    next: std::sync::atomic::AtomicU64,
}

impl IntentSpool {
    /// The spool of this process in `dir` (made when first needed).
    pub fn new(dir: PathBuf) -> IntentSpool {
        IntentSpool {
            dir,
            files: Mutex::new(Vec::new()),
            next: Default::default(),
        }
    }

    /// Where its files go.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A new spool file, locked before it is named (`spoolfile`: a replay never takes it for
    /// a dead process's).
    fn create(&self) -> io::Result<SpoolFile> {
        std::fs::create_dir_all(&self.dir)?;
        let name = format!(
            "{}-{}.intents",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        );
        let (file, path) = crate::spoolfile::create_locked(&self.dir, &name)?;
        Ok(SpoolFile {
            n: self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            path,
            file,
            len: 0,
            open: 0,
        })
    }

    /// Append `intent` of lock owner `owner` as one line: durable (against a crash of this
    /// process) when this returns.
    pub fn append(&self, intent: &Intent, owner: &str) -> io::Result<Spooled> {
        let mut line = serde_json::to_vec(&Line {
            owner: owner.to_string(),
            intent: intent.clone(),
        })
        .map_err(io::Error::other)?;
        line.push(b'\n');
        let mut files = self.files.lock();
        if files.last().is_none_or(|f| f.len >= ROTATE_BYTES) {
            files.push(self.create()?);
        }
        let f = files.last_mut().expect("one file at least");
        // One write(2) for the whole line: a crash leaves all of it or none.
        f.file.write_all(&line)?;
        f.len += line.len() as u64;
        f.open += 1;
        Ok(Spooled { file: f.n })
    }

    /// The intents `done` are closed (their entries committed, or nothing to keep them
    /// for): a file with no open line left is emptied, or deleted if the spool moved on.
    pub fn settled(&self, done: &[Spooled]) {
        if done.is_empty() {
            return;
        }
        let mut files = self.files.lock();
        for d in done {
            if let Some(f) = files.iter_mut().find(|f| f.n == d.file) {
                f.open = f.open.saturating_sub(1);
            }
        }
        let last = files.last().map(|f| f.n);
        files.retain_mut(|f| {
            if f.open > 0 || f.len == 0 {
                return true;
            }
            if Some(f.n) == last {
                // Appends hold the same mutex: none lands between the count and the cut.
                match f.file.set_len(0) {
                    Ok(()) => f.len = 0,
                    Err(e) => tracing::warn!(file = %f.path.display(), "emptying the intent spool: {e}"),
                }
                true
            } else {
                if let Err(e) = std::fs::remove_file(&f.path) {
                    tracing::warn!(file = %f.path.display(), "removing a settled intent spool: {e}");
                }
                false
            }
        });
    }

    /// Whether `path` is one of this process's spool files.
    fn owns(&self, path: &Path) -> bool {
        self.files.lock().iter().any(|f| f.path == path)
    }
}

impl Drop for IntentSpool {
    /// An empty spool file goes with its process; one with open lines stays for the next
    /// recovery.
    fn drop(&mut self) {
        for f in self.files.get_mut().drain(..) {
            if f.open == 0 {
                let _ = std::fs::remove_file(&f.path);
            }
        }
    }
}

/// A dead process's spool file, locked by this process until dropped.
pub(super) struct Orphan {
    pub path: PathBuf,
    /// Its lines: (owner, intent). A line that does not parse (torn by a power loss) is
    /// skipped.
    pub lines: Vec<(String, Intent)>,
    _lock: File,
}

/// The spool files in `dir` whose owners died (not `mine`'s), each locked.
pub(super) fn orphans(dir: &Path, mine: Option<&IntentSpool>) -> io::Result<Vec<Orphan>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        if crate::spoolfile::is_making(&path) {
            crate::spoolfile::clear_abandoned(&path);
            continue;
        }
        if path.extension() != Some("intents".as_ref()) || mine.is_some_and(|s| s.owns(&path)) {
            continue;
        }
        let Ok(file) = File::open(&path) else {
            continue; // Gone meanwhile: another replay took it.
        };
        if sys::flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            continue; // A live process's.
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
        let bytes = std::fs::read(&path)?;
        let mut lines = Vec::new();
        for l in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            match serde_json::from_slice::<Line>(l) {
                Ok(l) => lines.push((l.owner, l.intent)),
                Err(e) => {
                    tracing::warn!(file = %path.display(), "skipping a damaged intent spool line: {e}")
                }
            }
        }
        out.push(Orphan {
            path,
            lines,
            _lock: file,
        });
    }
    Ok(out)
}

/// The blobs named by `intents` (for a replay: those journalled already).
pub(super) fn blobs_of<'a>(intents: impl Iterator<Item = &'a Intent>) -> HashSet<String> {
    intents
        .filter_map(|i| match i {
            Intent::Rm { blob, .. } => blob.clone(),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rm(blob: &str) -> Intent {
        Intent::Rm {
            path: format!("resources/{blob}"),
            dir: false,
            blob: Some(blob.into()),
        }
    }

    #[test]
    fn settled_lines_empty_the_file_and_open_ones_stay() {
        let d = tempfile::tempdir().unwrap();
        let s = IntentSpool::new(d.path().join(DIR));
        let a = s.append(&rm("a"), "o").unwrap();
        let b = s.append(&rm("b"), "o").unwrap();
        let path = s.files.lock()[0].path.clone();
        assert!(std::fs::metadata(&path).unwrap().len() > 0);
        s.settled(&[a]);
        assert!(std::fs::metadata(&path).unwrap().len() > 0, "b is open");
        s.settled(&[b]);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        // Ours: not an orphan while we live.
        assert!(orphans(&d.path().join(DIR), Some(&s)).unwrap().is_empty());
        let c = s.append(&rm("c"), "o").unwrap();
        let _ = c;
        drop(s);
        // Dropped with an open line: the file stays, and is an orphan now.
        let o = orphans(&d.path().join(DIR), None).unwrap();
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].lines, vec![("o".to_string(), rm("c"))]);
    }

    #[test]
    fn a_full_file_is_left_and_deleted_once_settled() {
        let d = tempfile::tempdir().unwrap();
        let s = IntentSpool::new(d.path().join(DIR));
        let first = s.append(&rm("first"), "o").unwrap();
        s.files.lock()[0].len = ROTATE_BYTES;
        let second = s.append(&rm("second"), "o").unwrap();
        assert_eq!(s.files.lock().len(), 2);
        let old = s.files.lock()[0].path.clone();
        s.settled(&[first]);
        assert!(!old.exists(), "the older file goes once settled");
        s.settled(&[second]);
        drop(s);
        assert_eq!(std::fs::read_dir(d.path().join(DIR)).unwrap().count(), 0);
    }
}
