//! The inode table: one entry per backing file the kernel currently knows, keyed by the
//! backing (dev, ino) so hard links share one inode (libfuse passthrough_hp's discipline).
//!
//! Each entry can reach its backing file by an O_PATH descriptor, so every call works on the
//! object rather than on a name that may have moved. The kernel forgets inodes only under
//! memory pressure, so the descriptors are not all kept: an inode whose filesystem exports
//! handles keeps its [`super::exportfh::ExportHandle`] and a descriptor in the
//! bounded [`FdCache`], reopened on demand (virtiofsd's `--inode-file-handles`); one without
//! keeps its descriptor pinned. An entry lives while the kernel's lookup count is above zero:
//! each reply that hands the kernel an entry (lookup, create, mkdir, link, readdirplus) adds
//! one; FORGET takes them away, and at zero the entry goes.
//!
//! Without a descriptor the backing inode is not pinned: it may be deleted and its number
//! given to a new file. The handles tell the two apart (they carry a generation), and the
//! new file gets its own entry; see [`InodeTable::remember`].

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::fs::error::{FsError, FsResult};
use crate::fs::exportfh::ExportHandle;
use crate::fs::fdcache::{FdCache, PathFd, Slot};
use crate::uri::VPath;

#[cfg(test)]
mod tests;

/// The kernel's number for the root directory.
pub const ROOT_INO: u64 = 1;

/// One backing file known to the kernel.
#[derive(Debug)]
pub struct Inode {
    pub ino: u64,
    pub key: (u64, u64),
    backing: Backing,
    /// (parent inode, name) pairs this inode was last reached by. The O_PATH descriptor
    /// names the file by the dentry it was opened through, which may be a hard link that is
    /// gone since; these let the core find a name that still exists.
    /// Kept small: one name, in a buffer of exactly its size, is the common case (about 60
    /// bytes of the ~300 an inode costs).
    names: Mutex<Vec<(u64, Box<str>)>>,
    /// Reached as `.abstract.md`/`.overview.md`: read-only to users.
    sidecar: std::sync::atomic::AtomicBool,
    /// Names of this file removed through the mount whose link the history keeps (moved
    /// there rather than unlinked): not links users see, so its link count leaves them out.
    kept: std::sync::atomic::AtomicU32,
    /// Held by an open with `O_TRUNC` from before its file may move into the history until
    /// the inode is rebound to the file taking its name ([`InodeTable::rebind`]); every other
    /// open passes through it after opening ([`Inode::settled`]; see `VikingFs::open`).
    truncating: Mutex<()>,
    /// Set (under `truncating`) once [`InodeTable::rebind`] replaced this inode: its backing
    /// file is the one that moved into the history.
    rebound: std::sync::atomic::AtomicBool,
    /// A directory's path when it was last found ([`Inode::last_path`]): a hint, checked
    /// before each use, since the directory may have moved since (through the mount or not).
    last_path: Mutex<Option<VPath>>,
}

/// How an inode reaches its backing file.
#[derive(Debug)]
enum Backing {
    /// A descriptor held while the inode lives (the root; files without a usable handle).
    Pinned(Arc<OwnedFd>),
    /// A handle, and a descriptor while the cache keeps one.
    Cached {
        slot: Arc<Slot>,
        cache: Arc<FdCache>,
    },
}

/// How many names of one inode are remembered (hard links beyond that are rare).
const MAX_NAMES: usize = 8;

impl Inode {
    fn new(ino: u64, key: (u64, u64), backing: Backing) -> Self {
        Inode {
            ino,
            key,
            backing,
            names: Mutex::new(Vec::new()),
            sidecar: std::sync::atomic::AtomicBool::new(false),
            kept: std::sync::atomic::AtomicU32::new(0),
            truncating: Mutex::new(()),
            rebound: std::sync::atomic::AtomicBool::new(false),
            last_path: Mutex::new(None),
        }
    }

    /// The path this directory was last found at, if it was; unchecked.
    pub fn last_path(&self) -> Option<VPath> {
        self.last_path.lock().clone()
    }

    /// Remember `p` as the path this directory was found at.
    pub fn found_at(&self, p: &VPath) {
        let mut last = self.last_path.lock();
        if last.as_ref() != Some(p) {
            *last = Some(p.clone());
        }
    }

    /// Held by an open with `O_TRUNC` across its open and any rebind it leads to.
    pub fn truncating(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.truncating.lock()
    }

    /// Whether this inode still serves its number, once any truncating open of it in
    /// progress has finished (false: rebound, its backing file moved into the history).
    pub fn settled(&self) -> bool {
        drop(self.truncating.lock());
        !self.is_rebound()
    }

    /// Whether [`InodeTable::rebind`] replaced this inode.
    pub fn is_rebound(&self) -> bool {
        self.rebound.load(std::sync::atomic::Ordering::Acquire)
    }

    /// An O_PATH descriptor of the backing file, open while the result lives (reopened from
    /// the handle when the cache had closed it). [`FsError::Stale`] when the file is gone.
    pub fn fd(&self) -> FsResult<PathFd> {
        match &self.backing {
            Backing::Pinned(fd) => Ok(PathFd::new(fd.clone())),
            Backing::Cached { slot, cache } => cache.get(slot).map_err(|e| {
                if e.raw_os_error() == Some(libc::ESTALE) {
                    FsError::Stale(self.ino)
                } else {
                    FsError::io("reopen", e)
                }
            }),
        }
    }

    /// Whether a file whose handle is `handle` (None: unknown) is this inode's backing file.
    /// A pinned inode can't have lost its number to another file.
    fn is_backed_by(&self, handle: Option<&ExportHandle>) -> bool {
        match (&self.backing, handle) {
            (Backing::Cached { slot, .. }, Some(h)) => slot.handle() == h,
            _ => true,
        }
    }

    /// Record that the kernel reached this inode as `name` in `parent` (most recent first).
    /// One more of its links is the history's.
    pub fn keep_link(&self) {
        self.kept.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Links the history holds.
    pub fn kept_links(&self) -> u32 {
        self.kept.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn is_sidecar(&self) -> bool {
        self.sidecar.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn add_name(&self, parent: u64, name: &str) {
        if crate::uri::is_sidecar_name(name) {
            self.sidecar
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let mut n = self.names.lock();
        if n.first().is_some_and(|(p, s)| *p == parent && &**s == name) {
            return;
        }
        n.retain(|(p, s)| !(*p == parent && &**s == name));
        n.reserve_exact(1);
        n.insert(0, (parent, name.into()));
        n.truncate(MAX_NAMES);
    }

    /// The names recorded, most recent first.
    pub fn names(&self) -> Vec<(u64, Box<str>)> {
        self.names.lock().clone()
    }
}

#[derive(Debug)]
struct Entry {
    inode: Arc<Inode>,
    nlookup: u32,
    /// Its backing number was given to a new file: found by number only, never by key.
    detached: bool,
}

/// The inodes by number, and by backing key where the two differ. Most inodes are *native*
/// (their number is their backing inode number on the data root's device), found by key
/// through `by_ino` alone; `by_key` holds only the others (the root, synthetic numbers), so
/// that a hundred thousand cached inodes cost one map entry each, not two.
#[derive(Debug, Default)]
struct Tables {
    by_ino: HashMap<u64, Entry>,
    by_key: HashMap<(u64, u64), u64>,
    root_dev: u64,
    next: u64,
}

impl Tables {
    /// The inode serving backing `key`, if any.
    fn ino_of(&self, key: (u64, u64)) -> Option<u64> {
        if let Some(&ino) = self.by_key.get(&key) {
            return Some(ino);
        }
        if key.0 != self.root_dev {
            return None;
        }
        self.by_ino
            .get(&key.1)
            .filter(|e| e.inode.key == key && !e.detached)
            .map(|_| key.1)
    }

    /// `ino` no longer serves its key (a new file has the number now).
    fn detach(&mut self, ino: u64, key: (u64, u64)) {
        if self.by_key.get(&key) == Some(&ino) {
            self.by_key.remove(&key);
        }
        if let Some(e) = self.by_ino.get_mut(&ino) {
            e.detached = true;
        }
    }
}

/// Numbers handed out for files whose backing inode number can't serve (another device, or
/// the number 1 that FUSE reserves for the root).
const SYNTHETIC_BASE: u64 = 1 << 62;

/// The kernel's inode number (FUSE nodeid, also `st_ino`) of a backing file is its backing
/// inode number, so `d_ino` in listings, `st_ino` and hard links all agree; the O_PATH
/// descriptor pins the backing inode, so its number can't be reused while we know it.
#[derive(Debug)]
pub struct InodeTable {
    t: Mutex<Tables>,
    fds: Arc<FdCache>,
}

impl InodeTable {
    /// A table holding the root, which is never forgotten; at most `fd_budget` descriptors
    /// of other inodes stay open (see [`FdCache`]).
    pub fn new(root_fd: Arc<OwnedFd>, root_key: (u64, u64), fd_budget: usize) -> FsResult<Self> {
        let fds = Arc::new(
            FdCache::new(&root_fd, fd_budget).map_err(|e| FsError::io("open data root", e))?,
        );
        let mut t = Tables {
            next: SYNTHETIC_BASE,
            root_dev: root_key.0,
            ..Default::default()
        };
        t.by_key.insert(root_key, ROOT_INO);
        t.by_ino.insert(
            ROOT_INO,
            Entry {
                inode: Arc::new(Inode::new(ROOT_INO, root_key, Backing::Pinned(root_fd))),
                nlookup: 1,
                detached: false,
            },
        );
        Ok(InodeTable {
            t: Mutex::new(t),
            fds,
        })
    }

    /// The descriptor cache (budget and counters, for tests and diagnostics).
    pub fn fd_cache(&self) -> &FdCache {
        &self.fds
    }

    pub fn get(&self, ino: u64) -> FsResult<Arc<Inode>> {
        self.t
            .lock()
            .by_ino
            .get(&ino)
            .map(|e| e.inode.clone())
            .ok_or(FsError::UnknownInode(ino))
    }

    /// Count one more kernel reference to the backing file `key`, opened as `fd`. Returns the
    /// inode; `fd` is kept only when the inode had no descriptor open.
    ///
    /// An entry for `key` whose handle differs from `fd`'s is a deleted file whose number was
    /// reused: it leaves `by_key` (it stays reachable by number until FORGET), and the new
    /// file gets a synthetic number when its backing number is still taken.
    pub fn remember(&self, key: (u64, u64), fd: OwnedFd) -> Arc<Inode> {
        let handle = self.fds.handle_of(&fd);
        let mut t = self.t.lock();
        if let Some(ino) = t.ino_of(key) {
            let e = t.by_ino.get_mut(&ino).expect("by_key and by_ino agree");
            if e.inode.is_backed_by(handle.as_ref()) {
                if ino != ROOT_INO {
                    e.nlookup = e.nlookup.saturating_add(1);
                }
                let inode = e.inode.clone();
                drop(t);
                if let Backing::Cached { slot, cache } = &inode.backing {
                    cache.offer(slot, fd);
                }
                return inode;
            }
            t.detach(ino, key);
        }
        let native = key.0 == t.root_dev && key.1 != ROOT_INO && key.1 < SYNTHETIC_BASE;
        let ino = if native && !t.by_ino.contains_key(&key.1) {
            key.1
        } else {
            t.next += 1;
            t.next
        };
        let (backing, spare) = self.backing(handle, fd);
        let inode = Arc::new(Inode::new(ino, key, backing));
        if ino != key.1 {
            t.by_key.insert(key, ino);
        }
        t.by_ino.insert(
            ino,
            Entry {
                inode: inode.clone(),
                nlookup: 1,
                detached: false,
            },
        );
        drop(t);
        Self::offer(&inode, spare);
        inode
    }

    /// How a new inode reaches its backing file `fd`: by its export `handle` through the
    /// cache (then `fd` is returned, to be offered to the cache out of the table's lock), or
    /// pinned.
    fn backing(&self, handle: Option<ExportHandle>, fd: OwnedFd) -> (Backing, Option<OwnedFd>) {
        match handle {
            Some(h) => {
                let slot = self.fds.slot(h);
                let cache = self.fds.clone();
                (Backing::Cached { slot, cache }, Some(fd))
            }
            None => (Backing::Pinned(Arc::new(fd)), None),
        }
    }

    /// Give a new inode's descriptor to the cache: out of the table's lock, since it may
    /// close other inodes' descriptors.
    fn offer(inode: &Inode, spare: Option<OwnedFd>) {
        if let (Some(fd), Backing::Cached { slot, cache }) = (spare, &inode.backing) {
            cache.offer(slot, fd);
        }
    }

    /// Serve inode `ino` from another backing file from now on: `key`, opened as `fd` (an
    /// open with `O_TRUNC` whose old file moved into the history, an empty one taking its
    /// name). Its number, lookup count and names stay; its old key leaves the table.
    pub fn rebind(&self, ino: u64, key: (u64, u64), fd: OwnedFd) {
        let handle = self.fds.handle_of(&fd);
        let mut t = self.t.lock();
        let Some(old) = t.by_ino.get(&ino).map(|e| e.inode.clone()) else {
            return; // forgotten meanwhile: the next lookup finds the new file
        };
        if let Some(other) = t.ino_of(key).filter(|&o| o != ino) {
            // A stale entry whose number the new file reused.
            t.detach(other, key);
        }
        let (backing, spare) = self.backing(handle, fd);
        let inode = Arc::new(Inode::new(ino, key, backing));
        *inode.names.lock() = old.names.lock().clone();
        inode
            .sidecar
            .store(old.is_sidecar(), std::sync::atomic::Ordering::Relaxed);
        if t.by_key.get(&old.key) == Some(&ino) {
            t.by_key.remove(&old.key);
        }
        if key.1 != ino {
            t.by_key.insert(key, ino);
        }
        if let Some(e) = t.by_ino.get_mut(&ino) {
            e.inode = inode.clone();
        }
        old.rebound
            .store(true, std::sync::atomic::Ordering::Release);
        drop(t);
        Self::offer(&inode, spare);
    }

    /// The kernel dropped `n` references. Returns true when the inode is gone.
    pub fn forget(&self, ino: u64, n: u64) -> bool {
        if ino == ROOT_INO {
            return false;
        }
        let mut t = self.t.lock();
        let Some(e) = t.by_ino.get_mut(&ino) else {
            return true;
        };
        e.nlookup = e
            .nlookup
            .saturating_sub(u32::try_from(n).unwrap_or(u32::MAX));
        if e.nlookup > 0 {
            return false;
        }
        let key = e.inode.key;
        t.by_ino.remove(&ino);
        if t.by_key.get(&key) == Some(&ino) {
            t.by_key.remove(&key);
        }
        true
    }

    /// The kernel's current lookup count (tests and diagnostics).
    pub fn lookup_count(&self, ino: u64) -> u64 {
        self.t
            .lock()
            .by_ino
            .get(&ino)
            .map_or(0, |e| u64::from(e.nlookup))
    }

    /// How many inodes the kernel holds (root included).
    pub fn len(&self) -> usize {
        self.t.lock().by_ino.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The inode serving `key`, with one more kernel reference, when its backing file is
    /// still the file at `key`: a lookup of a name the kernel knew before needs no open and no
    /// handle. Its descriptor proves it: one the cache closed is reopened from the handle,
    /// which fails for a file deleted since (whose number a new file may have taken), and one
    /// held open keeps its number from being reused; the stat of it (returned: the
    /// attributes) is checked all the same. `None`: look it up in full ([`Self::remember`]).
    pub fn revisit(&self, key: (u64, u64)) -> Option<(Arc<Inode>, crate::sys::Stat)> {
        let inode = {
            let t = self.t.lock();
            let ino = t.ino_of(key)?;
            t.by_ino.get(&ino)?.inode.clone()
        };
        let st = crate::sys::fstat(inode.fd().ok()?).ok()?;
        if st.st_nlink == 0 || st.key() != key {
            return None;
        }
        let mut t = self.t.lock();
        let ino = t.ino_of(key)?;
        let e = t.by_ino.get_mut(&ino)?;
        if !Arc::ptr_eq(&e.inode, &inode) || e.detached {
            return None;
        }
        if ino != ROOT_INO {
            e.nlookup = e.nlookup.saturating_add(1);
        }
        Some((inode, st))
    }

    /// The inode serving a backing (dev, ino), if the kernel knows one.
    pub fn find(&self, key: (u64, u64)) -> Option<u64> {
        self.t.lock().ino_of(key)
    }

    /// The number a listing shows for a backing entry: its inode number when it serves.
    pub fn listing_ino(&self, dev: u64, backing_ino: u64) -> u64 {
        let t = self.t.lock();
        if let Some(ino) = t.ino_of((dev, backing_ino)) {
            return ino;
        }
        backing_ino
    }
}
