//! The bounded set of O_PATH descriptors the inode table keeps open.
//!
//! The kernel keeps an inode (and we its entry) until FORGET, which it sends only under memory
//! pressure, so one descriptor per known inode runs into RLIMIT_NOFILE after some thousands of
//! files. Instead each inode whose backing filesystem exports handles keeps its
//! [`ExportHandle`] and a [`Slot`] that may hold its descriptor; at most `budget` slots hold
//! one, and past that the CLOCK hand closes the descriptor of an inode not used since its last
//! pass. A cold inode is reopened from its handle on its next use.
//!
//! A descriptor is handed out as a [`PathFd`] (a reference count on it): an eviction only
//! drops the cache's reference, so the number a caller holds is never closed and reused under
//! it. Inodes without a usable handle keep their descriptor pinned, outside the budget.

use std::collections::VecDeque;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::exportfh::ExportHandle;
use crate::sys::{self, OFlags};

/// Overrides the budget (tests and diagnostics); otherwise it follows RLIMIT_NOFILE.
pub const BUDGET_ENV: &str = "VIKINGFS_FD_BUDGET";

/// Descriptors left to everything else: open file handles, SQLite, lock files, /dev/fuse.
const RESERVE: u64 = 256;
const MIN_BUDGET: u64 = 64;
const MAX_BUDGET: u64 = 65536;

/// The budget a daemon uses: `VIKINGFS_FD_BUDGET` when set, else half the soft
/// RLIMIT_NOFILE minus a reserve, within [64, 65536].
pub fn default_budget() -> usize {
    if let Some(v) = std::env::var(BUDGET_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        match v.trim().parse::<usize>() {
            Ok(n) => return n.max(1),
            Err(_) => tracing::warn!("{BUDGET_ENV}={v:?} is not a number of descriptors: ignored"),
        }
    }
    let soft = sys::nofile_limit();
    ((soft / 2).saturating_sub(RESERVE)).clamp(MIN_BUDGET, MAX_BUDGET) as usize
}

/// A descriptor held for the length of one use; the file stays open while this lives.
#[derive(Debug, Clone)]
pub struct PathFd(Arc<OwnedFd>);

impl PathFd {
    pub fn new(fd: Arc<OwnedFd>) -> Self {
        PathFd(fd)
    }

    /// `/proc/self/fd/N` for path-based calls; valid while `self` lives.
    pub fn proc_path(&self) -> CString {
        sys::proc_path(&self.0)
    }
}

impl AsFd for PathFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl AsRawFd for PathFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Where one inode's descriptor lives while open. Invariant: a slot holding a descriptor
/// has exactly one entry in the ring (pushed by whoever filled it, popped by whoever empties
/// it), so the ring's length bounds the descriptors held.
#[derive(Debug)]
pub struct Slot {
    handle: ExportHandle,
    fd: Mutex<Option<Arc<OwnedFd>>>,
    /// Used since the clock hand last passed: spared once.
    accessed: AtomicBool,
}

impl Slot {
    pub fn handle(&self) -> &ExportHandle {
        &self.handle
    }
}

/// The descriptors of handle-backed inodes, at most `budget` at a time.
#[derive(Debug)]
pub struct FdCache {
    budget: usize,
    /// The data root opened for reading: open_by_handle_at wants a non-O_PATH descriptor
    /// on the mount.
    mount_fd: OwnedFd,
    mount_id: i32,
    /// False when the backing filesystem has no handles or we may not open them (not
    /// CAP_DAC_READ_SEARCH): every inode is pinned then, as before.
    enabled: bool,
    ring: Mutex<VecDeque<Weak<Slot>>>,
    reopens: AtomicU64,
    /// Whether the fall-back to a pinned descriptor was logged already.
    told: AtomicBool,
}

impl FdCache {
    /// A cache for inodes under the data root `root` (an O_PATH descriptor). Probes once
    /// whether handles work there.
    pub fn new(root: &OwnedFd, budget: usize) -> io::Result<Self> {
        let mount_fd = sys::reopen(root, OFlags::RDONLY | OFlags::DIRECTORY)?;
        let probe = ExportHandle::of(root).and_then(|(h, id)| h.open(&mount_fd).map(|_| id));
        let (enabled, mount_id) = match probe {
            Ok(id) => (true, id),
            Err(e) => {
                tracing::info!(
                    "file handles unavailable on the data root ({e}): every inode the kernel \
                     knows keeps a descriptor open"
                );
                (false, -1)
            }
        };
        Ok(FdCache {
            budget: budget.max(1),
            mount_fd,
            mount_id,
            enabled,
            ring: Mutex::new(VecDeque::new()),
            reopens: AtomicU64::new(0),
            // Disabled was told just now; once per table is enough.
            told: AtomicBool::new(!enabled),
        })
    }

    /// Whether inodes are reopened from handles here (else all are pinned).
    pub fn uses_handles(&self) -> bool {
        self.enabled
    }

    pub fn budget(&self) -> usize {
        self.budget
    }

    /// How many descriptors the cache holds (pinned ones aside).
    pub fn held(&self) -> usize {
        self.ring.lock().len()
    }

    /// How many times a cold inode was reopened from its handle.
    pub fn reopens(&self) -> u64 {
        self.reopens.load(Ordering::Relaxed)
    }

    /// A slot for the file `handle` names, holding no descriptor yet (see [`Self::offer`]).
    pub fn slot(&self, handle: ExportHandle) -> Arc<Slot> {
        Arc::new(Slot {
            handle,
            fd: Mutex::new(None),
            accessed: AtomicBool::new(false),
        })
    }

    /// The handle of the file `fd` refers to, when it can serve to reopen it.
    pub fn handle_of(&self, fd: &OwnedFd) -> Option<ExportHandle> {
        if !self.enabled {
            return None;
        }
        match ExportHandle::of(fd) {
            Ok((h, id)) if id == self.mount_id => Some(h),
            Ok(_) => {
                self.tell("it is on another mount");
                None
            }
            Err(e) => {
                self.tell(&e.to_string());
                None
            }
        }
    }

    fn tell(&self, why: &str) {
        if !self.told.swap(true, Ordering::Relaxed) {
            tracing::info!("a backing file has no usable file handle ({why}): such files keep a descriptor open while the kernel knows them");
        }
    }

    /// The slot's descriptor, reopened from its handle when cold.
    pub fn get(&self, slot: &Arc<Slot>) -> io::Result<PathFd> {
        let mut g = slot.fd.lock();
        if let Some(fd) = &*g {
            if !slot.accessed.load(Ordering::Relaxed) {
                slot.accessed.store(true, Ordering::Relaxed);
            }
            return Ok(PathFd(fd.clone()));
        }
        let fd = Arc::new(slot.handle.open(&self.mount_fd)?);
        self.reopens.fetch_add(1, Ordering::Relaxed);
        *g = Some(fd.clone());
        drop(g);
        self.admit(slot);
        Ok(PathFd(fd))
    }

    /// Keep `fd` (the slot's file, just opened by a lookup) when the slot holds none: saves a
    /// reopen.
    pub fn offer(&self, slot: &Arc<Slot>, fd: OwnedFd) {
        let mut g = slot.fd.lock();
        if g.is_some() {
            return;
        }
        *g = Some(Arc::new(fd));
        drop(g);
        self.admit(slot);
    }

    /// Enter a slot just filled into the ring; past the budget, close cold descriptors.
    fn admit(&self, slot: &Arc<Slot>) {
        let mut closed = Vec::new();
        let mut ring = self.ring.lock();
        ring.push_back(Arc::downgrade(slot));
        // Each entry is spared at most once, so this ends within two passes.
        while ring.len() > self.budget {
            let Some(w) = ring.pop_front() else { break };
            let Some(s) = w.upgrade() else {
                continue; // its inode is gone, and its descriptor with it
            };
            if s.accessed.swap(false, Ordering::Relaxed) {
                ring.push_back(w);
            } else {
                closed.extend(s.fd.lock().take());
            }
        }
        drop(ring);
        // Closed here, out of the lock; a user's PathFd keeps its own reference.
        drop(closed);
    }
}
