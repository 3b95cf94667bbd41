//! When the history gives back what it keeps: retention (`history.keep`, `history.max_bytes`)
//! and disk space. The content and its entries are [`super::history`]'s; this decides which
//! entries go and when, oldest first, and only ever the workspace's own.
//!
//! The rules (docs/semantics.md, "Undo", and docs/history.md say the same):
//! - Retention: entries older than `history.keep` and the oldest beyond `history.max_bytes`
//!   go, whether or not anything else happens. The daemon's history thread
//!   ([`Stores::tend_history`], every [`super::history::ENTRIES_EVERY`]) keeps a running
//!   tally — the last count of every row plus what this process has recorded since — and
//!   prunes at once when the tally is over the cap or the oldest entry it knows of is past
//!   its time; it counts every row again every [`prune_every`] (a minute), which also
//!   catches what other processes recorded. Without a daemon, a batch of removals prunes
//!   (once a minute at most). Logged at INFO.
//! - The line: the history wants a quarter of the filesystem (at most 1 GiB) and a tenth of
//!   its inodes (at most 65,536) free; how far the disk is below that is the shortfall. The
//!   line is sized for what a writer under passthrough (never seen by the daemon) may fill
//!   in a second; the daemon looks five times a second.
//! - A dip — below the line for less than [`pressure_lasts`] (10 s) at every look, with more
//!   than a quarter of the line still free — changes nothing: every entry stays and
//!   removals are still kept (a rename into the history costs no space). Another program's
//!   temporary files come and go; what the history keeps must not go with them.
//! - A shortage — below the line at every look for 10 s, or less than a quarter of the line
//!   free (what a writer filling the line in a second takes between two looks): nothing
//!   new is kept (a removal frees its space, as without history), and the oldest entries
//!   totalling the shortfall are given back, so that the disk is on the line again — only when the
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

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::history::to_prune;
use super::reserve::CHUNK;
use super::{Result, Stores};
use crate::errno::ToErrno;
use crate::journal::Recorded;

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

/// The free bytes a filesystem of `total` bytes keeps for the history's line ([`Disk::line`]):
/// what else the daemon writes for a while (an unpacked upload) stays above it.
pub fn pressure_line(total: u64) -> u64 {
    (1u64 << 30).min(total / 4)
}

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
        (pressure_line(self.total), (self.inodes / 10).min(1 << 16))
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
            CHUNK.min(b).saturating_sub(self.free),
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

/// `ms` (since the epoch) as RFC 3339, as `history` prints times.
fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| ms.to_string())
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
                rfc3339(gone[0].at_ms),
                rfc3339(gone[went - 1].at_ms),
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

    /// Whether the history yields now (a shortage or the last resort): nothing new is kept,
    /// and a removal frees its space as without history.
    pub(super) fn history_yields(&self) -> bool {
        self.look().is_some_and(|(d, lasting)| d.yields(lasting))
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
            need.0 = need.0.max(CHUNK);
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
                rfc3339(g.oldest_ms),
                rfc3339(g.newest_ms),
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let chunk = CHUNK;
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
}
