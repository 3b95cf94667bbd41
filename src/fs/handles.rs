//! Open file and directory handles: what the kernel's `fh` numbers stand for.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
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
    /// (mtime, ctime, size) when opened.
    pub stamp: ((i64, i64), (i64, i64), i64),
}

impl FileHandle {
    pub fn mark_written(&self) {
        self.wrote.store(true, Ordering::Relaxed);
    }

    pub fn wrote(&self) -> bool {
        self.wrote.load(Ordering::Relaxed)
    }
}

/// One entry of a directory listing snapshot, as [`Listing`] hands it out.
#[derive(Debug, Clone, Copy)]
pub struct DirEntry<'a> {
    pub name: &'a OsStr,
    /// The kernel's inode number for this entry.
    pub ino: u64,
    /// `DT_*` (d_type).
    pub kind: u8,
}

/// A directory listing snapshot: every name in one buffer, so that a directory of a hundred
/// thousand names is two allocations, not a hundred thousand (and its memory goes back to
/// the system when the handle closes).
#[derive(Debug, Default)]
pub struct Listing {
    names: Vec<u8>,
    entries: Vec<Packed>,
}

#[derive(Debug, Clone, Copy)]
struct Packed {
    ino: u64,
    /// Where the name starts in `names` (it ends where the next starts).
    start: u32,
    kind: u8,
}

impl Listing {
    pub fn push(&mut self, name: &OsStr, ino: u64, kind: u8) {
        let start = u32::try_from(self.names.len()).expect("a listing under 4 GiB of names");
        self.names.extend_from_slice(name.as_bytes());
        self.entries.push(Packed { ino, start, kind });
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entry `i`.
    pub fn get(&self, i: usize) -> Option<DirEntry<'_>> {
        let e = self.entries.get(i)?;
        let end = self
            .entries
            .get(i + 1)
            .map_or(self.names.len(), |n| n.start as usize);
        Some(DirEntry {
            name: OsStr::from_bytes(&self.names[e.start as usize..end]),
            ino: e.ino,
            kind: e.kind,
        })
    }

    /// Append `other`'s entries after this one's.
    pub fn append(&mut self, other: &Listing) {
        for i in 0..other.len() {
            let e = other.get(i).expect("in range");
            self.push(e.name, e.ino, e.kind);
        }
    }
}

/// An open directory: a snapshot of its visible entries taken at opendir (offset i+1 names
/// entry i), so a listing interleaved with unlinks neither skips nor repeats a name.
#[derive(Debug)]
pub struct DirHandle {
    pub ino: u64,
    /// The listing taken at the last read from offset 0 (a `rewinddir` takes a new one).
    pub entries: Mutex<Listing>,
}

/// Handle numbers for both kinds; never reused while the daemon runs.
#[derive(Debug, Default)]
pub struct Handles {
    next: AtomicU64,
    files: Mutex<Files>,
    dirs: Mutex<HashMap<u64, Arc<DirHandle>>>,
}

/// The open files, and per inode how many of them are writable (asked at every stat of a
/// file, so not a scan of every handle).
#[derive(Debug, Default)]
struct Files {
    by_fh: HashMap<u64, Arc<FileHandle>>,
    writers: HashMap<u64, usize>,
}

impl Handles {
    fn next(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn add_file(&self, h: FileHandle) -> u64 {
        let fh = self.next();
        let mut files = self.files.lock();
        if h.writable {
            *files.writers.entry(h.ino).or_default() += 1;
        }
        files.by_fh.insert(fh, Arc::new(h));
        fh
    }

    pub fn file(&self, fh: u64) -> FsResult<Arc<FileHandle>> {
        self.files
            .lock()
            .by_fh
            .get(&fh)
            .cloned()
            .ok_or(FsError::UnknownHandle(fh))
    }

    pub fn remove_file(&self, fh: u64) -> FsResult<Arc<FileHandle>> {
        let mut files = self.files.lock();
        let h = files.by_fh.remove(&fh).ok_or(FsError::UnknownHandle(fh))?;
        if h.writable {
            if let std::collections::hash_map::Entry::Occupied(mut n) = files.writers.entry(h.ino) {
                *n.get_mut() -= 1;
                if *n.get() == 0 {
                    n.remove();
                }
            }
        }
        Ok(h)
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
        self.files.lock().writers.contains_key(&ino)
    }

    /// Open file handles (tests: every handle is released).
    pub fn open_files(&self) -> usize {
        self.files.lock().by_fh.len()
    }
}
