//! Open file and directory handles: what the kernel's `fh` numbers stand for.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::fs::error::{FsError, FsResult};

/// An open regular file.
#[derive(Debug)]
pub struct FileHandle {
    pub ino: u64,
    pub file: File,
    /// Opened for writing (or created, or truncated): release reports the file as written when
    /// its content changed.
    pub writable: bool,
    /// Created or truncated at open: counts as written even if no byte follows.
    pub fresh: bool,
    /// A write went through this handle (reads and writes bypass us under FUSE passthrough,
    /// so release also compares the file's change stamp).
    pub wrote: AtomicBool,
    /// (mtime, ctime, size) at open.
    pub stamp: (i64, i64, i64, i64, i64),
}

impl FileHandle {
    pub fn mark_written(&self) {
        self.wrote.store(true, Ordering::Relaxed);
    }

    pub fn wrote(&self) -> bool {
        self.wrote.load(Ordering::Relaxed)
    }
}

/// One entry of a directory listing snapshot.
#[derive(Debug, Clone)]
pub struct DirEntry {
    pub name: OsString,
    /// The kernel's inode number for this entry.
    pub ino: u64,
    /// `libc::DT_*`.
    pub kind: u8,
}

/// An open directory: a snapshot of its visible entries taken at opendir (offset i+1 names
/// entry i), so a listing interleaved with unlinks neither skips nor repeats a name.
#[derive(Debug)]
pub struct DirHandle {
    pub ino: u64,
    pub entries: Mutex<Vec<DirEntry>>,
    /// A listing was read from offset 0 already: the next read from 0 is a `rewinddir`,
    /// which must see the directory as it is then (POSIX), not the old snapshot.
    pub read: std::sync::atomic::AtomicBool,
}

/// Handle numbers for both kinds; never reused while the daemon runs.
#[derive(Debug, Default)]
pub struct Handles {
    next: AtomicU64,
    files: Mutex<HashMap<u64, Arc<FileHandle>>>,
    dirs: Mutex<HashMap<u64, Arc<DirHandle>>>,
}

impl Handles {
    fn next(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn add_file(&self, h: FileHandle) -> u64 {
        let fh = self.next();
        self.files.lock().insert(fh, Arc::new(h));
        fh
    }

    pub fn file(&self, fh: u64) -> FsResult<Arc<FileHandle>> {
        self.files
            .lock()
            .get(&fh)
            .cloned()
            .ok_or(FsError::UnknownHandle(fh))
    }

    pub fn remove_file(&self, fh: u64) -> FsResult<Arc<FileHandle>> {
        self.files
            .lock()
            .remove(&fh)
            .ok_or(FsError::UnknownHandle(fh))
    }

    pub fn add_dir(&self, h: DirHandle) -> u64 {
        let fh = self.next();
        self.dirs.lock().insert(fh, Arc::new(h));
        fh
    }

    pub fn dir(&self, fh: u64) -> FsResult<Arc<DirHandle>> {
        self.dirs
            .lock()
            .get(&fh)
            .cloned()
            .ok_or(FsError::UnknownHandle(fh))
    }

    pub fn remove_dir(&self, fh: u64) {
        self.dirs.lock().remove(&fh);
    }

    /// Is inode `ino` open through a writable handle?
    pub fn writable_open(&self, ino: u64) -> bool {
        self.files
            .lock()
            .values()
            .any(|h| h.ino == ino && h.writable)
    }

    /// Open file handles (tests: every handle is released).
    pub fn open_files(&self) -> usize {
        self.files.lock().len()
    }
}
