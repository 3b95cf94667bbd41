//! What a path held at a point T, read from the history: the source of the mount's
//! `.history/@T/` view ([`crate::fs::PastSource`]).
//!
//! The history's entries after T, in the order they were recorded, are the changes since T.
//! For a path, the first of them that touched it (or a directory above it) says where its
//! content at T is:
//! - a version kept of the path itself (`rm`, `overwrite`, `truncate`, `mv-over`): that
//!   content, unless the file was born after T;
//! - a tree kept of a directory above it (`rm -r`): the path inside that tree, if there, and
//!   born by T;
//! - a rename of the path (or of a directory above it) away: what its new name held at that
//!   moment, found the same way from there on;
//! - a rename onto it of something else, with no version kept of it: nothing was there;
//! - none: the live file, if it was born by T (a file made since did not exist then).
//!
//! Undo entries are not changes of their own: what an undo replaced is an `rm` entry, and
//! what it restored is a copy, born when it was restored. Writes in place (without a
//! truncation) are not in the history: the view shows such a file as it is now.

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::source::is_source_name;
use super::Locked;
use crate::journal::Recorded;
use crate::uri::{VPath, SCOPES};

/// How long a timeline read from the journal serves before it is read again (a change
/// recorded through this daemon makes it stale at once).
const FRESH_FOR: Duration = Duration::from_secs(2);

/// At most this many points are listed (the newest).
const MAX_POINTS: usize = 10_000;

/// Two entries of one process less than this apart are one change (an `rm -rf` of a tree is
/// an entry per file): the points are the moments before each.
const POINT_GAP_MS: i64 = 1_000;

/// Renames followed from one path at most (a chain of renames of renames).
const MAX_HOPS: usize = 64;

/// The `.history/` view's source over the locked operations' stores.
pub struct PastView {
    ops: Arc<Locked>,
    /// Timelines read lately.
    cache: Mutex<Vec<Cached>>,
}

/// A timeline read: (T, when, the history's generation then, the timeline).
type Cached = (i64, Instant, u64, Arc<Timeline>);

/// The changes after a point, in the order recorded, indexed by the paths they name.
struct Timeline {
    at: i64,
    entries: Vec<Recorded>,
    /// Indices of the entries whose `path` is the key.
    by_path: HashMap<String, Vec<usize>>,
    /// Indices of the renames whose `new_path` is the key.
    by_new: HashMap<String, Vec<usize>>,
}

/// The first change of a path after a point.
enum Touch {
    /// Content kept: the file showing it.
    Kept(Option<PathBuf>),
    /// Renamed away: (its name after the rename, the index to go on from).
    Moved(VPath, usize),
    /// Something else renamed onto it: it was not there.
    Replaced,
}

impl PastView {
    pub fn new(ops: Arc<Locked>) -> Self {
        PastView {
            ops,
            cache: Mutex::new(Vec::new()),
        }
    }

    fn timeline(&self, at: i64) -> io::Result<Arc<Timeline>> {
        let generation = self.ops.history_generation();
        {
            let mut c = self.cache.lock();
            c.retain(|(_, when, g, _)| when.elapsed() < FRESH_FOR && *g == generation);
            if let Some((.., t)) = c.iter().find(|(t, ..)| *t == at) {
                return Ok(t.clone());
            }
        }
        let mut entries = self.ops.history(None, at).map_err(io::Error::other)?;
        entries.retain(|r| r.at_ms > at && r.entry.op != "undo");
        entries.sort_by_key(|r| r.id);
        let (mut by_path, mut by_new) = (HashMap::<_, Vec<_>>::new(), HashMap::<_, Vec<_>>::new());
        for (i, r) in entries.iter().enumerate() {
            by_path.entry(r.entry.path.clone()).or_default().push(i);
            if let Some(n) = r.entry.new_path.as_ref().filter(|_| r.entry.op == "mv") {
                by_new.entry(n.clone()).or_default().push(i);
            }
        }
        let t = Arc::new(Timeline {
            at,
            entries,
            by_path,
            by_new,
        });
        let mut c = self.cache.lock();
        c.push((at, Instant::now(), generation, t.clone()));
        if c.len() > 4 {
            c.remove(0);
        }
        Ok(t)
    }

    /// Whether the file at `f` was there at `at` (born by then; a filesystem without birth
    /// times says yes).
    fn born_by(f: &std::path::Path, at: i64) -> bool {
        crate::sys::birth_ms(f).is_none_or(|b| b <= at)
    }
}

impl Timeline {
    /// The first change at or after entry `from` that touched `q` or a directory above it.
    fn first_touch(&self, q: &VPath, from: usize, blob: impl Fn(&str) -> PathBuf) -> Option<Touch> {
        let mut best: Option<(usize, Touch)> = None;
        let mut a = Some(q.clone());
        while let Some(anc) = a.filter(|a| !a.is_root()) {
            let mine = anc == *q;
            let first = |ix: Option<&Vec<usize>>, ok: &dyn Fn(&Recorded) -> bool| {
                ix.and_then(|v| {
                    v.iter()
                        .copied()
                        .find(|&i| i >= from && ok(&self.entries[i]))
                })
            };
            let changed = first(self.by_path.get(anc.as_str()), &|r| {
                mine || r.entry.op == "mv" || (r.entry.op == "rm" && r.entry.kind == "dir")
            });
            if let Some(i) = changed.filter(|&i| best.as_ref().is_none_or(|(b, _)| i < *b)) {
                let r = &self.entries[i];
                let touch = if r.entry.op == "mv" {
                    let to = r
                        .entry
                        .new_path
                        .as_deref()
                        .and_then(|n| VPath::from_rel(n).ok());
                    match to.and_then(|to| q.rebase(&anc, &to)) {
                        Some(there) => Touch::Moved(there, i + 1),
                        None => Touch::Kept(None),
                    }
                } else {
                    let kept = r.entry.blob.as_deref().map(&blob);
                    let inside = kept.map(|b| match q.rebase(&anc, &VPath::root()) {
                        Some(rel) if !rel.is_root() => b.join(rel.as_str()),
                        _ => b,
                    });
                    // A version of the path itself was born when its entry says (the kept
                    // content may be a copy, born when it was kept); a path inside a kept
                    // tree is the file itself, moved there with its birth time.
                    let born = |f: &std::path::Path| match r.entry.born_ms.filter(|_| mine) {
                        Some(b) => b <= self.at,
                        None => PastView::born_by(f, self.at),
                    };
                    Touch::Kept(inside.filter(|f| f.symlink_metadata().is_ok() && born(f)))
                };
                best = Some((i, touch));
            }
            let onto = first(self.by_new.get(anc.as_str()), &|_| true);
            if let Some(i) = onto.filter(|&i| best.as_ref().is_none_or(|(b, _)| i < *b)) {
                best = Some((i, Touch::Replaced));
            }
            a = anc.parent();
        }
        best.map(|(_, t)| t)
    }

    /// The names directory `dir` may have held (each checked by the caller): those of
    /// `shown`, and every name under it that a change after entry `from` named.
    fn names_under(&self, dir: &VPath, from: usize) -> Vec<String> {
        let prefix = format!("{}/", dir.as_str());
        let mut names = Vec::new();
        for r in &self.entries[from.min(self.entries.len())..] {
            if let Some(rest) = r.entry.path.strip_prefix(&prefix) {
                names.push(rest.split('/').next().unwrap_or(rest).to_string());
            }
        }
        names
    }
}

/// `entries` (in the order recorded) cut into changes: the runs of one process's entries
/// for one command (an API request or an MCP tool call has no pid, and a name of its own in
/// its command) less than a second apart (an `rm -rf` is an entry per file, one change).
pub fn changes(entries: &[Recorded]) -> impl Iterator<Item = &[Recorded]> {
    entries.chunk_by(|a, b| {
        a.entry.pid == b.entry.pid
            && a.entry.cmd == b.entry.cmd
            && b.at_ms - a.at_ms <= POINT_GAP_MS
    })
}

impl PastView {
    /// Where `q`'s content at the timeline's point is, and the (path, entry index) pairs
    /// its renames led through.
    fn resolve(&self, t: &Timeline, q: &VPath) -> (Option<PathBuf>, Vec<(VPath, usize)>) {
        let mut chain = vec![(q.clone(), 0)];
        let (mut at, mut from) = (q.clone(), 0);
        for _ in 0..MAX_HOPS {
            match t.first_touch(&at, from, |b| self.ops.blob_path(b)) {
                Some(Touch::Kept(f)) => return (f, chain),
                Some(Touch::Replaced) => return (None, chain),
                Some(Touch::Moved(to, next)) => {
                    (at, from) = (to, next);
                    chain.push((at.clone(), from));
                }
                None => {
                    let f = self.ops.ws.fs_path(&at);
                    let there = f.symlink_metadata().is_ok() && Self::born_by(&f, t.at);
                    return (there.then_some(f), chain);
                }
            }
        }
        (None, chain)
    }
}

impl crate::fs::PastSource for PastView {
    fn points(&self) -> io::Result<Vec<i64>> {
        let mut all = self.ops.history(None, 0).map_err(io::Error::other)?;
        all.retain(|r| r.entry.op != "undo");
        all.sort_by_key(|r| r.id);
        let mut points: Vec<i64> = changes(&all).map(|c| c[0].at_ms - 1).collect();
        points.dedup();
        points.reverse();
        points.truncate(MAX_POINTS);
        Ok(points)
    }

    fn then(&self, at_ms: i64, p: &VPath) -> io::Result<Option<PathBuf>> {
        let t = self.timeline(at_ms)?;
        Ok(self.resolve(&t, p).0)
    }

    fn names_then(&self, at_ms: i64, dir: &VPath) -> io::Result<Vec<(String, PathBuf)>> {
        let t = self.timeline(at_ms)?;
        let mut names: Vec<String> = Vec::new();
        if dir.is_root() {
            names.extend(SCOPES.iter().map(|s| s.to_string()));
        } else {
            let (shown, chain) = self.resolve(&t, dir);
            let Some(shown) = shown else {
                return Ok(Vec::new());
            };
            if let Ok(rd) = std::fs::read_dir(&shown) {
                names.extend(
                    rd.flatten()
                        .filter_map(|e| e.file_name().into_string().ok()),
                );
            }
            for (p, from) in &chain {
                names.extend(t.names_under(p, *from));
            }
        }
        names.sort();
        names.dedup();
        let mut out = Vec::new();
        for n in names.into_iter().filter(|n| is_source_name(n)) {
            let Ok(q) = dir.join(&n) else { continue };
            if let (Some(f), _) = self.resolve(&t, &q) {
                out.push((n, f));
            }
        }
        Ok(out)
    }
}
