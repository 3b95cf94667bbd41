//! The past through the mount: `MNT/.history/` lists the points the history can show
//! (`@<RFC 3339 time>`, the moment before each change), and `MNT/.history/@T/...` is the
//! namespace as it was at T, read-only, so that `diff`, `cp`, `grep` and `ls` work on old
//! versions. What a path held at T comes from a [`PastSource`] (the history, behind this
//! seam as the locked operations are behind [`super::Mutations`]); the core only numbers the
//! view's inodes and serves their reads.
//!
//! Invariants:
//! - every inode of the view has [`PAST_BIT`] set, which no inode of the live tree has (they
//!   are backing numbers or synthetic numbers from 2^62 up), so a request names one tree or
//!   the other, never both;
//! - nothing under `.history/` changes anything: every mutation of a view inode, or in a view
//!   directory, is EROFS, and files open read-only;
//! - a view inode is resolved again at each request (what T held may have moved from the
//!   live tree into the history since the lookup), and keeps the owner, group and mode of
//!   what it shows, which the kernel checks (`default_permissions`) as in the live tree;
//! - `.history` is reached by name from the root and listed nowhere, like the summaries;
//!   internal names and summaries are not part of the past.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use parking_lot::Mutex;

use super::handles::{DirHandle, Listing};
use super::{Attr, FsError, FsResult, VikingFs, ROOT_INO};
use crate::sys;
use crate::uri::{is_internal_name, is_sidecar_name, VPath, SCOPES};

/// The directory at the mount's root that holds the past.
pub const HISTORY_DIR: &str = ".history";

/// Set in every inode number of the view.
pub const PAST_BIT: u64 = 1 << 63;

/// The `.history` directory's inode number.
const TOP_INO: u64 = PAST_BIT | 1;

/// What the past held, as the history tells it.
pub trait PastSource: Send + Sync {
    /// The points worth listing (ms since the epoch), newest first: the moment before each
    /// change the history holds.
    fn points(&self) -> io::Result<Vec<i64>>;

    /// The file that shows what `p` held at `at_ms` (the live file, or content the history
    /// kept), or `None` when nothing was there then.
    fn then(&self, at_ms: i64, p: &VPath) -> io::Result<Option<PathBuf>>;

    /// The names directory `dir` held at `at_ms`, each with the file that shows it.
    fn names_then(&self, at_ms: i64, dir: &VPath) -> io::Result<Vec<(String, PathBuf)>>;
}

/// Is `ino` an inode of the view?
pub fn is_past(ino: u64) -> bool {
    ino & PAST_BIT != 0
}

/// An inode of the view.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Node {
    /// `.history` itself.
    Top,
    /// `.history/@T/PATH` (the namespace's root at T for the empty path).
    At(i64, VPath),
}

/// The view's inodes: numbered on first sight, kept while the kernel holds them.
#[derive(Default)]
pub(super) struct PastNodes {
    t: Mutex<Nodes>,
}

#[derive(Default)]
struct Nodes {
    next: u64,
    by_ino: HashMap<u64, (Node, u64)>,
    by_node: HashMap<Node, u64>,
}

impl PastNodes {
    fn get(&self, ino: u64) -> FsResult<Node> {
        if ino == TOP_INO {
            return Ok(Node::Top);
        }
        let t = self.t.lock();
        t.by_ino
            .get(&ino)
            .map(|(n, _)| n.clone())
            .ok_or(FsError::UnknownInode(ino))
    }

    /// The number of `node`, with `lookups` more kernel references to it.
    fn number(&self, node: Node, lookups: u64) -> u64 {
        if node == Node::Top {
            return TOP_INO;
        }
        let mut t = self.t.lock();
        if let Some(&ino) = t.by_node.get(&node) {
            let e = t.by_ino.get_mut(&ino).expect("by_node and by_ino agree");
            e.1 += lookups;
            return ino;
        }
        t.next += 1;
        let ino = TOP_INO + t.next;
        t.by_node.insert(node.clone(), ino);
        t.by_ino.insert(ino, (node, lookups));
        ino
    }

    fn forget(&self, ino: u64, n: u64) {
        let mut t = self.t.lock();
        let Some(e) = t.by_ino.get_mut(&ino) else {
            return;
        };
        e.1 = e.1.saturating_sub(n);
        if e.1 == 0 {
            let (node, _) = t.by_ino.remove(&ino).expect("present");
            t.by_node.remove(&node);
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.t.lock().by_ino.len()
    }
}

/// `@T` for a point, as `ls .history/` shows it.
fn point_name(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => format!("@{t}"),
        Err(_) => format!("@{ms}"),
    }
}

/// The point a name under `.history/` stands for: `@` and an RFC 3339 time.
fn parse_point(name: &str) -> Option<i64> {
    let t = name.strip_prefix('@')?.parse::<jiff::Timestamp>().ok()?;
    Some(t.as_millisecond())
}

impl VikingFs {
    fn past_source(&self) -> FsResult<&dyn PastSource> {
        self.past
            .as_deref()
            .ok_or_else(|| FsError::Hidden(HISTORY_DIR.into()))
    }

    /// EROFS for a change of (or in) a view inode.
    pub(super) fn not_past(&self, ino: u64) -> FsResult<()> {
        match is_past(ino) {
            true => Err(FsError::ReadOnlyPast),
            false => Ok(()),
        }
    }

    /// Is this lookup the view's: `.history` at the root, or anything under it?
    pub(super) fn is_past_lookup(&self, parent: u64, name: &OsStr) -> bool {
        is_past(parent) || (parent == ROOT_INO && name == HISTORY_DIR && self.past.is_some())
    }

    pub(super) fn past_lookup(&self, parent: u64, name: &OsStr) -> FsResult<Attr> {
        let src = self.past_source()?;
        let s = name.to_str().ok_or(FsError::Invalid("name is not UTF-8"))?;
        let hidden = || FsError::Hidden(s.to_string());
        // The node, and the file that shows it (resolved once).
        let (node, path) = if !is_past(parent) {
            (Node::Top, self.root.path().to_path_buf())
        } else {
            match self.past_nodes.get(parent)? {
                Node::Top => {
                    let at = parse_point(s).ok_or_else(hidden)?;
                    (Node::At(at, VPath::root()), self.root.path().to_path_buf())
                }
                Node::At(at, dir) => {
                    if is_internal_name(s) || is_sidecar_name(s) {
                        return Err(hidden());
                    }
                    if dir.is_root() && !SCOPES.contains(&s) {
                        return Err(hidden());
                    }
                    let p = dir.join(s)?;
                    let path = src
                        .then(at, &p)
                        .map_err(|e| FsError::io("lookup", e))?
                        .ok_or_else(hidden)?;
                    (Node::At(at, p), path)
                }
            }
        };
        let ino = self.past_nodes.number(node.clone(), 1);
        self.attr_at(&node, ino, &path)
            .inspect_err(|_| self.past_nodes.forget(ino, 1))
    }

    pub(super) fn past_forget(&self, ino: u64, n: u64) {
        self.past_nodes.forget(ino, n);
    }

    pub(super) fn past_getattr(&self, ino: u64) -> FsResult<Attr> {
        let node = self.past_nodes.get(ino)?;
        self.node_attr(&node, ino)
    }

    /// The file showing `node` now, or ENOENT (what it showed went since).
    fn backing(&self, node: &Node) -> FsResult<PathBuf> {
        match node {
            Node::At(at, p) if !p.is_root() => self
                .past_source()?
                .then(*at, p)
                .map_err(|e| FsError::io("history", e))?
                .ok_or_else(|| FsError::Hidden(p.as_str().to_string())),
            _ => Ok(self.root.path().to_path_buf()),
        }
    }

    /// What a stat of `node` says: the attributes of what it shows (the directories above
    /// the scopes: the data root's, read-only).
    fn node_attr(&self, node: &Node, ino: u64) -> FsResult<Attr> {
        self.attr_at(node, ino, &self.backing(node)?)
    }

    /// [`Self::node_attr`] of `node` shown by the file at `path`.
    fn attr_at(&self, node: &Node, ino: u64, path: &std::path::Path) -> FsResult<Attr> {
        let mut st = sys::lstatat(sys::CWD, path).map_err(|e| FsError::io("getattr", e))?;
        if matches!(node, Node::Top) || matches!(node, Node::At(_, p) if p.is_root()) {
            st.0.st_mode = libc::S_IFDIR | 0o555;
        }
        st.0.st_ino = ino;
        Ok(Attr { ino, st })
    }

    pub(super) fn past_readlink(&self, ino: u64) -> FsResult<Vec<u8>> {
        let path = self.backing(&self.past_nodes.get(ino)?)?;
        use std::os::unix::ffi::OsStrExt;
        std::fs::read_link(path)
            .map(|t| t.as_os_str().as_bytes().to_vec())
            .map_err(|e| FsError::io("readlink", e))
    }

    /// Open a file of the view: read-only, whatever its mode says.
    pub(super) fn past_open(&self, ino: u64, flags: i32) -> FsResult<u64> {
        if flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
            return Err(FsError::ReadOnlyPast);
        }
        let path = self.backing(&self.past_nodes.get(ino)?)?;
        let file = File::options()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| FsError::io("open", e))?;
        Ok(self.add_handle(ino, file, false, false))
    }

    pub(super) fn past_opendir(&self, ino: u64) -> FsResult<u64> {
        let node = self.past_nodes.get(ino)?;
        if !self.node_attr(&node, ino)?.st.is_dir() {
            return Err(FsError::NotADirectory(ino));
        }
        Ok(self.handles.add_dir(DirHandle {
            ino,
            entries: parking_lot::Mutex::new(Listing::default()),
        }))
    }

    /// A view directory's entries, `.` and `..` first: the points under `.history`, what
    /// the directory held at T under `@T/...`.
    pub(super) fn past_listing(&self, ino: u64) -> FsResult<Listing> {
        let src = self.past_source()?;
        let mut entries = Listing::default();
        entries.push(OsStr::new("."), ino, libc::DT_DIR);
        entries.push(OsStr::new(".."), ROOT_INO, libc::DT_DIR);
        let err = |e| FsError::io("readdir", e);
        match self.past_nodes.get(ino)? {
            Node::Top => {
                for at in src.points().map_err(err)? {
                    let n = self.past_nodes.number(Node::At(at, VPath::root()), 0);
                    entries.push(OsStr::new(&point_name(at)), n, libc::DT_DIR);
                }
            }
            Node::At(at, dir) => {
                for (name, path) in src.names_then(at, &dir).map_err(err)? {
                    let Ok(p) = dir.join(&name) else { continue };
                    let kind = sys::lstatat(sys::CWD, path.as_path())
                        .map_or(libc::DT_UNKNOWN, |st| super::dir::dtype(st.file_type()));
                    let n = self.past_nodes.number(Node::At(at, p), 0);
                    entries.push(OsStr::new(&name), n, kind);
                }
            }
        }
        Ok(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_named_and_parsed_back() {
        let ms = 1_796_000_000_123;
        let name = point_name(ms);
        assert!(name.starts_with("@20"), "{name}");
        assert_eq!(parse_point(&name), Some(ms));
        assert_eq!(parse_point("@yesterday"), None);
        assert_eq!(
            parse_point("2026-12-04T10:00:00Z"),
            None,
            "the @ is part of the name"
        );
    }

    #[test]
    fn view_inodes_never_meet_live_ones_and_go_when_forgotten() {
        let t = PastNodes::default();
        let a = t.number(Node::At(5, VPath::from_rel("resources/a").unwrap()), 1);
        assert!(is_past(a) && a != TOP_INO);
        assert!(
            !is_past(1 << 62),
            "synthetic live numbers stay below the bit"
        );
        let again = t.number(Node::At(5, VPath::from_rel("resources/a").unwrap()), 1);
        assert_eq!(a, again, "one node, one number");
        t.forget(a, 1);
        assert_eq!(t.len(), 1);
        t.forget(a, 1);
        assert_eq!(t.len(), 0);
        assert!(t.get(a).is_err());
    }
}
