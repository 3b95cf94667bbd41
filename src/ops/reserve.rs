//! Room to free room: on a full disk, rm, rmdir, truncate and an open for writing (which
//! changes nothing yet, and which truncate(1) needs before it cuts) must still work, though
//! each needs a few blocks first (a lock file, a journal intent, a spool line, an index
//! delete's WAL pages).
//!
//! The engine keeps `WORKSPACE/.vikingfs/reserve`, a file of [`RESERVE_BYTES`] allocated
//! while the disk has room. An operation of those that fails for want of space gives back a
//! chunk of the reserve and runs again, while any is left
//! ([`Stores::freeing`](super::Stores::freeing)); so does opening the stores (a WAL file, a
//! shared-memory index), so that `status`, `wait`, `fsck` and `mount` come up on a full disk.
//! A chunk at a time: a writer that fills the room its open got leaves the rest for the rm
//! that follows. The reserve is made again once the disk has room for it and a margin
//! ([`Reserve::ensure`]), after a freeing operation and at every open. Lock files stay
//! OpenViking's: nothing about them changes.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{Result, Stores};
use crate::errno::ToErrno;

/// The reserve's size: far more than one rm needs, little enough to give.
pub const RESERVE_BYTES: u64 = 8 * 1024 * 1024;

/// What one want of space takes back from the reserve: enough for any one operation's lock
/// files, journal intent and WAL pages, so that a writer filling the room it made (an open
/// for writing also gets it) leaves the rest to the next rm.
pub(super) const CHUNK: u64 = 2 * 1024 * 1024;

/// The free space, beyond what the reserve lacks, that remaking it leaves.
const MARGIN: u64 = 4 * RESERVE_BYTES;

/// The reserve file of one workspace.
pub(crate) struct Reserve {
    path: PathBuf,
    /// Whether the reserve was seen whole (a cheap guess; the file is the truth).
    whole: AtomicBool,
}

impl Reserve {
    pub(crate) fn new(internal_dir: &std::path::Path) -> Self {
        let path = internal_dir.join("reserve");
        let reserve = Reserve {
            whole: AtomicBool::new(false),
            path,
        };
        reserve
            .whole
            .store(reserve.len() >= RESERVE_BYTES, Ordering::Relaxed);
        reserve
    }

    fn len(&self) -> u64 {
        std::fs::metadata(&self.path).map_or(0, |m| m.len())
    }

    /// Make the reserve whole when it is not and the disk has room for it and a margin.
    pub(crate) fn ensure(&self) {
        if self.whole.load(Ordering::Relaxed) {
            return;
        }
        let Some((free, _)) = room(self.path.parent().unwrap_or(&self.path)) else {
            return;
        };
        let lacking = RESERVE_BYTES.saturating_sub(self.len());
        if free < lacking + MARGIN {
            return;
        }
        let made = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(&self.path)
        }
        .and_then(|f| {
            // Allocated for real (not a sparse file): giving it back must free blocks.
            crate::sys::fallocate(&f, 0, 0, RESERVE_BYTES)?;
            f.sync_all()
        });
        match made {
            Ok(()) => self.whole.store(true, Ordering::Relaxed),
            Err(e) => tracing::debug!(path = %self.path.display(), "reserve not remade: {e}"),
        }
    }

    /// Give one chunk of the reserve back; whether there was one to give. Cutting a file
    /// needs no new block, so this works on a full disk.
    pub(crate) fn release(&self) -> bool {
        self.whole.store(false, Ordering::Relaxed);
        let len = self.len();
        if len == 0 {
            return false;
        }
        let left = len.saturating_sub(CHUNK);
        let cut = if left == 0 {
            std::fs::remove_file(&self.path)
        } else {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&self.path)
                .and_then(|f| f.set_len(left))
        };
        match cut {
            Ok(()) => {
                tracing::warn!(
                    "disk full: gave back {} MiB of the reserve so that space can be freed ({} MiB left)",
                    (len - left) >> 20,
                    left >> 20
                );
                true
            }
            Err(_) => false,
        }
    }
}

impl Stores {
    /// Run `op`, which frees space (rm, rmdir, truncate) or changes nothing yet (an open for
    /// writing); when it fails for want of space, give a chunk of the reserve back and run it
    /// again, while there is reserve left. Afterwards, make the reserve again if
    /// there is room now.
    pub(crate) fn freeing<T>(&self, op: impl Fn() -> Result<T>) -> Result<T> {
        let mut r = op();
        // History first: what it holds is given back before the reserve is.
        if matches!(&r, Err(e) if e.is_disk_full()) && self.relieve().unwrap_or(0) > 0 {
            r = op();
        }
        while matches!(&r, Err(e) if e.is_disk_full()) && self.reserve.release() {
            r = op();
        }
        if r.is_ok() {
            self.reserve.ensure();
        }
        r
    }
}

/// Bytes free for unprivileged writers, and the size, of the filesystem holding `path`.
pub(crate) fn room(path: &std::path::Path) -> Option<(u64, u64)> {
    let st = crate::sys::statvfs(path).ok()?;
    Some((st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize))
}
