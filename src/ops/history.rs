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
//!   history of the stores it opened, never another workspace's. When it prunes (retention,
//!   disk space) is [`super::prune`]'s.

use std::path::{Path, PathBuf};
use std::time::Duration;

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

/// An entry as `vikingfs history` shows it: the entry as recorded, and when its operation
/// happened ([`Stores::history_view`]), by which the entries are ordered.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Shown {
    /// When the operation happened (ms since the epoch): at or before `at_ms`, when it was
    /// recorded. 0 from a daemon older than this field (the CLI then shows `at_ms`).
    #[serde(default)]
    pub happened_ms: i64,
    #[serde(flatten)]
    pub recorded: Recorded,
}

/// The extended attribute on a kept file naming the path it was removed from (what an
/// `fsck --repair` adopts an entry-less blob by).
pub(crate) const BLOB_PATH_XATTR: &str = "user.vikingfs.path";

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

    /// The entries as `vikingfs history` shows them ([`Shown`]): newest first by when each
    /// operation happened, and, unless `all`, without the entries of paths the ignore rules
    /// ignore (`.vikingignore`, the defaults: a `git commit`'s `.git/index.lock` and
    /// `tmp_obj_*`, an editor's swap files), which would bury the user's own changes.
    pub fn history_view(
        &self,
        under: Option<&crate::uri::VPath>,
        since_ms: i64,
        all: bool,
    ) -> Result<Vec<Shown>> {
        let mut rows: Vec<Shown> = self
            .history(under, since_ms)?
            .into_iter()
            .filter(|r| all || !self.ignored_entry(&r.entry))
            .map(|r| Shown {
                happened_ms: self.happened_ms(&r),
                recorded: r,
            })
            .collect();
        rows.sort_by_key(|r| std::cmp::Reverse((r.happened_ms, r.recorded.id)));
        Ok(rows)
    }

    /// Whether the ignore rules ignore what `e` changed: its path, and for a rename both
    /// ends (a rename out of or into an ignored path is the user's to see).
    fn ignored_entry(&self, e: &Entry) -> bool {
        let dir = e.kind == "dir";
        let ignored = |p: &str| {
            crate::uri::VPath::from_rel(p).is_ok_and(|p| self.derive.rules.is_ignored(&p, dir))
        };
        ignored(&e.path) && e.new_path.as_deref().is_none_or(ignored)
    }

    /// When `r`'s operation happened. A removal's entry is recorded after its reply, with
    /// its batch (`ops/settle.rs`), so under an `rm -rf` it may be recorded after a later
    /// change's; its blob's ctime is the rename(2) that removed it, in the operation. Every
    /// other entry is recorded with its operation (or within [`ENTRIES_EVERY`]), and its
    /// blob may be older than it (an undo's entry names the version it put back).
    fn happened_ms(&self, r: &Recorded) -> i64 {
        use std::os::unix::fs::MetadataExt;
        let removed = match (&r.entry.blob, r.entry.op.as_str()) {
            (Some(b), "rm") => std::fs::symlink_metadata(self.blob_path(b))
                .ok()
                .map(|m| m.ctime() * 1000 + m.ctime_nsec() / 1_000_000),
            _ => None,
        };
        removed.map_or(r.at_ms, |t| t.min(r.at_ms))
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
        if self.history_yields() {
            return None;
        }
        // Made once per process, not checked on every removal: one gone since (removed by
        // hand) is made again by whoever puts a blob there ([`Stores::put_blob`]).
        if !self.blobs_made.load(std::sync::atomic::Ordering::Relaxed) {
            self.make_blobs_dir().ok()?;
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
                self.make_blobs_dir()?;
                put()
            }
            r => r,
        }
    }

    /// `history/` and its `blobs/`, mode 0700 whatever the umask (and made so when an older
    /// daemon left them open): what every user removed lies there with its own mode, and
    /// these two are what keep one user from reading another's, or anyone from planting a
    /// blob. Only the daemon (and its owner's CLI) reads them.
    fn make_blobs_dir(&self) -> std::io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let blobs = self.blobs_dir();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&blobs)?;
        for d in [blobs.parent().unwrap_or(&blobs), &blobs] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(())
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
        let kind = kind_of(md.file_type());
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
        if let Some(mut e) = self.removal_entry(
            p.as_str(),
            &blob,
            crate::process::requester_pid(),
            self.command_of(pid),
        ) {
            e.op = op.into();
            self.record_soon(vec![e]);
            self.flush_entries();
        }
        Ok(true)
    }

    /// Forget `r`, then delete its content.
    pub(super) fn forget_entry(&self, r: &Recorded) -> Result<()> {
        self.journal.forget_history(&[r.id])?;
        if let Some(b) = &r.entry.blob {
            remove_any(&self.blob_path(b)).map_err(|e| OpsError::io(self.blob_path(b), e))?;
        }
        Ok(())
    }
}

/// What an entry calls kept content of type `t`: `file`, `dir`, `symlink`, or the special
/// file it is (`fifo`, `socket`, `char`, `block`: the names [`special_hash`] hashes them by),
/// so `history` shows what was removed. Only `dir` changes what undo and the past view do
/// (undo makes a special file again from the kept one's own type).
fn kind_of(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "dir"
    } else if t.is_symlink() {
        "symlink"
    } else if t.is_fifo() {
        "fifo"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() {
        "char"
    } else if t.is_block_device() {
        "block"
    } else {
        "file"
    }
}

/// How many of `all` (oldest first) a prune gives back: those older than `keep_ms`, the
/// oldest while the kept content is over `cap`, and the oldest until their content covers
/// `short` (bytes, inodes) — measured once and counted down by each entry's size, not
/// measured again after each: filesystems free a deleted file's blocks later (XFS in a
/// background worker), so free space read at once would call for the whole history.
pub(super) fn to_prune(
    all: &[Recorded],
    now_ms: i64,
    keep_ms: i64,
    cap: u64,
    short: (u64, u64),
) -> usize {
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
                pid: crate::process::requester_pid(),
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
            Err(_) => crate::sys::copy_file(&from, &to).map(|_| true),
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
                .removal_entry(
                    p.as_str(),
                    &blob,
                    crate::process::requester_pid(),
                    cmd.clone(),
                )
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
    let live = crate::sys::open_file(from)?;
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
    /// first, a batch per journal write, until none is left. Content that cannot be hashed
    /// (a blob the daemon may not read, one removed by hand, a read error) marks its entry
    /// with why instead ([`crate::journal::Journal::set_hash_failures`]): the job goes on
    /// with the others and never comes back to it (it would fail the same way on every
    /// run), `fsck` names it and `fsck --repair` hashes it again. Only trouble of this
    /// process ([`process_trouble`]) fails the job, which the queue retries with back-off,
    /// the hashes made before it kept. Idempotent: a run that died leaves the rest for the
    /// next, and content pruned meanwhile is passed over (its entry went first, so its mark
    /// finds no row). Returns how many entries got their hash.
    pub(crate) fn hash_history(&self) -> Result<usize> {
        let mut done = 0;
        let quiet = self.history_generation();
        loop {
            // The user's work comes first: once the history changes again (an `rm -rf`, an
            // undo), hashing stops; the history thread queues it again when all is quiet.
            if self.history_generation() != quiet {
                return Ok(done);
            }
            // Every entry of a batch gets its hash or its mark (unless cut short below), so
            // the next batch is of entries not tried yet.
            let todo = self.journal.unhashed(HASH_BATCH)?;
            if todo.is_empty() {
                return Ok(done);
            }
            let (mut hashes, mut failed, mut cut) = (Vec::new(), Vec::new(), None);
            for (id, blob) in &todo {
                let at = self.blob_path(blob);
                match content_hash(&at) {
                    Ok(h) => hashes.push((*id, h)),
                    Err(e) if process_trouble(&e) => {
                        cut = Some(OpsError::io(at, e));
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(blob, "kept content not hashed (fsck names it): {e}");
                        failed.push((*id, e.to_string()));
                    }
                }
            }
            done += hashes.len();
            self.journal.set_hashes(&hashes)?;
            self.journal.set_hash_failures(&failed)?;
            if let Some(e) = cut {
                return Err(e);
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

/// Is `e`, met hashing kept content, the trouble of the process rather than of the content
/// (out of descriptors or memory)? It would pass, and so must not mark the entry as
/// unhashable.
fn process_trouble(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::OutOfMemory
        || matches!(
            e.raw_os_error(),
            Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::ENOBUFS)
        )
}

/// The SHA-256 (hex) of kept content at `p`: a file's bytes; a symlink's target; a special
/// file's type and device number ([`special_hash`]: never opened); a tree's lines `kind path hash` of everything in it, sorted by path (so a tree kept twice with the
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
        // Never a plain open: a FIFO kept from a removal would block the job forever, a
        // device node would be read for real. A special file is hashed as what it is.
        let mut file = match crate::sys::open_regular(crate::sys::CWD, f)? {
            crate::sys::Opened::File(file, _) => file,
            crate::sys::Opened::Other(st) => return Ok(special_hash(&st)),
        };
        let mut h = Sha256::new();
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

/// The kind and hash of a kept file that is neither regular, a directory nor a symlink (a
/// FIFO, a socket, a device node, a symlink swapped in since the lstat): what it is (its
/// type, and a device's number), no content, so its entry completes and two alike hash the
/// same.
fn special_hash(st: &crate::sys::Stat) -> (&'static str, String) {
    use crate::sys::FileType;
    use sha2::{Digest, Sha256};
    let (kind, what) = match st.file_type() {
        FileType::Fifo => ("fifo", "fifo".to_string()),
        FileType::Socket => ("socket", "socket".to_string()),
        FileType::CharacterDevice | FileType::BlockDevice => {
            let kind = match st.file_type() {
                FileType::CharacterDevice => "char",
                _ => "block",
            };
            let rdev = st.st_rdev;
            let (major, minor) = (libc::major(rdev), libc::minor(rdev));
            (kind, format!("{kind} {major}:{minor}"))
        }
        FileType::Symlink => ("symlink", "symlink".to_string()),
        FileType::Directory => ("dir", "dir".to_string()),
        _ => ("unknown", format!("mode {:o}", st.st_mode)),
    };
    (kind, hex::encode(Sha256::digest(what.as_bytes())))
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
            hash_error: None,
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

    #[test]
    fn age_and_cap_prune_the_oldest() {
        let all: Vec<_> = (1..=8).map(|i| kept(i, 100)).collect();
        // At 10 with keep 6: entries recorded before 4 are past their time.
        assert_eq!(to_prune(&all, 10, 6, u64::MAX, (0, 0)), 3);
        // 800 bytes kept, cap 500: the three oldest go.
        assert_eq!(to_prune(&all, 10, i64::MAX, 500, (0, 0)), 3);
    }
}
