//! Directory handles of the core: listings as snapshots, filtered to what the namespace shows
//! (never an internal name; the sidecars only with [`super::FsConfig::show_summaries`]).

use std::ffi::OsStr;
use std::ops::ControlFlow;
use std::os::unix::ffi::OsStrExt;

use super::handles::{DirHandle, Listing};
use super::{DirEntry, FsError, FsResult, VikingFs, ROOT_INO};
use crate::sys::{self, FileType};
use crate::uri::{is_internal_name, is_sidecar_name, SCOPES};

impl VikingFs {
    /// Open directory `ino`. Its listing is taken at each read from offset 0 (the first read
    /// or a `rewinddir`), so that what was created between opendir and it is seen (POSIX;
    /// xfstests generic/471); later reads continue that listing.
    #[tracing::instrument(level = "debug", skip(self))]
    pub fn opendir(&self, ino: u64) -> FsResult<u64> {
        if super::past::is_past(ino) {
            return self.past_opendir(ino);
        }
        let inode = self.inodes.get(ino)?;
        let st = sys::fstat(&inode.fd()?).map_err(|e| FsError::io("opendir", e))?;
        if !st.is_dir() {
            return Err(FsError::NotADirectory(ino));
        }
        Ok(self.handles.add_dir(DirHandle {
            ino,
            entries: parking_lot::Mutex::new(Listing::default()),
        }))
    }

    /// The visible entries of directory `ino`, `.` and `..` first.
    fn listing(&self, ino: u64) -> FsResult<Listing> {
        if super::past::is_past(ino) {
            return self.past_listing(ino);
        }
        let inode = self.inodes.get(ino)?;
        let fd = inode.fd()?;
        // Its device names the entries' inodes.
        let st = sys::fstat(&fd).map_err(|e| FsError::io("readdir", e))?;
        let mut entries = Listing::default();
        entries.push(OsStr::new("."), ino, libc::DT_DIR);
        entries.push(OsStr::new(".."), ROOT_INO, libc::DT_DIR);
        // Sidecars (when listed) last: `rm -rf` removes the user's entries first, then may
        // remove them.
        let mut sidecars = Listing::default();
        sys::for_each_entry(&fd, |e| {
            let name = OsStr::from_bytes(e.name().to_bytes());
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
                return ControlFlow::Continue(());
            }
            let kind = e.file_type().map_or(libc::DT_UNKNOWN, dtype);
            let ino = self.inodes.listing_ino(st.st_dev, e.ino());
            if sidecar {
                sidecars.push(name, ino, kind);
            } else {
                entries.push(name, ino, kind);
            }
            ControlFlow::Continue(())
        })
        .map_err(|e| FsError::io("readdir", e))?;
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
        if offset == 0 {
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

/// The `d_type` a listing reply gives for a file type.
pub(super) fn dtype(t: FileType) -> u8 {
    match t {
        FileType::Directory => libc::DT_DIR,
        FileType::RegularFile => libc::DT_REG,
        FileType::Symlink => libc::DT_LNK,
        FileType::Fifo => libc::DT_FIFO,
        FileType::Socket => libc::DT_SOCK,
        FileType::CharacterDevice => libc::DT_CHR,
        FileType::BlockDevice => libc::DT_BLK,
        FileType::Unknown => libc::DT_UNKNOWN,
    }
}
