//! Directory handles of the core: listings as snapshots, filtered to what the namespace shows
//! (never an internal name; the sidecars only with [`super::FsConfig::show_summaries`]).

use std::os::fd::{AsFd, AsRawFd};

use std::ffi::OsStr;

use super::handles::{DirHandle, Listing};
use super::{sys, DirEntry, FsError, FsResult, VikingFs, ROOT_INO};
use crate::uri::{is_internal_name, is_sidecar_name, SCOPES};

impl VikingFs {
    /// Open a directory: snapshot its visible entries.
    #[tracing::instrument(level = "debug", skip(self))]
    pub fn opendir(&self, ino: u64) -> FsResult<u64> {
        let entries = self.listing(ino)?;
        Ok(self.handles.add_dir(DirHandle {
            ino,
            entries: parking_lot::Mutex::new(entries),
            read: Default::default(),
        }))
    }

    /// The visible entries of directory `ino`, `.` and `..` first.
    fn listing(&self, ino: u64) -> FsResult<Listing> {
        let inode = self.inodes.get(ino)?;
        let fd = inode.fd()?;
        let st = sys::fstat(fd.as_fd()).map_err(|e| FsError::io("opendir", e))?;
        if !sys::is_dir(&st) {
            return Err(FsError::NotADirectory(ino));
        }
        let mut entries = Listing::default();
        entries.push(OsStr::new("."), ino, libc::DT_DIR);
        entries.push(OsStr::new(".."), ROOT_INO, libc::DT_DIR);
        // Sidecars (when listed) last: `rm -rf` removes the user's entries first, then may
        // remove them.
        let mut sidecars = Listing::default();
        let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let rd = std::fs::read_dir(&path).map_err(|e| FsError::io("opendir", e))?;
        for e in rd {
            let e = e.map_err(|e| FsError::io("readdir", e))?;
            let name = e.file_name();
            let (visible, sidecar) = match name.to_str() {
                Some(s) if ino == ROOT_INO => (SCOPES.contains(&s), false),
                // Sidecars stay reachable by name (lookup, open, stat); hidden from listings they
                // are not copied, tracked or walked by tools as if users had written them.
                Some(s) => {
                    let sidecar = is_sidecar_name(s);
                    (
                        !is_internal_name(s) && (self.config.show_summaries || !sidecar),
                        sidecar,
                    )
                }
                None => (true, false),
            };
            if !visible {
                continue;
            }
            use std::os::unix::fs::DirEntryExt;
            let kind = match e.file_type() {
                Ok(t) => dtype(t),
                Err(_) => libc::DT_UNKNOWN,
            };
            let ino = self.inodes.listing_ino(st.st_dev, e.ino());
            if sidecar {
                sidecars.push(&name, ino, kind);
            } else {
                entries.push(&name, ino, kind);
            }
        }
        entries.append(&sidecars);
        Ok(entries)
    }

    /// Hand `add` the entries from `offset` on (offset i+1 follows entry i), with the offset
    /// of the next, until it answers that the reply is full. A read from 0 after the first is
    /// a `rewinddir`: the snapshot is taken again. Nothing is copied: a listing of N entries
    /// read a page at a time costs O(N), where collecting the rest of it at each page cost
    /// O(N²) (100,000 names: seconds).
    pub fn readdir(
        &self,
        fh: u64,
        offset: u64,
        mut add: impl FnMut(u64, &DirEntry<'_>) -> bool,
    ) -> FsResult<()> {
        let d = self.handles.dir(fh)?;
        let mut entries = d.entries.lock();
        if offset == 0 && d.read.swap(true, std::sync::atomic::Ordering::Relaxed) {
            *entries = self.listing(d.ino)?;
        }
        let from = usize::try_from(offset).unwrap_or(usize::MAX);
        for i in from..entries.len() {
            let e = entries.get(i).expect("in range");
            if add(i as u64 + 1, &e) {
                break;
            }
        }
        Ok(())
    }

    /// The directory a handle lists.
    pub fn dir_ino(&self, fh: u64) -> FsResult<u64> {
        Ok(self.handles.dir(fh)?.ino)
    }

    pub fn releasedir(&self, fh: u64) {
        self.handles.remove_dir(fh);
    }
}

fn dtype(t: std::fs::FileType) -> u8 {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        libc::DT_DIR
    } else if t.is_file() {
        libc::DT_REG
    } else if t.is_symlink() {
        libc::DT_LNK
    } else if t.is_fifo() {
        libc::DT_FIFO
    } else if t.is_socket() {
        libc::DT_SOCK
    } else if t.is_char_device() {
        libc::DT_CHR
    } else if t.is_block_device() {
        libc::DT_BLK
    } else {
        libc::DT_UNKNOWN
    }
}
