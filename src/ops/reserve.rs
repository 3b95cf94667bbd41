//! Room to free room: on a full disk, rm, rmdir and truncate must still work, though each
//! needs a few blocks first (a lock file, a journal intent, an index delete's WAL pages).
//!
//! The engine keeps `WORKSPACE/.vikingfs/reserve`, a file of [`RESERVE_BYTES`] allocated
//! while the disk has room. An operation that frees space and fails for want of it gives the
//! reserve back and runs once more ([`Stores::freeing`](super::Stores::freeing)); so does opening the stores (a WAL
//! file, a shared-memory index), so that `status`, `wait`, `fsck` and `mount` come up on a
//! full disk. The reserve is made again once the disk has room for it and a margin
//! ([`Reserve::ensure`]), after a freeing operation and at every open. Lock files stay
//! OpenViking's: nothing about them changes.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{Result, Stores};
use crate::errno::ToErrno;

/// The reserve's size: far more than one rm needs, little enough to give.
pub const RESERVE_BYTES: u64 = 8 * 1024 * 1024;

/// The free space, beyond the reserve itself, a new reserve leaves.
const MARGIN: u64 = 4 * RESERVE_BYTES;

/// The reserve file of one workspace.
pub(crate) struct Reserve {
    path: PathBuf,
    /// Whether the reserve was seen present (a cheap guess; the file is the truth).
    present: AtomicBool,
}

impl Reserve {
    pub(crate) fn new(internal_dir: &std::path::Path) -> Self {
        let path = internal_dir.join("reserve");
        let present = std::fs::metadata(&path).is_ok_and(|m| m.len() >= RESERVE_BYTES);
        Reserve {
            path,
            present: AtomicBool::new(present),
        }
    }

    /// Make the reserve when it is missing and the disk has room for it and a margin.
    pub(crate) fn ensure(&self) {
        if self.present.load(Ordering::Relaxed) {
            return;
        }
        let Some((free, _)) = room(self.path.parent().unwrap_or(&self.path)) else {
            return;
        };
        if free < RESERVE_BYTES + MARGIN {
            return;
        }
        let tmp = self.path.with_extension("new");
        let made = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
        }
        .and_then(|f| {
            // Allocated for real (not a sparse file): giving it back must free blocks.
            crate::sys::fallocate(&f, 0, 0, RESERVE_BYTES)?;
            f.sync_all()
        });
        match made.and_then(|()| std::fs::rename(&tmp, &self.path)) {
            Ok(()) => self.present.store(true, Ordering::Relaxed),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                tracing::debug!(path = %self.path.display(), "no reserve made: {e}");
            }
        }
    }

    /// Give the reserve back; whether there was one to give.
    pub(crate) fn release(&self) -> bool {
        self.present.store(false, Ordering::Relaxed);
        match std::fs::remove_file(&self.path) {
            Ok(()) => {
                tracing::warn!(
                    "disk full: released the {} MiB reserve so that space can be freed",
                    RESERVE_BYTES >> 20
                );
                true
            }
            Err(_) => false,
        }
    }
}

impl Stores {
    /// Run `op`, which frees space (rm, rmdir, truncate); when it fails for want of space,
    /// give the reserve back and run it once more. Afterwards, make the reserve again if
    /// there is room now.
    pub(crate) fn freeing<T>(&self, op: impl Fn() -> Result<T>) -> Result<T> {
        let r = match op() {
            Err(e) if e.is_disk_full() && self.reserve.release() => op(),
            r => r,
        };
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
