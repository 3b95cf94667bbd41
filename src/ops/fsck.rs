//! `vikingfs fsck [--repair]`: compare what is derived with the files it is derived from.
//!
//! Finds records without files, files without (current) records, directories without
//! summaries, dead and expired jobs, stale and orphaned lock files, interrupted operations and
//! their leftovers. Repair rebuilds only what is derived from the files (records, summaries,
//! jobs, locks) and removes only vikingfs's own scratch copies: it never deletes a source file.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::jobs::{embed_job, semantic_job, NewJob};
use super::{stat_version, Ops, Result};
use crate::index::Level;
use crate::lock::codec::{liveness, Liveness};
use crate::uri::VPath;

/// A temp file in the data tree this old is a leftover of a dead writer, not a write in flight.
const TEMP_GRACE: Duration = Duration::from_secs(60);

/// A lifecycle lock this old without a lifecycle in the journal is an orphan.
const ORPHAN_GRACE: Duration = Duration::from_secs(5);

/// One finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Problem {
    /// An index record whose source is gone (or is the other kind).
    OrphanRecord { uri: String, level: String },
    /// An index record of a path the ignore rules exclude (`.vikingignore`, the defaults).
    IgnoredRecord { uri: String, level: String },
    /// A file without a content record, or whose record was built from an older version.
    Unindexed { uri: String, stale: bool },
    /// A directory without its summaries or their records, or whose records are older than
    /// its `.abstract.md`.
    MissingSummary { uri: String, stale: bool },
    /// A summary of a directory that holds every user's tree (`user`), which an older vikingfs
    /// wrote: it quotes each user's abstract (repair queues its removal).
    SharedSummary { uri: String },
    /// A job that failed for good.
    DeadJob {
        queue: String,
        key: Option<String>,
        error: String,
    },
    /// A history entry whose kept content is gone.
    HistoryWithoutContent { uri: String, blob: String },
    /// Kept content no entry or open intent names (a prune cut short).
    ContentWithoutHistory { blob: String },
    /// A history entry whose kept content the `history_hash` job could not read (`reason`):
    /// the job passes it over from then on; a repair hashes it again.
    UnhashableContent {
        uri: String,
        blob: String,
        reason: String,
    },
    /// Jobs whose worker stopped renewing its lease (handed on to the next worker): `alive`,
    /// the claimant's pid when it is a live process of this host.
    ExpiredJobs {
        queue: String,
        count: u64,
        alive: Option<u32>,
    },
    /// A lock file whose owner is dead or expired.
    StaleLock {
        uri: String,
        owner: String,
        reason: String,
    },
    /// A lock file that is not a token (never removed automatically).
    CorruptLock { uri: String, reason: String },
    /// A lifecycle lock whose lifecycle is not in the journal.
    OrphanLifecycleLock { uri: String, owner: String },
    /// A lifecycle none of whose jobs can run any more.
    IdleLifecycle { uri: String, handle: String },
    /// An rm, mv or add that did not finish.
    Interrupted { op: String, owner_alive: bool },
    /// Scratch left behind by a dead process (staging, removed trees, temp files).
    Leftover { path: PathBuf },
    /// A version an undo was putting back when its process died (a temporary beside the
    /// target, never in place): the undo's intent, if still open, puts it back whole.
    HalfRestored { path: PathBuf },
    /// The index's records, lexical rows and packed vectors disagree (repair rebuilds the
    /// index from the files).
    IndexInconsistent { detail: String },
    /// Records without a vector of the configured model and no job queued to make one.
    MissingVectors { count: usize },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::OrphanRecord { uri, level } => {
                write!(f, "record without its source: {uri} ({level})")
            }
            Problem::IgnoredRecord { uri, level } => {
                write!(f, "record of an ignored path: {uri} ({level})")
            }
            Problem::Unindexed { uri, stale: false } => write!(f, "file without a record: {uri}"),
            Problem::Unindexed { uri, stale: true } => {
                write!(f, "record older than its file: {uri}")
            }
            Problem::MissingSummary { uri, stale: false } => {
                write!(f, "directory without summaries: {uri}")
            }
            Problem::MissingSummary { uri, stale: true } => {
                write!(f, "summary records older than the summary: {uri}")
            }
            Problem::SharedSummary { uri } => write!(
                f,
                "summary of a directory holding every user's tree (an older vikingfs wrote \
                 it; it quotes each user): {uri}"
            ),
            Problem::DeadJob { queue, key, error } => write!(
                f,
                "dead {queue} job {}: {error}",
                key.as_deref().unwrap_or("(no key)")
            ),
            Problem::ExpiredJobs {
                queue,
                count,
                alive: Some(pid),
            } => write!(
                f,
                "{count} {queue} job(s) whose lease ran out while their worker (pid {pid}) \
                 is alive: it hung, or could not renew the lease (as on a full disk); the \
                 next claim takes them"
            ),
            Problem::ExpiredJobs {
                queue,
                count,
                alive: None,
            } => write!(
                f,
                "{count} {queue} job(s) whose lease expired (their worker exited, or runs \
                 on another host and stopped renewing; the next claim takes them)"
            ),
            Problem::HistoryWithoutContent { uri, blob } => {
                write!(f, "history entry of {uri} has lost its content ({blob})")
            }
            Problem::ContentWithoutHistory { blob } => {
                write!(f, "kept content {blob} has no history entry")
            }
            Problem::UnhashableContent { uri, blob, reason } => write!(
                f,
                "history entry of {uri}: its content ({blob}) could not be hashed: {reason} \
                 (the hashing job passes it over; make it readable by the daemon's user, \
                 then `vikingfs fsck --repair` hashes it)"
            ),
            Problem::StaleLock { uri, owner, reason } => {
                write!(f, "stale lock on {uri} by {owner}: {reason}")
            }
            Problem::CorruptLock { uri, reason } => write!(f, "corrupt lock on {uri}: {reason}"),
            Problem::OrphanLifecycleLock { uri, owner } => {
                write!(f, "lifecycle lock on {uri} by {owner} with no lifecycle")
            }
            Problem::IdleLifecycle { uri, handle } => {
                write!(
                    f,
                    "lifecycle of {uri} ({handle}) with no job left to finish it"
                )
            }
            Problem::Interrupted { op, owner_alive } => write!(
                f,
                "interrupted operation: {op}{}",
                if *owner_alive { " (still running)" } else { "" }
            ),
            Problem::Leftover { path } => write!(f, "leftover scratch: {}", path.display()),
            Problem::HalfRestored { path } => {
                write!(f, "half-done restore (undo) left: {}", path.display())
            }
            Problem::IndexInconsistent { detail } => write!(f, "index inconsistent: {detail}"),
            Problem::MissingVectors { count } => {
                write!(f, "{count} record(s) without a vector and none queued")
            }
        }
    }
}

/// What fsck found and, with repair, what it did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FsckReport {
    pub problems: Vec<Problem>,
    /// Actions taken by a repair.
    pub repaired: usize,
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

impl Ops {
    /// Check the workspace; with `repair`, fix what is derived (with `break_corrupt` too,
    /// remove lock files that hold no token).
    pub fn fsck(&self, repair: bool, break_corrupt: bool) -> Result<FsckReport> {
        let mut rep = FsckReport::default();
        if repair {
            rep.repaired += self.recover()?;
        }
        // Interrupted operations.
        let me = super::add::process_owner();
        for row in self.journal.intents_owned()? {
            // One this process claimed and could not finish (the recovery above) is not
            // running.
            let alive = !matches!(liveness(&row.owner), Liveness::Dead(_)) && row.owner != me;
            rep.problems.push(Problem::Interrupted {
                op: row.intent.describe(),
                owner_alive: alive,
            });
        }
        let check = Check(self);
        check.leftovers(repair, &mut rep)?;
        check.records(repair, &mut rep)?;
        check.lock_files(repair, &mut rep)?;
        if repair && break_corrupt {
            rep.repaired += self.locks.clear_corrupt()?.len();
        }
        check.jobs(repair, &mut rep)?;
        check.history(repair, &mut rep)?;
        if repair {
            rep.repaired += self.sweep_lifecycles()?;
        } else {
            for lc in self.idle_lifecycles()? {
                rep.problems.push(Problem::IdleLifecycle {
                    uri: lc.target.uri(),
                    handle: lc.handle,
                });
            }
        }
        Ok(rep)
    }
}

/// The checks of one [`Ops::fsck`], each over the whole engine it reaches through `Deref`.
struct Check<'a>(&'a Ops);

impl std::ops::Deref for Check<'_> {
    type Target = Ops;

    fn deref(&self) -> &Ops {
        self.0
    }
}

impl Check<'_> {
    fn leftovers(&self, repair: bool, rep: &mut FsckReport) -> Result<()> {
        let staging_in_use: HashSet<PathBuf> = self
            .journal
            .intents()?
            .into_iter()
            .filter_map(|(_, i, _)| match i {
                crate::journal::Intent::Add { temp, .. } => Some(temp),
                _ => None,
            })
            .collect();
        // The undos in progress (their process lives): their temporaries are not left over.
        let undoing: Vec<String> = self
            .journal
            .intents_owned()?
            .into_iter()
            .filter(|r| {
                !matches!(liveness(&r.owner), Liveness::Dead(_))
                    && r.owner != super::add::process_owner()
            })
            .filter_map(|r| match r.intent {
                crate::journal::Intent::Undo { token, .. } => Some(token),
                _ => None,
            })
            .collect();
        let mut half = Vec::new();
        let mut found = Vec::new();
        if let Ok(rd) = std::fs::read_dir(self.ws.tmp_dir()) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let path = e.path();
                let leftover = if let Some(rest) = name.strip_prefix("add-") {
                    let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
                    !staging_in_use.contains(&path) && !pid.is_some_and(pid_alive)
                } else {
                    name.starts_with("rm-")
                };
                if leftover {
                    found.push(path);
                }
            }
        }
        // Temp files of atomic writes whose writer died.
        let mut stack = vec![self.ws.data_root()];
        while let Some(dir) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Ok(ft) = e.file_type() else { continue };
                if let Some(rest) = name.strip_prefix(super::undo::TEMP_PREFIX) {
                    // A file or a whole tree, never descended into.
                    if !undoing.iter().any(|t| rest.starts_with(&format!("{t}."))) {
                        half.push(e.path());
                    }
                } else if ft.is_dir() {
                    stack.push(e.path());
                } else if name.starts_with(".vikingfs.tmp.") {
                    let old = e
                        .metadata()
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age > TEMP_GRACE);
                    if old {
                        found.push(e.path());
                    }
                }
            }
        }
        for path in found {
            if repair {
                let r = if path.is_dir() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
                match r {
                    Ok(()) => rep.repaired += 1,
                    Err(e) => tracing::warn!(path = %path.display(), "removing leftover: {e}"),
                }
            }
            rep.problems.push(Problem::Leftover { path });
        }
        // A repair recovered first, so the undo whose temporary this is was finished (or
        // cannot be): what it left is only scratch now.
        for path in half {
            if repair {
                match super::history::remove_any(&path) {
                    Ok(()) => rep.repaired += 1,
                    Err(e) => tracing::warn!(path = %path.display(), "removing leftover: {e}"),
                }
            }
            rep.problems.push(Problem::HalfRestored { path });
        }
        Ok(())
    }

    fn records(&self, repair: bool, rep: &mut FsckReport) -> Result<()> {
        let mut files = Vec::new();
        let mut dirs = Vec::new();
        for scope in crate::uri::SCOPES {
            let s = VPath::root().join(scope)?;
            if self.lstat(&s)?.is_some() {
                dirs.push(s.clone());
                self.walk(&s, &mut files, &mut dirs)?;
            }
        }
        let mut have: HashMap<(VPath, Level), ()> = HashMap::new();
        for (uri, level) in self.index.all_uris()? {
            have.insert((uri, level), ());
        }
        // Records without their source.
        for (uri, level) in have.keys() {
            let live = match self.lstat(uri)? {
                Some(m) => m.is_dir() == level.names_directory(),
                None => false,
            };
            if live && !self.derive.derives(uri, level.names_directory()) {
                if repair {
                    self.index.delete(uri)?;
                    rep.repaired += 1;
                }
                rep.problems.push(Problem::IgnoredRecord {
                    uri: uri.uri(),
                    level: level.as_str().to_string(),
                });
                continue;
            }
            if !live {
                if repair {
                    if let Some(v) = self.index.version_of(uri, *level)? {
                        // By version: a record rebuilt meanwhile survives.
                        if self.lstat(uri)?.is_none() {
                            self.index.delete_if_version(uri, *level, &v)?;
                            rep.repaired += 1;
                        }
                    }
                }
                rep.problems.push(Problem::OrphanRecord {
                    uri: uri.uri(),
                    level: level.as_str().to_string(),
                });
            }
        }
        let mut jobs: Vec<NewJob> = Vec::new();
        // Summaries where none belongs (`has_summary`): an older vikingfs summarised `user`.
        let user = VPath::root().join("user")?;
        let shared = [
            (super::jobs::ABSTRACT_FILE, Level::Abstract),
            (super::jobs::OVERVIEW_FILE, Level::Overview),
        ]
        .into_iter()
        .map(|(file, level)| -> Result<bool> {
            Ok(self.lstat(&user.join(file)?)?.is_some()
                || have.contains_key(&(user.clone(), level)))
        })
        .collect::<Result<Vec<bool>>>()?;
        if shared.contains(&true) {
            rep.problems
                .push(Problem::SharedSummary { uri: user.uri() });
            jobs.push(semantic_job(&user, None));
        }
        for f in &files {
            let Some(meta) = self.lstat(f)? else {
                continue;
            };
            let current = stat_version(&meta);
            match self.index.version_of(f, Level::Content)? {
                Some(v) if v == current => {}
                // Not text: never indexed, only named in its directory's summary.
                None if self.read_text(f, self.derive.max_file_bytes)?.is_none() => {}
                other => {
                    rep.problems.push(Problem::Unindexed {
                        uri: f.uri(),
                        stale: other.is_some(),
                    });
                    jobs.push(embed_job(f, None));
                }
            }
        }
        // Directories with a source file somewhere below have summaries; empty ones (a fresh
        // scope) have nothing to summarise yet.
        let mut needs: HashSet<VPath> = HashSet::new();
        for f in &files {
            let mut cur = f.parent();
            while let Some(d) = cur.filter(|d| self.derive.summarised(d)) {
                if !needs.insert(d.clone()) {
                    break;
                }
                cur = d.parent();
            }
        }
        for d in &dirs {
            if !needs.contains(d) {
                continue;
            }
            let abs = self.lstat(&d.join(super::jobs::ABSTRACT_FILE)?)?;
            let current = abs.map(|m| stat_version(&m));
            let missing = current.is_none() || !have.contains_key(&(d.clone(), Level::Abstract));
            if missing || self.index.version_of(d, Level::Abstract)? != current {
                rep.problems.push(Problem::MissingSummary {
                    uri: d.uri(),
                    stale: !missing,
                });
                jobs.push(semantic_job(d, None));
            }
        }
        if repair && !jobs.is_empty() {
            self.queue.enqueue_many(&jobs)?;
            rep.repaired += jobs.len();
        }
        self.index_shape(repair, rep)
    }

    /// The index's own invariants (records, lexical rows and packed vectors one for one) and
    /// the vectors' backlog.
    fn index_shape(&self, repair: bool, rep: &mut FsckReport) -> Result<()> {
        let problems = self.index.verify()?;
        if !problems.is_empty() {
            for detail in &problems {
                rep.problems.push(Problem::IndexInconsistent {
                    detail: detail.clone(),
                });
            }
            if repair {
                // Derived: drop every record and rebuild them from the files.
                self.index.delete_prefix(&VPath::root())?;
                self.reindex(&VPath::root(), &mut |_, _| {})?;
                rep.repaired += 1;
            }
            return Ok(());
        }
        if self.embedder.is_some() && self.index.has_dense() {
            let mut lost = 0;
            for (uri, level) in self.index.missing_vectors()? {
                let key = super::jobs::dense_key(&uri, level);
                if !self.queue.has_pending(crate::queue::DENSE, &key)? {
                    lost += 1;
                }
            }
            if lost > 0 {
                rep.problems.push(Problem::MissingVectors { count: lost });
                if repair {
                    self.backfill_vectors()?;
                    rep.repaired += 1;
                }
            }
        }
        Ok(())
    }

    fn lock_files(&self, repair: bool, rep: &mut FsckReport) -> Result<()> {
        let lifecycles: HashSet<String> = self
            .journal
            .lifecycles()?
            .into_iter()
            .map(|l| l.handle)
            .collect();
        for l in self.locks.list()? {
            if l.stale {
                rep.problems.push(Problem::StaleLock {
                    uri: l.uri.clone(),
                    owner: l.owner.clone(),
                    reason: l.stale_reason.clone().unwrap_or_default(),
                });
            } else if l.owner.is_empty() && l.stale_reason.is_some() {
                rep.problems.push(Problem::CorruptLock {
                    uri: l.uri.clone(),
                    reason: l.stale_reason.clone().unwrap_or_default(),
                });
            } else if l.owner.starts_with("vfs-lifecycle-")
                && !lifecycles.contains(&l.owner)
                // An add journals its lifecycle microseconds after locking: not that one.
                && l.age_secs > ORPHAN_GRACE.as_secs_f64()
            {
                if repair {
                    if let Ok(p) = self.ws.parse_uri(&l.uri) {
                        if self.locks.release_owned(&p, &l.owner)? {
                            rep.repaired += 1;
                        }
                    }
                }
                rep.problems.push(Problem::OrphanLifecycleLock {
                    uri: l.uri.clone(),
                    owner: l.owner.clone(),
                });
            }
        }
        if repair {
            rep.repaired += self.locks.clear_stale()?;
        }
        Ok(())
    }

    /// Entries against the content kept: an entry whose blob is gone is forgotten; an entry
    /// whose content the hashing job could not read is hashed again (named again, with the
    /// new reason, when that fails too); a blob no entry and no open intent names is adopted
    /// when it names its path (a removal a crash cut short before its entry), else removed (a
    /// prune cut short).
    fn history(&self, repair: bool, rep: &mut FsckReport) -> Result<()> {
        let entries = self.stores().history(None, 0)?;
        let named: HashSet<String> = entries
            .iter()
            .filter_map(|r| r.entry.blob.clone())
            .chain(
                self.journal
                    .intents()?
                    .into_iter()
                    .filter_map(|(_, i, _)| match i {
                        crate::journal::Intent::Rm { blob, .. } => blob,
                        _ => None,
                    }),
            )
            .collect();
        let (mut lost, mut unhashed) = (Vec::new(), Vec::new());
        for r in &entries {
            let Some(b) = &r.entry.blob else { continue };
            // Content gone is named so, once, whether or not the hashing job met it first.
            if std::fs::symlink_metadata(self.blob_path(b)).is_err() {
                rep.problems.push(Problem::HistoryWithoutContent {
                    uri: format!("viking://{}", r.entry.path),
                    blob: b.clone(),
                });
                lost.push(r.id);
            } else if let Some(reason) = &r.hash_error {
                rep.problems.push(Problem::UnhashableContent {
                    uri: format!("viking://{}", r.entry.path),
                    blob: b.clone(),
                    reason: reason.clone(),
                });
                unhashed.push((r.id, self.blob_path(b)));
            }
        }
        let mut orphans = Vec::new();
        for e in std::fs::read_dir(self.blobs_dir())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            if !named.contains(&name) && !in_flight(&e.path()) {
                rep.problems
                    .push(Problem::ContentWithoutHistory { blob: name });
                orphans.push(e.path());
            }
        }
        if repair {
            self.journal.forget_history(&lost)?;
            rep.repaired += lost.len();
            for (id, p) in unhashed {
                match super::history::content_hash(&p) {
                    Ok(h) => {
                        self.journal.set_hashes(&[(id, h)])?;
                        rep.repaired += 1;
                    }
                    Err(e) => self.journal.set_hash_failures(&[(id, e.to_string())])?,
                }
            }
            for p in orphans {
                // A removal's blob names its path (a crash came before its entry): adopted.
                let named = crate::sys::path_xattr(&p, super::history::BLOB_PATH_XATTR)
                    .and_then(|v| String::from_utf8(v).ok());
                let blob = p.file_name().map(|n| n.to_string_lossy().into_owned());
                let entry = named
                    .zip(blob)
                    .and_then(|(path, b)| self.removal_entry(&path, &b, None, None));
                match entry {
                    Some(e) => self.journal.record(&[e])?,
                    None => {
                        super::history::remove_any(&p).map_err(|e| super::OpsError::io(&p, e))?
                    }
                }
                rep.repaired += 1;
            }
        }
        Ok(())
    }

    fn jobs(&self, repair: bool, rep: &mut FsckReport) -> Result<()> {
        for s in self.queue.stats()? {
            for d in &s.dead_jobs {
                rep.problems.push(Problem::DeadJob {
                    queue: s.queue.clone(),
                    key: d.key.clone(),
                    error: d.error.clone(),
                });
            }
            // One line per kind of claimant: a live process of this host by its pid, and
            // every other claimant (exited, or another host's) together.
            let mut gone = 0;
            for (worker, count) in &s.expired_by {
                match crate::queue::Queue::live_claimant(worker) {
                    Some(pid) => rep.problems.push(Problem::ExpiredJobs {
                        queue: s.queue.clone(),
                        count: *count,
                        alive: Some(pid),
                    }),
                    None => gone += count,
                }
            }
            if gone > 0 {
                rep.problems.push(Problem::ExpiredJobs {
                    queue: s.queue.clone(),
                    count: gone,
                    alive: None,
                });
            }
        }
        if repair {
            rep.repaired += self.queue.retry_dead(None)?;
        }
        Ok(())
    }
}

/// How long content kept without an entry may be on its way to one (an overwrite records
/// its entry right after the copy; a prune deletes the content right after the entry).
/// `VIKINGFS_HISTORY_IN_FLIGHT_MS` shortens it (the tests of fsck).
fn in_flight_for() -> std::time::Duration {
    std::env::var("VIKINGFS_HISTORY_IN_FLIGHT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(
            std::time::Duration::from_secs(10),
            std::time::Duration::from_millis,
        )
}

/// Is the kept content at `p` in the middle of being kept or pruned: gone since it was
/// listed, or moved or copied there moments ago (its ctime)? Neither is reported, nor
/// removed by a repair.
fn in_flight(p: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(md) = std::fs::symlink_metadata(p) else {
        return true;
    };
    let changed = std::time::UNIX_EPOCH + std::time::Duration::from_secs(md.ctime().max(0) as u64);
    changed.elapsed().map_or(true, |age| age < in_flight_for())
}
