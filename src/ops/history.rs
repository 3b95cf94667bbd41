//! The history's content: what a removal kept, in `WORKSPACE/.vikingfs/history/blobs/ID` (a
//! file, or a whole tree, moved there by one rename(2) — the same filesystem as the data
//! root), and the pruning that gives it back. The entries are the journal's
//! ([`crate::journal::Entry`]).
//!
//! Invariants:
//! - a blob is named by an open intent (`Intent::Rm { blob }`) until its entry is committed
//!   with the intent's close, so recovery either records it or finds it never made — or, for
//!   a file without records (removed without an intent, the cheap path), by the extended
//!   attribute `user.vikingfs.path` on the blob, from which `fsck --repair` adopts it;
//! - pruning forgets an entry before it deletes its blob: a crash between leaves content
//!   without an entry, which `fsck --repair` removes, never an entry without content;
//! - pruning takes the oldest entries first, and only this workspace's: a process prunes the
//!   history of the stores it opened, never another workspace's.
//!
//! Space: the rules (README, "Undo", and docs/history.md say the same).
//! - Retention: entries older than `history.keep` and the oldest beyond `history.max_bytes`
//!   go, whether or not anything else happens. The daemon's history thread
//!   ([`Stores::tend_history`], every [`ENTRIES_EVERY`]) keeps a running tally — the last
//!   count of every row plus what this process has recorded since — and prunes at once when
//!   the tally is over the cap or the oldest entry it knows of is past its time; and it
//!   counts every row again every [`prune_every`] (a minute), which also catches entries
//!   other processes recorded. Logged at INFO.
//! - The line: the history wants a quarter of the filesystem (at most 1 GiB) and a tenth of
//!   its inodes (at most 65,536) free; how far the disk is below that is the shortfall. The
//!   line is sized for what a writer under passthrough (never seen by the daemon) may fill
//!   in a second; the daemon looks five times a second.
//! - A dip — below the line for less than [`pressure_lasts`] (10 s) at every look, with more
//!   than a quarter of the line still free — changes nothing: every entry stays and
//!   removals are still kept (a rename into the history costs no space). Another program's
//!   temporary files come and go; what the history keeps must not go with them.
//! - A shortage — below the line at every look for 10 s, or less than a quarter of the line
//!   free (a writer could take the rest before the next look but one): nothing new is kept
//!   (a removal frees its space, as without history), and the oldest entries totalling the
//!   shortfall are given back, so that the disk is on the line again — only when the
//!   history can cover the shortfall by itself. A history smaller than the shortfall gives
//!   nothing back for it: all of it would not put the disk back on the line (the space is
//!   taken by something else), and every undo would be lost for a fraction of what is
//!   missing.
//! - The last resort — less than one reserve chunk (2 MiB) or 64 inodes free, or an
//!   operation that met ENOSPC ([`Stores::relieve`], before any of the reserve): the oldest
//!   entries totalling what is missing to that chunk (at least a chunk for an operation
//!   that met ENOSPC) go, whatever the history's size: a write fails or is about to, and a
//!   write must never fail for space the history holds.
//! - Each give-back is logged at WARN with what went (entries, bytes, the first and last
//!   time recorded) and why, and written to `history/given-back.json`, which `status` shows
//!   (it may run in another process).
//! - The line is the filesystem's, so every workspace on it sees the same shortfall. Each
//!   daemon gives back only its own history and at most the shortfall; one that looks after
//!   another gave back finds the disk on the line again and gives nothing (two looking in
//!   the same moment may each give back the shortfall: never all of a history that could
//!   not cover it). The timers run in the daemon that serves the workspace; a one-shot
//!   command gives back only when it meets ENOSPC.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{OpsError, Result, Stores};
use crate::errno::ToErrno;
use crate::journal::{Entry, Recorded};

/// Entries recorded without an intent (renames, overwrites) wait in memory for at most this
/// long, or this many, and go into the journal in one commit: a commit per rename cost the
/// metadata job a quarter of its speed. What is still waiting is written before anything
/// reads the history; a crash of the daemon may drop it (the files are as they were: only
/// the record of the change is lost).
pub(crate) const ENTRIES_EVERY: Duration = Duration::from_millis(200);
const ENTRIES_AT_ONCE: usize = 512;

/// The extended attribute on a kept file naming the path it was removed from (what an
/// `fsck --repair` adopts an entry-less blob by).
pub(crate) const BLOB_PATH_XATTR: &str = "user.vikingfs.path";

/// How often a batch of removals (without a daemon) prunes what is past its time or over the
/// cap; the daemon's history thread also counts every row this often ([`prune_every`]).
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// A duration in milliseconds from the environment variable `name`, else `default`.
fn env_ms(name: &str, default: Duration) -> Duration {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(default, Duration::from_millis)
}

/// How often the daemon counts every row of the history for retention, whatever its tally
/// says ([`PRUNE_EVERY`]). `VIKINGFS_HISTORY_PRUNE_EVERY_MS` changes it (the tests).
fn prune_every() -> Duration {
    static EVERY: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *EVERY.get_or_init(|| env_ms("VIKINGFS_HISTORY_PRUNE_EVERY_MS", PRUNE_EVERY))
}

/// How long the disk must stay below the line, at every look, before the history gives back
/// for it: a shorter dip (another program's temporary files) costs it nothing.
/// `VIKINGFS_HISTORY_PRESSURE_GRACE_MS` changes it (the tests).
pub(crate) fn pressure_lasts() -> Duration {
    static LASTS: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *LASTS.get_or_init(|| {
        env_ms(
            "VIKINGFS_HISTORY_PRESSURE_GRACE_MS",
            Duration::from_secs(10),
        )
    })
}

/// The last resort keeps this many inodes free (and one reserve chunk of bytes).
const LAST_INODES: u64 = 64;

/// The filesystem under the workspace, as the space rules see it (one statvfs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Disk {
    /// Bytes free for unprivileged writers, and the filesystem's size.
    free: u64,
    total: u64,
    /// Inodes free for unprivileged writers, and how many it has (0: no fixed table).
    ifree: u64,
    inodes: u64,
}

impl Disk {
    fn of(ws: &crate::workspace::Workspace) -> Option<Disk> {
        let st = crate::sys::statvfs(&ws.internal_dir()).ok()?;
        Some(Disk {
            free: st.f_bavail * st.f_frsize,
            total: st.f_blocks * st.f_frsize,
            ifree: st.f_favail,
            inodes: st.f_files,
        })
    }

    /// The line: bytes and inodes the history wants free — a quarter of the filesystem (at
    /// most 1 GiB) and a tenth of its inodes (a removal kept frees none, and every lock file
    /// takes one).
    fn line(&self) -> (u64, u64) {
        (
            (1u64 << 30).min(self.total / 4),
            (self.inodes / 10).min(1 << 16),
        )
    }

    /// How far below the line the disk is: (bytes, inodes).
    fn short(&self) -> (u64, u64) {
        let (b, i) = self.line();
        (b.saturating_sub(self.free), i.saturating_sub(self.ifree))
    }

    fn below(&self) -> bool {
        self.short() != (0, 0)
    }

    /// Less than a quarter of the line free: a writer may take the rest before the next
    /// look but one.
    fn urgent(&self) -> bool {
        let (b, i) = self.line();
        self.free < b / 4 || self.ifree < i / 4
    }

    /// What the last resort makes free: bytes and inodes missing to one reserve chunk and
    /// [`LAST_INODES`] (or to the line, on a filesystem whose line is smaller).
    fn last_resort(&self) -> (u64, u64) {
        let (b, i) = self.line();
        (
            super::reserve::CHUNK.min(b).saturating_sub(self.free),
            LAST_INODES.min(i).saturating_sub(self.ifree),
        )
    }

    /// Whether the history yields: nothing new is kept. Not in a dip; in a shortage (below
    /// the line long enough, `lasting`, or urgent) and at the last resort.
    fn yields(&self, lasting: bool) -> bool {
        (self.below() && (lasting || self.urgent())) || self.last_resort() != (0, 0)
    }
}

/// What a give-back must cover, in (bytes, inodes), oldest entries first: the disk being `d`,
/// below its line at every look for [`pressure_lasts`] (`lasting`) or not, and the history
/// holding `kept` (bytes, entries). The module's rules: nothing in a dip; in a shortage the
/// shortfall, when the history can cover it; at the last resort what is missing to it.
fn to_give_back(d: &Disk, lasting: bool, kept: (u64, u64)) -> (u64, u64) {
    let short = d.short();
    let real = lasting || d.urgent();
    let cover = |short: u64, kept: u64| if real && kept >= short { short } else { 0 };
    let last = d.last_resort();
    (
        cover(short.0, kept.0).max(last.0),
        cover(short.1, kept.1).max(last.1),
    )
}

/// What the history holds, as last counted over every row, with the journal's count of what
/// this process had recorded then ([`crate::journal::Journal::history_recorded`]): what it
/// records after is added without reading the rows again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tally {
    entries: u64,
    bytes: u64,
    /// The oldest entry's time (ms since the epoch); `None` with no entry.
    oldest_ms: Option<i64>,
    /// `history_recorded()` (entries, bytes) when counted.
    mark: (u64, u64),
}

impl Tally {
    /// The tally of `rows` (any order), read when the journal's count was `mark`.
    fn of(rows: &[Recorded], mark: (u64, u64)) -> Tally {
        Tally {
            entries: rows.len() as u64,
            bytes: kept_bytes(rows),
            oldest_ms: rows.iter().map(|r| r.at_ms).min(),
            mark,
        }
    }
}

/// Bytes of content `rows` keep.
fn kept_bytes(rows: &[Recorded]) -> u64 {
    rows.iter()
        .filter(|r| r.entry.blob.is_some())
        .map(|r| r.entry.size)
        .sum()
}

/// A give-back for space, as `status` shows it: `history/given-back.json`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct GivenBack {
    /// When (ms since the epoch).
    pub at_ms: i64,
    pub entries: u64,
    pub bytes: u64,
    /// When the first and the last entry given back were recorded.
    pub oldest_ms: i64,
    pub newest_ms: i64,
    /// The disk then: bytes free and the line.
    pub free: u64,
    pub line: u64,
    /// Why, in words.
    pub why: String,
}

/// Where the last give-back is kept for `status`.
fn given_back_path(ws: &crate::workspace::Workspace) -> PathBuf {
    ws.internal_dir().join("history").join("given-back.json")
}

/// The last give-back for space in workspace `ws`, if there was one.
pub fn last_given_back(ws: &crate::workspace::Workspace) -> Option<GivenBack> {
    let raw = std::fs::read(given_back_path(ws)).ok()?;
    serde_json::from_slice(&raw).ok()
}

impl Stores {
    /// Record `entries` soon ([`ENTRIES_EVERY`]), with those waiting.
    pub(crate) fn record_soon(&self, entries: Vec<Entry>) {
        let full = {
            let mut w = self.waiting_entries.lock();
            w.extend(entries);
            w.len() >= ENTRIES_AT_ONCE
        };
        if full {
            self.flush_entries();
        }
    }

    /// Write the entries waiting, in one commit (logged, not returned: the change they
    /// describe is done).
    pub(crate) fn flush_entries(&self) {
        let batch = std::mem::take(&mut *self.waiting_entries.lock());
        if batch.is_empty() {
            return;
        }
        let mut r = self.journal.record(&batch);
        // A full disk: the reserve makes the journal's room, as for any store.
        while matches!(&r, Err(e) if e.is_disk_full()) && self.reserve.release() {
            r = self.journal.record(&batch);
        }
        if let Err(e) = r {
            tracing::warn!(
                entries = batch.len(),
                "recording history entries (kept for the next try): {}",
                crate::error::Chain(&e)
            );
            // Kept for the next flush, ahead of what came since: their blobs exist already.
            let mut w = self.waiting_entries.lock();
            let later = std::mem::replace(&mut *w, batch);
            w.extend(later);
        }
    }

    /// The history's entries (see [`crate::journal::Journal::history`]), those waiting
    /// written first.
    pub fn history(
        &self,
        under: Option<&crate::uri::VPath>,
        since_ms: i64,
    ) -> Result<Vec<Recorded>> {
        self.flush_entries();
        Ok(self.journal.history(under, since_ms)?)
    }

    /// Changes of the history by this process so far, entries waiting to be recorded
    /// included: what the past view (`past.rs`) caches its reads on.
    pub(crate) fn history_generation(&self) -> u64 {
        self.journal.history_changes() + self.waiting_entries.lock().len() as u64
    }

    /// Where kept content lives.
    pub(crate) fn blobs_dir(&self) -> PathBuf {
        self.ws.internal_dir().join("history").join("blobs")
    }

    pub(crate) fn blob_path(&self, blob: &str) -> PathBuf {
        self.blobs_dir().join(blob)
    }

    /// A new blob's name for a removal about to be kept, or `None` when nothing is kept
    /// (history off, or the disk full even once history gave back what it could).
    pub(crate) fn new_blob(&self) -> Option<String> {
        if !self.history.enabled {
            return None;
        }
        // In a shortage nothing new is kept: the removal frees what it removes, as without
        // history (in a dip it is kept: the rename costs no space).
        if self.look().is_some_and(|(d, lasting)| d.yields(lasting)) {
            return None;
        }
        // Made once per process, not checked on every removal: one gone since (removed by
        // hand) is made again by whoever puts a blob there ([`Stores::put_blob`]).
        if !self.blobs_made.load(std::sync::atomic::Ordering::Relaxed) {
            std::fs::create_dir_all(self.blobs_dir()).ok()?;
            self.blobs_made
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        Some(uuid::Uuid::new_v4().simple().to_string())
    }

    /// Run `put`, which makes a blob named by [`Stores::new_blob`]; when the blobs directory
    /// turns out gone, make it again and run `put` once more.
    pub(crate) fn put_blob<T>(
        &self,
        mut put: impl FnMut() -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        match put() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !self.blobs_dir().is_dir() => {
                std::fs::create_dir_all(self.blobs_dir())?;
                put()
            }
            r => r,
        }
    }

    /// The entry of a removal of `path` whose content is now blob `blob`, made from the blob
    /// itself (so recovery makes the same one); `None` when the blob is not there.
    pub(crate) fn removal_entry(
        &self,
        path: &str,
        blob: &str,
        pid: Option<u32>,
        cmd: Option<String>,
    ) -> Option<Entry> {
        let at = self.blob_path(blob);
        let md = std::fs::symlink_metadata(&at).ok()?;
        use std::os::unix::fs::MetadataExt;
        let kind = if md.is_dir() {
            "dir"
        } else if md.file_type().is_symlink() {
            "symlink"
        } else {
            "file"
        };
        Some(Entry {
            op: "rm".into(),
            path: path.to_string(),
            new_path: None,
            born_ms: None,
            kind: kind.into(),
            size: if md.is_dir() {
                tree_bytes(&at)
            } else {
                md.len()
            },
            blob: Some(blob.to_string()),
            reason: None,
            mode: md.mode(),
            uid: md.uid(),
            gid: md.gid(),
            pid,
            cmd,
        })
    }

    /// Move the file or tree at `p`, which `op` is about to remove, into the history with
    /// its entry, under the caller's lock. `Ok(false)` when nothing is kept (history off,
    /// the disk short of space): the caller removes it as without history. A file is named
    /// by its path in an extended attribute first, so a crash before the entry leaves
    /// content `fsck --repair` adopts.
    pub(crate) fn keep_removed(&self, p: &crate::uri::VPath, op: &str) -> Result<bool> {
        let Some(blob) = self.new_blob() else {
            return Ok(false);
        };
        let to = self.blob_path(&blob);
        self.put_blob(|| self.root.rename_out(p, &to))
            .map_err(|e| OpsError::io(self.backing(p), e))?;
        let _ = crate::sys::set_path_xattr(&to, BLOB_PATH_XATTR, p.as_str().as_bytes());
        let pid = crate::process::requester();
        if let Some(mut e) = self.removal_entry(p.as_str(), &blob, Some(pid), self.command_of(pid))
        {
            e.op = op.into();
            self.record_soon(vec![e]);
            self.flush_entries();
        }
        Ok(true)
    }

    /// Prune what is past `history.keep` or over the cap, oldest first: at once when `now`,
    /// else once a [`PRUNE_EVERY`] at most (a batch of removals asks after each). Counts the
    /// tally anew. Returns how many entries went.
    pub(crate) fn prune_history(&self, now: bool) -> Result<usize> {
        {
            let mut last = self.pruned.lock();
            if !now && last.is_some_and(|t| t.elapsed() < PRUNE_EVERY) {
                return Ok(0);
            }
            *last = Some(Instant::now());
        }
        let mut all = self.history(None, 0)?;
        let mark = self.journal.history_recorded();
        all.reverse(); // oldest first
        let now_ms = crate::sql::now_ms();
        let keep_ms = i64::try_from(self.history.keep.as_millis()).unwrap_or(i64::MAX);
        let cap = self.cap(Disk::of(&self.ws).map(|d| d.total));
        let gone = to_prune(&all, now_ms, keep_ms, cap, (0, 0));
        let (went, r) = self.forget_oldest(&all[..gone]);
        if went > 0 {
            let gone = &all[..went];
            tracing::info!(
                entries = went,
                bytes = kept_bytes(gone),
                "history pruned: {went} entries ({}, recorded {} to {}) past \
                 history.keep_days ({:.1}) or over history.max_bytes ({})",
                crate::content::human_size(kept_bytes(gone)),
                super::rfc3339(gone[0].at_ms),
                super::rfc3339(gone[went - 1].at_ms),
                self.history.keep.as_secs_f64() / 86400.0,
                crate::content::human_size(cap),
            );
        }
        *self.tally.lock() = Some(Tally::of(&all[went..], mark));
        r.map(|()| went)
    }

    /// The cap on the bytes kept: `history.max_bytes`, else a tenth of the filesystem
    /// (`total` bytes; no cap when unknown).
    fn cap(&self, total: Option<u64>) -> u64 {
        self.history
            .max_bytes
            .unwrap_or_else(|| total.map_or(u64::MAX, |t| t / 10))
    }

    /// Forget `rows` (oldest first) one by one, each before its content: how many went, and
    /// the error that stopped it.
    fn forget_oldest(&self, rows: &[Recorded]) -> (usize, Result<()>) {
        for (i, r) in rows.iter().enumerate() {
            if let Err(e) = self.forget_entry(r) {
                return (i, Err(e));
            }
        }
        (rows.len(), Ok(()))
    }

    /// Forget `r`, then delete its content.
    fn forget_entry(&self, r: &Recorded) -> Result<()> {
        self.journal.forget_history(&[r.id])?;
        if let Some(b) = &r.entry.blob {
            remove_any(&self.blob_path(b)).map_err(|e| OpsError::io(self.blob_path(b), e))?;
        }
        Ok(())
    }

    /// The history's size now, as the tally has it (counted when there is none yet), with
    /// what this process has recorded since the count.
    fn tallied(&self) -> Result<Tally> {
        if self.tally.lock().is_none() {
            let all = self.history(None, 0)?;
            let mark = self.journal.history_recorded();
            self.tally.lock().get_or_insert(Tally::of(&all, mark));
        }
        let (entries, bytes) = self.journal.history_recorded();
        let mut guard = self.tally.lock();
        let t = guard.get_or_insert(Tally::of(&[], (entries, bytes)));
        if t.oldest_ms.is_none() && entries != t.mark.0 {
            // Recorded since a count that found none: no older than now.
            t.oldest_ms = Some(crate::sql::now_ms());
        }
        Ok(Tally {
            entries: t.entries + entries.saturating_sub(t.mark.0),
            bytes: t.bytes + bytes.saturating_sub(t.mark.1),
            oldest_ms: t.oldest_ms,
            mark: (entries, bytes),
        })
    }

    /// The disk now, and whether it has been below the line at every look for
    /// [`pressure_lasts`]. Each look (the daemon's, five times a second, and each removal's)
    /// starts or ends the time below.
    fn look(&self) -> Option<(Disk, bool)> {
        let d = Disk::of(&self.ws)?;
        let mut since = self.below_since.lock();
        if !d.below() {
            if since.take().is_some() {
                tracing::debug!(
                    free = d.free,
                    "the disk is above the history's line again; nothing was given back for \
                     the time below it unless logged"
                );
            }
            return Some((d, false));
        }
        let t = *since.get_or_insert_with(|| {
            let (short, line) = (d.short().0, d.line().0);
            tracing::debug!(
                free = d.free,
                short,
                line,
                "the disk is below the history's line ({} free, {} short of {}); the oldest \
                 entries are given back for it if it lasts {:?} and the history can cover it",
                crate::content::human_size(d.free),
                crate::content::human_size(short),
                crate::content::human_size(line),
                pressure_lasts(),
            );
            Instant::now()
        });
        Some((d, t.elapsed() >= pressure_lasts()))
    }

    /// One look of the daemon's history thread: give back for space as the module's rules
    /// say, and prune what is past its time or over the cap — at once when the tally says
    /// so, and after every [`prune_every`] from the rows themselves.
    pub(crate) fn tend_history(&self) -> Result<()> {
        self.give_back_for_space(false)?;
        let due = self
            .pruned
            .lock()
            .is_none_or(|t| t.elapsed() >= prune_every())
            || {
                let t = self.tallied()?;
                let keep_ms = i64::try_from(self.history.keep.as_millis()).unwrap_or(i64::MAX);
                let old = t
                    .oldest_ms
                    .is_some_and(|o| crate::sql::now_ms().saturating_sub(o) > keep_ms);
                old || t.bytes > self.cap(Disk::of(&self.ws).map(|d| d.total))
            };
        if due {
            self.prune_history(true)?;
        }
        Ok(())
    }

    /// Give back history for an operation that met a full disk (before it is retried, and
    /// before any of the reserve is given): the last resort, at least a reserve chunk's
    /// worth, oldest first. How many entries went.
    pub(crate) fn relieve(&self) -> Result<usize> {
        self.give_back_for_space(true)
    }

    /// Give back what the module's rules call for (`met_full`: an operation met ENOSPC); how
    /// many entries went.
    fn give_back_for_space(&self, met_full: bool) -> Result<usize> {
        let Some((d, lasting)) = self.look() else {
            return Ok(0);
        };
        if !d.below() && !met_full {
            return Ok(0);
        }
        let t = self.tallied()?;
        let mut need = to_give_back(&d, lasting, (t.bytes, t.entries));
        if met_full {
            need.0 = need.0.max(super::reserve::CHUNK);
        }
        if need == (0, 0) || t.entries == 0 {
            return Ok(0);
        }
        let why = if met_full {
            "an operation met a full disk".to_string()
        } else if d.last_resort() != (0, 0) {
            "the disk is all but full".to_string()
        } else if d.urgent() {
            format!(
                "less than a quarter of the line ({}) is free",
                crate::content::human_size(d.line().0)
            )
        } else {
            format!(
                "the disk stayed below the line ({}) for {:?}",
                crate::content::human_size(d.line().0),
                pressure_lasts()
            )
        };
        // Forgetting an entry is a journal write, which a full disk may refuse: the reserve
        // makes the room (never the other way round: this runs before the reserve is asked).
        let mut r = self.give_back(need, &d, &why);
        while matches!(&r, Err(e) if e.is_disk_full()) && self.reserve.release() {
            r = self.give_back(need, &d, &why);
        }
        r
    }

    /// Give back the oldest entries until their content covers `need` (bytes, inodes),
    /// the disk being `d`: logged at WARN and kept for `status`.
    fn give_back(&self, need: (u64, u64), d: &Disk, why: &str) -> Result<usize> {
        let mut all = self.history(None, 0)?;
        let mark = self.journal.history_recorded();
        all.reverse(); // oldest first
        let n = to_prune(&all, 0, i64::MAX, u64::MAX, need);
        let (went, r) = self.forget_oldest(&all[..n]);
        *self.tally.lock() = Some(Tally::of(&all[went..], mark));
        if went > 0 {
            let gone = &all[..went];
            let g = GivenBack {
                at_ms: crate::sql::now_ms(),
                entries: went as u64,
                bytes: kept_bytes(gone),
                oldest_ms: gone[0].at_ms,
                newest_ms: gone[went - 1].at_ms,
                free: d.free,
                line: d.line().0,
                why: why.to_string(),
            };
            tracing::warn!(
                entries = g.entries,
                bytes = g.bytes,
                free = g.free,
                line = g.line,
                "short of space: gave back the history's {went} oldest entries ({}, recorded \
                 {} to {}; {} left): {why} ({} free)",
                crate::content::human_size(g.bytes),
                super::rfc3339(g.oldest_ms),
                super::rfc3339(g.newest_ms),
                all.len() - went,
                crate::content::human_size(d.free),
            );
            if let Err(e) = self.note_given_back(&g) {
                tracing::warn!("recording the give-back for status: {e}");
            }
        }
        r.map(|()| went)
    }

    /// Keep `g` for `status` (a new file renamed over the last).
    fn note_given_back(&self, g: &GivenBack) -> std::io::Result<()> {
        let to = given_back_path(&self.ws);
        let tmp = to.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec(g).map_err(std::io::Error::other)?)?;
        std::fs::rename(&tmp, &to)
    }
}

/// How many of `all` (oldest first) a prune gives back: those older than `keep_ms`, the
/// oldest while the kept content is over `cap`, and the oldest until their content covers
/// `short` (bytes, inodes) — measured once and counted down by each entry's size, not
/// measured again after each: filesystems free a deleted file's blocks later (XFS in a
/// background worker), so free space read at once would call for the whole history.
fn to_prune(all: &[Recorded], now_ms: i64, keep_ms: i64, cap: u64, short: (u64, u64)) -> usize {
    let mut total: u64 = all
        .iter()
        .filter(|r| r.entry.blob.is_some())
        .map(|r| r.entry.size)
        .sum();
    let (mut short_bytes, mut short_inodes) = short;
    let mut gone = 0;
    for r in all {
        let old = now_ms.saturating_sub(r.at_ms) > keep_ms;
        let over = total > cap;
        let full = short_bytes > 0 || short_inodes > 0;
        if !(old || over || full) {
            break;
        }
        if r.entry.blob.is_some() {
            total = total.saturating_sub(r.entry.size);
            short_bytes = short_bytes.saturating_sub(r.entry.size);
            short_inodes = short_inodes.saturating_sub(1);
        }
        gone += 1;
    }
    gone
}

/// How many files' last copies [`Stores::keep_version`] remembers (then it starts again).
const COPIES_REMEMBERED: usize = 16_384;

/// How an overwrite keeps the version it replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    /// A hard link to the file about to be replaced by a rename (its inode outlives the
    /// rename: nothing is copied).
    Link,
    /// A copy (a reflink where the filesystem has them) of a file about to be cut or
    /// rewritten in place.
    Copy,
    /// The file itself, about to be cut to nothing (an open with `O_TRUNC`): its inode moves
    /// into the history and an empty file with its owner, mode and extended attributes takes
    /// its name, in one `renameat2(RENAME_EXCHANGE)` — nothing copied, no block shared, on
    /// any filesystem — when it has one link and no descriptor of it is open on this host
    /// (a write lease is granted). Else as [`Keep::Copy`]. The mount's core then serves the
    /// kernel's inode from the new file ([`crate::fs::VikingFs`]'s open).
    Swap,
}

impl Stores {
    /// Keep the version of regular file `p` an overwrite (`op`: `overwrite`, `truncate`,
    /// `mv-over`) is about to replace, under the caller's lock, and record its entry. Never
    /// fails the overwrite: what cannot be kept is said in the log (or, over
    /// `history.max_file_bytes`, in an entry without content). A crash between the content
    /// and its entry leaves content without an entry, which `fsck --repair` removes.
    pub(crate) fn keep_version(&self, p: &crate::uri::VPath, op: &str, how: Keep) {
        self.keep_version_by(p, op, how, None);
    }

    /// Keep the version of memory file `p` a session commit (`by`: which one, what its
    /// entry names as the command) is about to replace by a rename, under the caller's
    /// lock: a hard link, as for any rename over a file. The op is `rewrite`.
    pub fn keep_rewritten(&self, p: &crate::uri::VPath, by: &str) {
        self.keep_version_by(p, "rewrite", Keep::Link, Some(by.to_string()));
    }

    /// [`Self::keep_version`], its entry naming `by` as the command when given.
    fn keep_version_by(&self, p: &crate::uri::VPath, op: &str, how: Keep, by: Option<String>) {
        let from = self.ws.fs_path(p);
        let Ok(md) = std::fs::symlink_metadata(&from) else {
            return; // nothing there: nothing replaced
        };
        if !md.is_file() || (how != Keep::Link && md.len() == 0) {
            return;
        }
        // A copy of a file unchanged since the last copy kept of it would keep the same
        // version twice (a program that opens a file for writing again and again, a database,
        // writes nothing most times).
        // The file's source version (inode, size, mtime) tells its versions apart, as it
        // does for the index.
        let stamp = super::source_version(&md);
        if how != Keep::Link && self.copied_from.lock().get(p.as_str()) == Some(&stamp) {
            return;
        }
        let pid = crate::process::requester();
        let cmd = by.or_else(|| self.command_of(pid));
        let not_kept = |why: String| {
            use std::os::unix::fs::MetadataExt;
            Entry {
                op: op.into(),
                path: p.as_str().to_string(),
                new_path: None,
                born_ms: crate::sys::birth_ms(&from),
                kind: "file".into(),
                size: md.len(),
                blob: None,
                reason: Some(why),
                mode: md.mode(),
                uid: md.uid(),
                gid: md.gid(),
                pid: Some(pid),
                cmd: cmd.clone(),
            }
        };
        let Some(blob) = self.new_blob() else {
            return; // history off, or the disk short of space
        };
        let to = self.blob_path(&blob);
        // A reflink costs nothing whatever the size; a copy costs the file's size, so only
        // up to history.max_file_bytes.
        let copy = || match crate::sys::reflink(&from, &to) {
            Ok(()) => Ok(true),
            Err(_) if md.len() > self.history.max_file_bytes => Ok(false),
            Err(_) => std::fs::copy(&from, &to).map(|_| true),
        };
        let mut swapped = false;
        let kept = self.put_blob(|| match how {
            Keep::Link => std::fs::hard_link(&from, &to).map(|_| true),
            Keep::Copy => copy(),
            Keep::Swap => match swap_out(&from, &to, &md, p.as_str()) {
                Ok(true) => {
                    swapped = true;
                    Ok(true)
                }
                Ok(false) => copy(),
                Err(e) => Err(e),
            },
        });
        let entry = match kept {
            Ok(true) => self
                .removal_entry(p.as_str(), &blob, Some(pid), cmd.clone())
                .map(|mut e| {
                    e.op = op.into();
                    // A copy is born now: the version kept is of the file it was made from
                    // (a swapped one is that file).
                    let born = if swapped { &to } else { &from };
                    e.born_ms = crate::sys::birth_ms(born).or(e.born_ms);
                    e
                }),
            Ok(false) => Some(not_kept(format!(
                "over history.max_file_bytes ({}) on a filesystem without reflinks",
                crate::content::human_size(self.history.max_file_bytes)
            ))),
            Err(e) => {
                let _ = remove_any(&to);
                tracing::warn!(path = %p, "keeping the version an {op} replaces: {e}");
                None
            }
        };
        crate::crash_point!("history.kept");
        if how != Keep::Link && entry.as_ref().is_some_and(|e| e.blob.is_some()) {
            let mut seen = self.copied_from.lock();
            if seen.len() >= COPIES_REMEMBERED {
                seen.clear();
            }
            seen.insert(p.as_str().to_string(), stamp);
        }
        // At once (with any waiting): its content is kept already, and content without an
        // entry is what a crash should leave only in the moment between the two.
        if let Some(e) = entry {
            self.record_soon(vec![e]);
            self.flush_entries();
        }
    }
}

impl Drop for Stores {
    /// A process that ends (a one-shot command, a daemon stopping) records what waits.
    fn drop(&mut self) {
        self.flush_entries();
    }
}

/// [`Keep::Swap`]: move the inode of regular file `from` (whose metadata is `md`) to `to`, a
/// new name in the history, leaving an empty file with its owner, mode and extended
/// attributes at `from`, in one `renameat2(RENAME_EXCHANGE)`. `Ok(false)`, with nothing
/// changed, when that would be seen: another link, or a descriptor of it open on this host
/// (a process holding it open must see the very file cut, as POSIX says; the write lease is
/// refused then, and while it is held a new open waits). Also `Ok(false)` where the
/// filesystem or the owner allows no lease or no exchange: the caller copies instead.
///
/// The file is named by its path (`name`) in [`BLOB_PATH_XATTR`] before the exchange, which
/// takes the attribute into the history with it: a crash between the exchange and the entry
/// leaves content `fsck --repair` adopts, not content it clears.
fn swap_out(from: &Path, to: &Path, md: &std::fs::Metadata, name: &str) -> std::io::Result<bool> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    if md.nlink() != 1 {
        return Ok(false);
    }
    let live = std::fs::File::open(from)?;
    let st = live.metadata()?;
    if (st.dev(), st.ino()) != (md.dev(), md.ino()) || crate::sys::write_lease(&live).is_err() {
        return Ok(false);
    }
    let empty = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)?;
    let made = (|| {
        std::os::unix::fs::fchown(&empty, Some(st.uid()), Some(st.gid()))?;
        // After the chown, which clears set-id bits.
        empty.set_permissions(std::fs::Permissions::from_mode(st.mode() & 0o7777))?;
        crate::sys::copy_xattrs(&live, &empty)?;
        let tag = std::ffi::OsStr::new(BLOB_PATH_XATTR);
        // Left on the file by a crash in this very window before: not the new file's.
        let _ = crate::sys::removexattr(&empty, tag);
        crate::sys::setxattr(&live, tag, name.as_bytes(), 0)?;
        crate::sys::renameat(
            crate::sys::CWD,
            to,
            crate::sys::CWD,
            from,
            crate::sys::RenameFlags::EXCHANGE,
        )
        .inspect_err(|_| {
            let _ = crate::sys::removexattr(&live, tag);
        })
    })();
    if made.is_err() {
        drop(empty);
        let _ = std::fs::remove_file(to);
        return Ok(false);
    }
    // Closing `live` gives the lease back: an open waiting for it finds the empty file.
    Ok(true)
}

/// Remove the file or tree at `p` (gone already is fine).
pub(crate) fn remove_any(p: &Path) -> std::io::Result<()> {
    let r = match std::fs::symlink_metadata(p) {
        Ok(md) if md.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(e) => Err(e),
    };
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// Bytes of the regular files under `dir`.
fn tree_bytes(dir: &Path) -> u64 {
    walkdir(dir)
        .map(|(_, md)| if md.is_file() { md.len() } else { 0 })
        .sum()
}

/// Every entry under `dir` (not `dir` itself), parents before children, with its metadata.
pub(crate) fn walkdir(dir: &Path) -> impl Iterator<Item = (PathBuf, std::fs::Metadata)> {
    let mut stack = vec![dir.to_path_buf()];
    let mut out = Vec::new();
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(md) = e.metadata() else { continue };
            if md.is_dir() {
                stack.push(e.path());
            }
            out.push((e.path(), md));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.into_iter()
}

/// How long the history must not have changed before its new entries are hashed: the
/// hashing reads every byte kept, and the user's foreground work (an `rm -rf` recording an
/// entry per file, a tree of files being made and renamed) comes first. Measured: 2 s put
/// the metadata job with history at 0.77–0.83× of without, 30 s at 1.03×.
/// `VIKINGFS_HISTORY_HASH_QUIET_MS` shortens it (the tests).
pub(crate) fn hash_when_quiet() -> Duration {
    static QUIET: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *QUIET.get_or_init(|| {
        std::env::var("VIKINGFS_HISTORY_HASH_QUIET_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(Duration::from_secs(30), Duration::from_millis)
    })
}

/// The pause between two batches of the `history_hash` job.
const HASH_PAUSE: Duration = Duration::from_millis(50);

/// Entries hashed per run of the `history_hash` job, and per journal write.
const HASH_BATCH: usize = 256;

impl Stores {
    /// The `history_hash` job: the SHA-256 of every kept content without one yet, oldest
    /// first, a batch per journal write, until none is left. Idempotent: a run that died
    /// leaves the rest for the next, and content pruned meanwhile is passed over. Returns
    /// how many entries got their hash.
    pub(crate) fn hash_history(&self) -> Result<usize> {
        let mut done = 0;
        let quiet = self.history_generation();
        loop {
            // The user's work comes first: once the history changes again (an `rm -rf`, an
            // undo), hashing stops; the history thread queues it again when all is quiet.
            if self.history_generation() != quiet {
                return Ok(done);
            }
            let todo = self.journal.unhashed(HASH_BATCH)?;
            if todo.is_empty() {
                return Ok(done);
            }
            let mut hashes = Vec::new();
            let mut gone = 0;
            for (id, blob) in &todo {
                match content_hash(&self.blob_path(blob)) {
                    Ok(h) => hashes.push((*id, h)),
                    // Pruned since: its entry goes with it (or fsck names it).
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => gone += 1,
                    Err(e) => return Err(OpsError::io(self.blob_path(blob), e)),
                }
            }
            done += hashes.len();
            self.journal.set_hashes(&hashes)?;
            if gone == todo.len() {
                return Ok(done); // only content pruned meanwhile: nothing more to do now
            }
            // Between batches, the other workers and the mount have the cores.
            std::thread::sleep(HASH_PAUSE);
        }
    }

    /// Queue the `history_hash` job (one pending at a time: it coalesces).
    pub(crate) fn hash_history_soon(&self) {
        let job = crate::queue::NewJob::new(
            crate::queue::HISTORY_HASH,
            Some(crate::queue::HISTORY_HASH.to_string()),
            serde_json::json!({}),
        );
        if let Err(e) = self.queue.enqueue_many(&[job]) {
            tracing::debug!("history_hash job not queued: {e}");
        }
    }

    /// The command line of process `pid` (read once per process: an `rm -rf` asks for
    /// each file it removes, and may have exited by the time its last entry is recorded).
    pub(crate) fn command_of(&self, pid: u32) -> Option<String> {
        // An API request: who it is for, not the daemon's command line.
        if let Some(c) = crate::process::caller() {
            return Some(c);
        }
        let mut last = self.last_command.lock();
        if let Some((p, c)) = &*last {
            if *p == pid {
                return c.clone();
            }
        }
        let c = cmdline(pid);
        *last = Some((pid, c.clone()));
        c
    }
}

/// The SHA-256 (hex) of kept content at `p`: a file's bytes; a symlink's target; a tree's
/// lines `kind path hash` of everything in it, sorted by path (so a tree kept twice with the
/// same files, modes aside, hashes the same).
pub(crate) fn content_hash(p: &Path) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    let md = std::fs::symlink_metadata(p)?;
    let one = |f: &Path, md: &std::fs::Metadata| -> std::io::Result<(&'static str, String)> {
        if md.file_type().is_symlink() {
            use std::os::unix::ffi::OsStrExt;
            let t = std::fs::read_link(f)?;
            return Ok((
                "symlink",
                hex::encode(Sha256::digest(t.as_os_str().as_bytes())),
            ));
        }
        if md.is_dir() {
            return Ok(("dir", String::new()));
        }
        let mut h = Sha256::new();
        let mut file = std::fs::File::open(f)?;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = std::io::Read::read(&mut file, &mut buf)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
        Ok(("file", hex::encode(h.finalize())))
    };
    if !md.is_dir() {
        return Ok(one(p, &md)?.1);
    }
    let mut lines = Vec::new();
    for (f, m) in walkdir(p) {
        let rel = f
            .strip_prefix(p)
            .unwrap_or(&f)
            .to_string_lossy()
            .into_owned();
        let (kind, h) = one(&f, &m)?;
        lines.push(format!("{kind} {rel} {h}\n"));
    }
    lines.sort();
    Ok(hex::encode(Sha256::digest(lines.concat().as_bytes())))
}

/// The command line of process `pid`, its arguments joined by spaces.
fn cmdline(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    (!args.is_empty()).then(|| args.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(at_ms: i64, size: u64) -> Recorded {
        Recorded {
            id: at_ms,
            at_ms,
            sha256: None,
            entry: Entry {
                op: "rm".into(),
                path: format!("resources/f{at_ms}"),
                new_path: None,
                born_ms: None,
                kind: "file".into(),
                size,
                blob: Some(format!("b{at_ms}")),
                reason: None,
                mode: 0o644,
                uid: 0,
                gid: 0,
                pid: None,
                cmd: None,
            },
        }
    }

    #[test]
    fn pressure_gives_back_what_is_short_and_no_more() {
        let all: Vec<_> = (1..=8).map(|i| kept(i, 100)).collect();
        // Nothing old, nothing over the cap: only the shortfall decides.
        assert_eq!(to_prune(&all, 10, i64::MAX, u64::MAX, (0, 0)), 0);
        assert_eq!(to_prune(&all, 10, i64::MAX, u64::MAX, (250, 0)), 3);
        assert_eq!(to_prune(&all, 10, i64::MAX, u64::MAX, (0, 2)), 2);
        assert_eq!(to_prune(&all, 10, i64::MAX, u64::MAX, (10_000, 0)), 8);
    }

    /// A 100 GiB disk with `free` bytes free (inodes to spare): line 1 GiB, urgent under
    /// 256 MiB.
    fn disk(free: u64) -> Disk {
        Disk {
            free,
            total: 100 << 30,
            ifree: 1 << 20,
            inodes: 1 << 21,
        }
    }

    #[test]
    fn a_dip_gives_back_nothing_and_keeps_removals() {
        // 680 MB free: 344 MB short of the line, but only for a moment.
        let d = disk(680_000_000);
        assert!(d.below() && !d.urgent());
        assert_eq!(to_give_back(&d, false, (10 << 30, 1000)), (0, 0));
        assert!(!d.yields(false));
        // Once it lasts, it is a shortage: nothing new is kept.
        assert!(d.yields(true));
    }

    #[test]
    fn a_shortage_gives_back_the_shortfall_when_the_history_covers_it() {
        let d = disk(680_000_000);
        let short = (1u64 << 30) - 680_000_000;
        assert_eq!(to_give_back(&d, true, (10 << 30, 1000)), (short, 0));
        // 239 KiB of history cannot put the disk back on the line: nothing goes.
        assert_eq!(to_give_back(&d, true, (239 << 10, 404)), (0, 0));
        // Urgent (under a quarter of the line free): at once, whether or not it lasted.
        let d = disk(100 << 20);
        assert!(d.urgent() && d.yields(false));
        assert_eq!(
            to_give_back(&d, false, (2 << 30, 10)),
            ((1 << 30) - (100 << 20), 0)
        );
        assert_eq!(to_give_back(&d, false, (239 << 10, 404)), (0, 0));
    }

    #[test]
    fn the_last_resort_gives_back_a_chunk_whatever_the_history() {
        // All but full: what is missing to one reserve chunk, even from a small history.
        let d = disk(512 << 10);
        let chunk = super::super::reserve::CHUNK;
        assert_eq!(
            to_give_back(&d, false, (239 << 10, 404)),
            (chunk - (512 << 10), 0)
        );
        // Out of inodes.
        let d = Disk {
            ifree: 10,
            ..disk(50 << 30)
        };
        assert_eq!(to_give_back(&d, false, (0, 0)), (0, LAST_INODES - 10));
        // A small filesystem: the line itself is under a chunk.
        let d = Disk {
            free: 1 << 20,
            total: 6 << 20,
            ifree: 1000,
            inodes: 1000,
        };
        assert_eq!(d.line().0, 3 << 19);
        assert_eq!(to_give_back(&d, false, (0, 0)), (1 << 19, 0));
    }

    #[test]
    fn age_and_cap_prune_the_oldest() {
        let all: Vec<_> = (1..=8).map(|i| kept(i, 100)).collect();
        // At 10 with keep 6: entries recorded before 4 are past their time.
        assert_eq!(to_prune(&all, 10, 6, u64::MAX, (0, 0)), 3);
        // 800 bytes kept, cap 500: the three oldest go.
        assert_eq!(to_prune(&all, 10, i64::MAX, 500, (0, 0)), 3);
    }
}
