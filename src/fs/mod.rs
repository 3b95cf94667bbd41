//! The filesystem core: the Viking namespace as inodes, file handles and directory handles
//! over the workspace's files, with no FUSE in it (the adapter in `crate::fuse` only converts
//! types), so it is tested by calling it directly.
//!
//! Reads go straight to the backing files. Every change goes through the [`Mutations`] seam
//! with a validated [`VPath`]; the core itself enforces what the namespace shows: internal
//! names are invisible and can't be created; sidecars (the directory summaries) are read-only
//! and reached by name but not listed, unless [`FsConfig::show_summaries`]; and the root holds
//! only the scopes.

mod dir;
pub mod error;
mod exportfh;
pub mod fdcache;
pub mod handles;
pub mod inode;
pub mod mutations;
pub mod past;

mod xattr;

#[cfg(test)]
mod tests;

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::ops::ControlFlow;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub use crate::errno::ToErrno;
pub use crate::lock::without_waiting;
pub use crate::sys::TimeSpec;
pub use crate::tail::AfterReply;
pub use error::{FsError, FsResult};
pub use handles::DirEntry;
pub use inode::ROOT_INO;
pub use mutations::{AttrChange, DirectMutations, Mutations, Owner, RenameMode};
pub use past::{PastSource, HISTORY_DIR};

use handles::{FileHandle, Handles};
use inode::{Inode, InodeTable};

use crate::sys::{self, DataRoot, OFlags};
use crate::uri::{is_internal_name, is_sidecar_name, VPath, SCOPES};
use crate::workspace::Workspace;

/// A file's attributes as the kernel sees them.
#[derive(Debug, Clone, Copy)]
pub struct Attr {
    pub ino: u64,
    pub st: sys::Stat,
}

/// What `statfs` reports.
pub type StatFs = sys::StatVfs;

/// How the core presents the namespace: the mount options that change what programs see.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FsConfig {
    /// List the sidecars (`.abstract.md`, `.overview.md`) in directory listings
    /// (`-o show_summaries`). Off by default: they are derived data, and tools that walk a
    /// tree (`cp -r`, `find`, `git status`, rsync, an agent's glob) would copy, track or read
    /// them as if a user had written them. Either way they are reachable by name.
    pub show_summaries: bool,
}

/// The filesystem core. Cheap to share (`Arc`) between worker threads: every method takes
/// `&self`.
pub struct VikingFs {
    /// The data root's descriptor, which is the root inode's too.
    root: DataRoot,
    inodes: InodeTable,
    handles: Handles,
    mutations: Arc<dyn Mutations>,
    config: FsConfig,
    /// What `.history/` shows; without one there is no `.history/`.
    past: Option<Arc<dyn PastSource>>,
    past_nodes: past::PastNodes,
}

/// A name a program asked for, checked against what the namespace allows.
enum Name<'a> {
    /// An ordinary name.
    Plain(&'a str),
    /// `.abstract.md` / `.overview.md`: readable, never changed by users.
    Sidecar(&'a str),
}

impl VikingFs {
    /// Serve `ws`'s namespace, changing it through `mutations`, keeping the inodes'
    /// descriptors within [`fdcache::default_budget`].
    pub fn new(ws: &Workspace, mutations: Arc<dyn Mutations>) -> FsResult<Self> {
        Self::with_fd_budget(ws, mutations, fdcache::default_budget())
    }

    /// [`Self::new`] with at most `fd_budget` inode descriptors open (see [`fdcache`]).
    pub fn with_fd_budget(
        ws: &Workspace,
        mutations: Arc<dyn Mutations>,
        fd_budget: usize,
    ) -> FsResult<Self> {
        let root = DataRoot::open(&ws.data_root()).map_err(|e| FsError::io("open data root", e))?;
        let st = sys::fstat(&root).map_err(|e| FsError::io("stat data root", e))?;
        Ok(VikingFs {
            inodes: InodeTable::new(root.shared_fd(), st.key(), fd_budget)?,
            root,
            handles: Handles::default(),
            mutations,
            config: FsConfig::default(),
            past: None,
            past_nodes: past::PastNodes::default(),
        })
    }

    /// The core presenting the namespace as `config` says (default: [`FsConfig::default`]).
    pub fn with_config(mut self, config: FsConfig) -> Self {
        self.config = config;
        // Listed summaries are entries like any other: their replacement is not quiet.
        crate::dirtimes::set_summaries_listed(config.show_summaries);
        self
    }

    /// The core showing the past at `.history/` as `src` tells it ([`past`]).
    pub fn with_past(mut self, src: Arc<dyn PastSource>) -> Self {
        self.past = Some(src);
        self
    }

    /// The core with plain system calls behind its mutation seam.
    pub fn direct(ws: &Workspace) -> FsResult<Self> {
        let m = DirectMutations::new(ws).map_err(|e| FsError::io("open data root", e))?;
        Self::new(ws, Arc::new(m))
    }

    pub fn inodes(&self) -> &InodeTable {
        &self.inodes
    }

    pub fn open_file_handles(&self) -> usize {
        self.handles.open_files()
    }

    // ---- names and paths -------------------------------------------------------------

    /// Check a name looked up or created under `parent`. Internal names don't exist.
    fn name<'a>(&self, parent: u64, name: &'a OsStr) -> FsResult<Name<'a>> {
        let s = name.to_str().ok_or(FsError::Invalid("name is not UTF-8"))?;
        if s.len() > crate::uri::NAME_MAX {
            return Err(FsError::Name(crate::uri::UriError::NameTooLong(
                s.to_string(),
            )));
        }
        if is_internal_name(s) {
            return Err(FsError::Hidden(s.to_string()));
        }
        if parent == ROOT_INO && !SCOPES.contains(&s) {
            return Err(FsError::Hidden(s.to_string()));
        }
        Ok(if is_sidecar_name(s) {
            Name::Sidecar(s)
        } else {
            Name::Plain(s)
        })
    }

    /// Check a name a program wants to create (or rename onto) under `parent`.
    fn new_name<'a>(&self, parent: u64, name: &'a OsStr) -> FsResult<&'a str> {
        match self.name(parent, name) {
            Ok(Name::Plain(s)) => Ok(s),
            Ok(Name::Sidecar(s)) => Err(FsError::ReadOnlySidecar(s.to_string())),
            Err(FsError::Hidden(s)) if parent == ROOT_INO && !is_internal_name(&s) => {
                Err(FsError::RootIsFixed)
            }
            Err(FsError::Hidden(s)) => Err(FsError::InternalName(s)),
            Err(e) => Err(e),
        }
    }

    /// The namespace path of an inode now, or None when it has no name left (unlinked).
    fn vpath(&self, inode: &Inode) -> FsResult<Option<VPath>> {
        if inode.ino == ROOT_INO {
            return Ok(Some(VPath::root()));
        }
        let fd = inode.fd()?;
        let st = sys::fstat(&fd).map_err(|e| FsError::io("stat", e))?;
        if st.st_nlink == 0 {
            return Ok(None);
        }
        // A directory (it has one name) is most often where it was last found: one lstat
        // there, instead of asking /proc for the descriptor's name (every unlink and create
        // resolves its parent).
        let last = st.is_dir().then(|| inode.last_path()).flatten();
        if let Some(p) = last.filter(|p| self.names_inode(p, inode)) {
            return Ok(Some(p));
        }
        // The name the descriptor was opened through, if it still names this file (one
        // reopened from a handle may show none)...
        if let Ok(link) = sys::fd_path(&fd) {
            let p = link
                .strip_prefix(self.root.path())
                .ok()
                .and_then(|r| r.to_str())
                .and_then(|r| VPath::from_rel(r).ok());
            // A directory has one name: the descriptor's is it. A file may have several.
            if let Some(p) = p.filter(|p| st.is_dir() || self.names_inode(p, inode)) {
                if st.is_dir() {
                    inode.found_at(&p);
                }
                return Ok(Some(p));
            }
        }
        // ...else another name the kernel reached it by (a hard link, after the first went).
        for (parent, name) in inode.names() {
            let Ok(dir) = self.inodes.get(parent) else {
                continue;
            };
            if let Ok(Some(dp)) = self.vpath(&dir) {
                if let Ok(p) = dp.join(&name) {
                    if self.names_inode(&p, inode) {
                        return Ok(Some(p));
                    }
                }
            }
        }
        Ok(None)
    }

    /// Whether `p` currently names the backing file of `inode`.
    fn names_inode(&self, p: &VPath, inode: &Inode) -> bool {
        // In steps when the path is longer than PATH_MAX (the mount allows it).
        self.root
            .lstat(p.as_bytes())
            .is_ok_and(|st| st.key() == inode.key)
    }

    /// The path of `name` under directory `parent`.
    fn child(&self, parent: u64, name: &str) -> FsResult<VPath> {
        let dir = self.inodes.get(parent)?;
        let p = self.vpath(&dir)?.ok_or(FsError::Unlinked(parent))?;
        Ok(p.join(name)?)
    }

    fn attr_of(&self, inode: &Inode) -> FsResult<Attr> {
        let st = sys::fstat(inode.fd()?).map_err(|e| FsError::io("getattr", e))?;
        Ok(self.attr_with(inode, st))
    }

    /// The attributes shown for `inode`, whose backing file's stat is `st`.
    fn attr_with(&self, inode: &Inode, mut st: sys::Stat) -> Attr {
        crate::dirtimes::shown(&mut st);
        st.st_nlink = st.st_nlink.saturating_sub(inode.kept_links().into());
        if self.is_sidecar_inode(inode) {
            st.st_mode &= !0o222;
        }
        if inode.ino == ROOT_INO {
            st.st_ino = ROOT_INO;
        } else {
            st.st_ino = inode.ino;
        }
        Attr { ino: inode.ino, st }
    }

    /// Directory `ino`'s entries were changed through the mount: its times show the change,
    /// whatever lock traces surround it (see [`crate::dirtimes`]).
    fn entries_changed(&self, ino: u64) {
        if let Ok(inode) = self.inodes.get(ino) {
            crate::dirtimes::changed(inode.key);
        }
    }

    fn is_sidecar_inode(&self, inode: &Inode) -> bool {
        inode.is_sidecar()
    }

    // ---- lookup and attributes ---------------------------------------------------------

    /// Look `name` up under `parent` for the kernel (LOOKUP), which holds one more reference
    /// to the result. Most often the kernel knew the name and its entry timed out (as before
    /// each unlink of `rm -rf`): the inode serving it is found by a stat, without an open.
    #[tracing::instrument(level = "debug", skip(self))]
    pub fn lookup(&self, parent: u64, name: &OsStr) -> FsResult<Attr> {
        self.look_up(parent, name, true)
    }

    /// [`Self::lookup`] of a name just made or listed, most often new to the kernel: opened
    /// at once, without the stat that finds a known one.
    pub fn lookup_fresh(&self, parent: u64, name: &OsStr) -> FsResult<Attr> {
        self.look_up(parent, name, false)
    }

    fn look_up(&self, parent: u64, name: &OsStr, known_first: bool) -> FsResult<Attr> {
        if self.is_past_lookup(parent, name) {
            return self.past_lookup(parent, name);
        }
        let n = match self.name(parent, name)? {
            Name::Plain(s) | Name::Sidecar(s) => s,
        };
        let dir = self.inodes.get(parent)?.fd()?;
        if known_first {
            if let Ok(st) = sys::lstatat(&dir, n) {
                if let Some((inode, st)) = self.inodes.revisit(st.key()) {
                    inode.add_name(parent, n);
                    return Ok(self.attr_with(&inode, st));
                }
            }
        }
        let fd = sys::openat(&dir, n, OFlags::PATH | OFlags::NOFOLLOW, 0)
            .map_err(|e| FsError::io("lookup", e))?;
        let st = sys::fstat(&fd).map_err(|e| FsError::io("lookup", e))?;
        let inode = self.inodes.remember(st.key(), fd);
        inode.add_name(parent, n);
        self.attr_of(&inode)
    }

    /// The kernel dropped `n` references to `ino`.
    pub fn forget(&self, ino: u64, n: u64) {
        if past::is_past(ino) {
            return self.past_forget(ino, n);
        }
        self.inodes.forget(ino, n);
    }

    #[tracing::instrument(level = "debug", skip(self))]
    pub fn getattr(&self, ino: u64) -> FsResult<Attr> {
        if past::is_past(ino) {
            return self.past_getattr(ino);
        }
        let inode = self.inodes.get(ino)?;
        self.attr_of(&inode)
    }

    #[tracing::instrument(level = "debug", skip(self))]
    pub fn setattr(&self, ino: u64, change: &AttrChange) -> FsResult<Attr> {
        self.not_past(ino)?;
        let inode = self.inodes.get(ino)?;
        if self.is_sidecar_inode(&inode) {
            return Err(FsError::ReadOnlySidecar(ino.to_string()));
        }
        match self.vpath(&inode)? {
            Some(p) if !p.is_root() => self.mutations.setattr(&p, change)?,
            _ => {
                let fd = inode.fd()?;
                mutations::apply_attr_change_fd(fd.as_fd(), change)
                    .map_err(|e| FsError::io("setattr", e))?
            }
        }
        self.attr_of(&inode)
    }

    #[tracing::instrument(level = "debug", skip(self))]
    pub fn readlink(&self, ino: u64) -> FsResult<Vec<u8>> {
        if past::is_past(ino) {
            return self.past_readlink(ino);
        }
        let inode = self.inodes.get(ino)?;
        sys::readlink(inode.fd()?).map_err(|e| FsError::io("readlink", e))
    }

    pub fn statfs(&self) -> FsResult<StatFs> {
        sys::statvfs(self.root.path()).map_err(|e| FsError::io("statfs", e))
    }

    /// access(2) for the FUSE `access` call (default_permissions does the real checks).
    pub fn access(&self, ino: u64, mask: i32) -> FsResult<()> {
        if past::is_past(ino) {
            // The kernel checked the mode (default_permissions); nothing there is writable.
            return match mask & libc::W_OK {
                0 => self.past_getattr(ino).map(drop),
                _ => Err(FsError::ReadOnlyPast),
            };
        }
        let inode = self.inodes.get(ino)?;
        if mask & libc::W_OK != 0 && self.is_sidecar_inode(&inode) {
            return Err(FsError::ReadOnlySidecar(ino.to_string()));
        }
        sys::access(inode.fd()?, mask).map_err(|e| FsError::io("access", e))
    }

    // ---- namespace changes -------------------------------------------------------------

    #[tracing::instrument(level = "debug", skip(self))]
    pub fn mkdir(&self, parent: u64, name: &OsStr, mode: u32, owner: Owner) -> FsResult<Attr> {
        self.not_past(parent)?;
        let n = self.new_name(parent, name)?;
        let p = self.child(parent, n)?;
        self.mutations.mkdir(&p, mode, owner)?;
        self.entries_changed(parent);
        self.lookup_fresh(parent, name)
    }

    #[tracing::instrument(level = "debug", skip(self))]
    pub fn mknod(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        rdev: u64,
        owner: Owner,
    ) -> FsResult<Attr> {
        self.not_past(parent)?;
        let n = self.new_name(parent, name)?;
        let p = self.child(parent, n)?;
        self.mutations.mknod(&p, mode, rdev, owner)?;
        self.entries_changed(parent);
        self.lookup_fresh(parent, name)
    }

    #[tracing::instrument(level = "debug", skip(self))]
    pub fn symlink(
        &self,
        parent: u64,
        name: &OsStr,
        target: &Path,
        owner: Owner,
    ) -> FsResult<Attr> {
        self.not_past(parent)?;
        let n = self.new_name(parent, name)?;
        let p = self.child(parent, n)?;
        self.mutations.symlink(target.as_os_str(), &p, owner)?;
        self.entries_changed(parent);
        self.lookup_fresh(parent, name)
    }

    #[tracing::instrument(level = "debug", skip(self))]
    pub fn link(&self, ino: u64, newparent: u64, newname: &OsStr) -> FsResult<Attr> {
        self.not_past(ino)?;
        self.not_past(newparent)?;
        let inode = self.inodes.get(ino)?;
        if self.is_sidecar_inode(&inode) {
            return Err(FsError::ReadOnlySidecar(ino.to_string()));
        }
        let src = self.vpath(&inode)?.ok_or(FsError::Unlinked(ino))?;
        let n = self.new_name(newparent, newname)?;
        let dst = self.child(newparent, n)?;
        self.mutations.link(&src, &dst)?;
        self.entries_changed(newparent);
        self.lookup(newparent, newname)
    }

    #[tracing::instrument(level = "debug", skip(self))]
    pub fn unlink(&self, parent: u64, name: &OsStr) -> FsResult<()> {
        self.not_past(parent)?;
        let p = match self.name(parent, name)? {
            Name::Sidecar(s) => {
                let p = self.child(parent, s)?;
                self.check_sidecar_removable(parent, &p)?;
                p
            }
            Name::Plain(_) => {
                let n = self.existing_name(parent, name)?;
                self.child(parent, n)?
            }
        };
        let known = self.links_of(&p);
        self.mutations.unlink(&p)?;
        Self::kept_if_links_stayed(known);
        self.entries_changed(parent);
        Ok(())
    }

    /// A sidecar goes only with its directory: once nothing else is left in it (rmdir removes
    /// it itself; with `show_summaries` listings put sidecars last, so `rm -rf` reaches them
    /// once the rest is gone). While user entries remain it is read-only derived data
    /// (EACCES), but that is judged once the lock its unlink takes is free: someone else
    /// holding it (a TREE lock on the directory) may be removing those very entries, and an
    /// `rm -rf` whose removals of them met that lock got EBUSY for them. The directory may be
    /// about to go: its sidecars answer EBUSY too, not EACCES.
    fn check_sidecar_removable(&self, parent: u64, p: &VPath) -> FsResult<()> {
        if !self.has_user_entries(parent)? {
            return Ok(());
        }
        self.mutations.wait_unlocked(p)?;
        if self.has_user_entries(parent)? {
            return Err(FsError::ReadOnlySidecar(p.as_str().to_string()));
        }
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip(self))]
    pub fn rmdir(&self, parent: u64, name: &OsStr) -> FsResult<()> {
        self.not_past(parent)?;
        let n = self.existing_name(parent, name)?;
        if parent == ROOT_INO {
            return Err(FsError::RootIsFixed);
        }
        let p = self.child(parent, n)?;
        self.mutations.rmdir(&p)?;
        self.entries_changed(parent);
        Ok(())
    }

    /// Whether directory `ino` holds anything a user made (not a sidecar, not internal).
    fn has_user_entries(&self, ino: u64) -> FsResult<bool> {
        let fd = self.inodes.get(ino)?.fd()?;
        let mut found = false;
        sys::for_each_entry(&fd, |e| {
            let n = e.name().to_string_lossy();
            found = !is_internal_name(&n) && !is_sidecar_name(&n);
            if found {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .map_err(|e| FsError::io("readdir", e))?;
        Ok(found)
    }

    /// A name a program wants to remove or rename away: hidden names don't exist, sidecars
    /// and scopes stay.
    fn existing_name<'a>(&self, parent: u64, name: &'a OsStr) -> FsResult<&'a str> {
        match self.name(parent, name)? {
            Name::Sidecar(s) => Err(FsError::ReadOnlySidecar(s.to_string())),
            Name::Plain(_) if parent == ROOT_INO => Err(FsError::RootIsFixed),
            Name::Plain(s) => Ok(s),
        }
    }

    /// The inode of the non-directory at `p`, when the kernel knows it, and its links now:
    /// for [`Self::kept_if_links_stayed`] after a removal or replacement of `p`.
    fn links_of(&self, p: &VPath) -> Option<(Arc<Inode>, u64)> {
        let st = self
            .root
            .lstat(p.as_bytes())
            .ok()
            .filter(|st| !st.is_dir())?;
        let inode = self
            .inodes
            .find(st.key())
            .and_then(|i| self.inodes.get(i).ok())?;
        Some((inode, st.st_nlink))
    }

    /// After a name of `known` went: if its link count did not drop, the history holds the
    /// link (the file was kept, not unlinked), which its users must not count.
    fn kept_if_links_stayed(known: Option<(Arc<Inode>, u64)>) {
        let Some((inode, before)) = known else { return };
        let after = inode.fd().ok().and_then(|fd| sys::fstat(fd).ok());
        if after.is_some_and(|st| st.st_nlink >= before) {
            inode.keep_link();
        }
    }

    #[tracing::instrument(level = "debug", skip(self))]
    pub fn rename(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        mode: RenameMode,
    ) -> FsResult<()> {
        self.not_past(parent)?;
        self.not_past(newparent)?;
        let n = self.existing_name(parent, name)?;
        let nn = match mode {
            RenameMode::Exchange => self.existing_name(newparent, newname)?,
            _ => self.new_name(newparent, newname)?,
        };
        let src = self.child(parent, n)?;
        // Within one directory (most renames: an editor's save, `mv a b`), its path once.
        let dst = match src.parent() {
            Some(dir) if parent == newparent => dir.join(nn)?,
            _ => self.child(newparent, nn)?,
        };
        let replaced = match mode {
            RenameMode::Exchange => None,
            _ => self.links_of(&dst),
        };
        self.mutations.rename(&src, &dst, mode)?;
        Self::kept_if_links_stayed(replaced);
        self.entries_changed(parent);
        self.entries_changed(newparent);
        // The moved inode's new name: what its path is found by when its descriptor's name
        // is too long for the kernel to report (deeper than PATH_MAX from the data root).
        if let Ok(st) = self.root.lstat(dst.as_bytes()) {
            if let Some(ino) = self.inodes.find(st.key()) {
                if let Ok(inode) = self.inodes.get(ino) {
                    inode.add_name(newparent, nn);
                }
            }
        }
        Ok(())
    }

    // ---- files -------------------------------------------------------------------------

    fn stamp(file: &File) -> ((i64, i64), (i64, i64), i64) {
        match sys::fstat(file) {
            Ok(st) => (st.mtime(), st.ctime(), st.st_size),
            Err(_) => ((0, 0), (0, 0), -1),
        }
    }

    fn add_handle(&self, ino: u64, file: File, writable: bool, fresh: bool) -> u64 {
        let stamp = Self::stamp(&file);
        self.handles.add_file(FileHandle {
            ino,
            file,
            writable,
            fresh,
            wrote: AtomicBool::new(false),
            stamp,
        })
    }

    /// Create and open `name`; returns its attributes (one more kernel reference) and handle.
    #[tracing::instrument(level = "debug", skip(self))]
    pub fn create(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
        owner: Owner,
    ) -> FsResult<(Attr, u64)> {
        self.not_past(parent)?;
        let n = self.new_name(parent, name)?;
        let p = self.child(parent, n)?;
        let file = self.mutations.create(&p, mode, flags, owner)?;
        self.entries_changed(parent);
        let attr = self.lookup_fresh(parent, name)?;
        let fh = self.add_handle(attr.ino, file, true, true);
        Ok((attr, fh))
    }

    /// Open a file; writing goes through the mutation seam.
    ///
    /// An open with `O_TRUNC` may move the file itself into the history (see
    /// [`Self::follow_swap`]); an open of the same inode on another thread must then not keep a
    /// descriptor of the moved file (it would read, or write into, the history's copy). So a
    /// truncating open holds the inode's `truncating` lock across its open and the rebind, and
    /// any other open, once its file is open, waits for that lock and checks that its inode
    /// was not rebound meanwhile, else opens again. An open that passed the lock first had the
    /// file open before the truncating one asked for its lease, which then fails: no move.
    #[tracing::instrument(level = "debug", skip(self))]
    pub fn open(&self, ino: u64, flags: i32) -> FsResult<u64> {
        if past::is_past(ino) {
            return self.past_open(ino, flags);
        }
        let writable = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
        let truncating = writable && flags & libc::O_TRUNC != 0;
        let flags = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY | libc::O_NOFOLLOW);
        // Each retry follows one rebind, which needs another truncating open: a few suffice.
        for last in (0..8).rev() {
            let inode = self.inodes.get(ino)?;
            let sole = truncating.then(|| inode.truncating());
            if sole.is_some() && inode.is_rebound() && last > 0 {
                continue; // rebound while this open waited: the new inode's turn
            }
            let file = self.open_inode(&inode, flags, writable)?;
            if sole.is_none() && !inode.settled() && last > 0 {
                continue; // its file moved into the history meanwhile
            }
            return Ok(self.add_handle(ino, file, writable, flags & libc::O_TRUNC != 0));
        }
        unreachable!("the last round returns")
    }

    fn open_inode(&self, inode: &Arc<Inode>, flags: i32, writable: bool) -> FsResult<File> {
        if !writable {
            return self.reopen(inode, flags);
        }
        if self.is_sidecar_inode(inode) {
            return Err(FsError::ReadOnlySidecar(inode.ino.to_string()));
        }
        match self.vpath(inode)? {
            Some(p) => {
                let file = self.mutations.open_write(&p, flags)?;
                if flags & libc::O_TRUNC != 0 {
                    self.follow_swap(inode, &file);
                }
                Ok(file)
            }
            None => self.reopen(inode, flags),
        }
    }

    /// An open with `O_TRUNC` may have kept the version it cuts by moving the file itself
    /// into the history, an empty file taking its name (`ops::history`'s `Keep::Swap`,
    /// done only when nothing else had it open): `inode` is then served from `file`'s
    /// backing file, under the same number, so the kernel's inode, its `st_ino` and the
    /// handle just opened all name the file the user sees.
    fn follow_swap(&self, inode: &Inode, file: &File) {
        let Ok(st) = sys::fstat(file) else { return };
        if st.key() == inode.key {
            return;
        }
        match sys::reopen(file, sys::OFlags::PATH) {
            Ok(fd) => self.inodes.rebind(inode.ino, st.key(), fd),
            Err(e) => tracing::warn!(ino = inode.ino, "following a file kept by swap: {e}"),
        }
    }

    fn reopen(&self, inode: &Inode, flags: i32) -> FsResult<File> {
        // `open` cleared O_CREAT (and the kernel sends no O_TMPFILE): nothing is created.
        sys::reopen(inode.fd()?, sys::oflags(flags))
            .map(File::from)
            .map_err(|e| FsError::io("open", e))
    }

    /// Is `p` open for writing through this mount (any of its hard links)?
    pub fn is_open_for_write(&self, p: &VPath) -> bool {
        // Relative to the data root, in steps: a path deeper than PATH_MAX is asked too (an
        // absolute lstat would fail, and the job would index a file still being written).
        let Ok(st) = self.root.lstat(p.as_bytes()) else {
            return false;
        };
        self.inodes
            .find(st.key())
            .is_some_and(|ino| self.handles.writable_open(ino))
    }

    /// The kernel's inode number of `p` when the kernel knows it (looked it up and not yet
    /// forgotten), for invalidations of what it cached.
    pub fn known_ino(&self, p: &VPath) -> Option<u64> {
        if p.is_root() {
            return Some(ROOT_INO);
        }
        let st = self.root.lstat(p.as_bytes()).ok()?;
        self.inodes.find(st.key())
    }

    /// Is inode `ino` open through a writable handle of this mount?
    pub fn writable_open(&self, ino: u64) -> bool {
        self.handles.writable_open(ino)
    }

    /// Must I/O on this inode come through the daemon (no passthrough), so that each write
    /// takes its lock? See [`Mutations::locks_each_write`].
    pub fn daemon_io(&self, ino: u64) -> bool {
        let Ok(inode) = self.inodes.get(ino) else {
            return false;
        };
        matches!(self.vpath(&inode), Ok(Some(p)) if self.mutations.locks_each_write(&p))
    }

    /// The backing file of an open handle (the FUSE adapter hands it to the kernel for
    /// passthrough I/O).
    pub fn backing_fd(&self, fh: u64) -> FsResult<OwnedFd> {
        let h = self.handles.file(fh)?;
        h.file
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| FsError::io("dup", e))
    }

    pub fn read(&self, fh: u64, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        let h = self.handles.file(fh)?;
        let mut buf = vec![0u8; size as usize];
        let mut done = 0;
        while done < buf.len() {
            match h.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(FsError::io("read", e)),
            }
        }
        buf.truncate(done);
        Ok(buf)
    }

    /// A write through the daemon goes through the mutation seam (the locked operations take
    /// the file's EXACT lock for it); a file with no name left is written directly.
    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> FsResult<u32> {
        let h = self.handles.file(fh)?;
        h.mark_written();
        let inode = self.inodes.get(h.ino)?;
        match self.vpath(&inode)? {
            Some(p) => self.mutations.write(&p, &h.file, offset, data)?,
            None => h
                .file
                .write_all_at(data, offset)
                .map_err(|e| FsError::io("write", e))?,
        }
        Ok(data.len() as u32)
    }

    /// Copy between two open files inside the backing filesystem (reflink or in-kernel copy).
    pub fn copy_file_range(
        &self,
        fh_in: u64,
        off_in: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
    ) -> FsResult<u32> {
        let (i, o) = (self.handles.file(fh_in)?, self.handles.file(fh_out)?);
        o.mark_written();
        let (mut oi, mut oo) = (off_in, off_out);
        let len = len.min(u32::MAX as u64 / 2) as usize;
        let n = sys::copy_file_range(&i.file, &mut oi, &o.file, &mut oo, len)
            .map_err(|e| FsError::io("copy_file_range", e))?;
        Ok(n as u32)
    }

    /// fallocate(2) on an open file: changes its size or blocks, so the handle counts as
    /// having written.
    pub fn fallocate(&self, fh: u64, offset: u64, len: u64, mode: i32) -> FsResult<()> {
        let h = self.handles.file(fh)?;
        h.mark_written();
        sys::fallocate(&h.file, mode, offset, len).map_err(|e| FsError::io("fallocate", e))
    }

    /// lseek(2) with SEEK_DATA / SEEK_HOLE on the backing file.
    pub fn lseek(&self, fh: u64, offset: i64, whence: i32) -> FsResult<i64> {
        let h = self.handles.file(fh)?;
        sys::lseek(&h.file, offset, whence)
            .map(|r| r as i64)
            .map_err(|e| FsError::io("lseek", e))
    }

    pub fn fsync(&self, fh: u64, datasync: bool) -> FsResult<()> {
        let h = self.handles.file(fh)?;
        let r = if datasync {
            h.file.sync_data()
        } else {
            h.file.sync_all()
        };
        r.map_err(|e| FsError::io("fsync", e))
    }

    /// Close a handle; a handle that changed its file reports it through the seam.
    #[tracing::instrument(level = "debug", skip(self))]
    pub fn release(&self, fh: u64) -> FsResult<()> {
        let h = self.handles.remove_file(fh)?;
        // A created or truncated file counts as written, unless the seam reported it when it
        // was opened and nothing changed since (the stamp was taken after the open).
        let fresh = h.fresh && !self.mutations.reports_at_open();
        if h.writable && (fresh || h.wrote() || Self::stamp(&h.file) != h.stamp) {
            let path = sys::fd_path(&h.file)
                .ok()
                .and_then(|l| {
                    let rel = l.strip_prefix(self.root.path()).ok()?;
                    VPath::from_rel(rel.to_str()?).ok()
                })
                // The kernel names no descriptor deeper than a page (PATH_MAX): ask the
                // inode table for the names the kernel reached it by.
                .or_else(|| {
                    let inode = self.inodes.get(h.ino).ok()?;
                    self.vpath(&inode).ok().flatten()
                });
            // Unlinked while open: nothing left in the namespace to report.
            if let Some(p) = path {
                self.mutations.file_written(&p);
            }
        }
        Ok(())
    }
}
