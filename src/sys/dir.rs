//! Reading a directory: `getdents64` into a buffer, one [`Entry`] at a time with no allocation
//! per entry.

use std::ffi::{CStr, OsString};
use std::io;
use std::mem::MaybeUninit;
use std::ops::ControlFlow;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStringExt;

use rustix::fs::{FileType, OFlags, RawDir, RawDirEntry};
use rustix::io::Errno;

use super::at;

/// Room for some hundred entries per `getdents64` (glibc's `readdir` reads 32 KiB too).
const BUFFER: usize = 32 * 1024;

/// A buffer for [`Entries`] of `len` bytes (left uninitialised: the kernel fills it).
pub fn dir_buffer(len: usize) -> Box<[MaybeUninit<u8>]> {
    Box::new_uninit_slice(len)
}

/// One entry of a directory, borrowed from the read buffer.
pub struct Entry<'a> {
    raw: RawDirEntry<'a>,
    /// The directory read, for [`Entry::file_type`].
    dir: BorrowedFd<'a>,
}

impl Entry<'_> {
    pub fn name(&self) -> &CStr {
        self.raw.file_name()
    }

    pub fn ino(&self) -> u64 {
        self.raw.ino()
    }

    /// `.` or `..`, which every listing holds.
    pub fn is_dot(&self) -> bool {
        matches!(self.name().to_bytes(), b"." | b"..")
    }

    /// What `d_type` says; [`FileType::Unknown`] where the filesystem does not tell.
    pub fn d_type(&self) -> FileType {
        self.raw.file_type()
    }

    /// The entry's type: `d_type`, or an `lstat` of it when the filesystem gives none (as
    /// std's `DirEntry::file_type`). `ENOENT` when it went meanwhile.
    pub fn file_type(&self) -> io::Result<FileType> {
        match self.d_type() {
            FileType::Unknown => Ok(FileType::from_raw_mode(
                at::lstatat(self.dir, self.name())?.st_mode,
            )),
            t => Ok(t),
        }
    }
}

/// The entries of a directory opened for reading (not `O_PATH`), `.` and `..` included, read
/// into a buffer the caller keeps (a walk reuses one for every level).
pub struct Entries<'buf, 'fd> {
    dir: BorrowedFd<'fd>,
    raw: RawDir<'buf, BorrowedFd<'fd>>,
}

impl<'buf, 'fd> Entries<'buf, 'fd> {
    pub fn new(dir: BorrowedFd<'fd>, buf: &'buf mut [MaybeUninit<u8>]) -> Self {
        Entries {
            dir,
            raw: RawDir::new(dir, buf),
        }
    }

    /// The next entry; `None` at the end. After an error, stop.
    #[allow(clippy::should_implement_trait)] // an entry borrows the buffer: no Iterator
    pub fn next(&mut self) -> Option<io::Result<Entry<'_>>> {
        let dir = self.dir;
        Some(
            self.raw
                .next()?
                .map(|raw| Entry { raw, dir })
                .map_err(io::Error::from),
        )
    }
}

/// Call `f` on every entry of the directory `dir` (any descriptor of it, `O_PATH` included,
/// which is reopened for reading) but `.` and `..`, until it breaks.
pub fn for_each_entry(
    dir: impl AsFd,
    mut f: impl FnMut(&Entry<'_>) -> ControlFlow<()>,
) -> io::Result<()> {
    let fd = at::openat(dir, c".", OFlags::RDONLY | OFlags::DIRECTORY, 0)?;
    let mut buf = dir_buffer(BUFFER);
    let mut entries = Entries::new(fd.as_fd(), &mut buf);
    while let Some(e) = entries.next() {
        let e = e?;
        if !e.is_dot() && f(&e).is_break() {
            break;
        }
    }
    Ok(())
}

/// The names in the directory `dir` (any descriptor of it).
pub fn dir_names(dir: impl AsFd) -> io::Result<Vec<OsString>> {
    let mut out = Vec::new();
    for_each_entry(dir, |e| {
        out.push(OsString::from_vec(e.name().to_bytes().to_vec()));
        ControlFlow::Continue(())
    })?;
    Ok(out)
}

/// Whether an error says the directory (or an entry) is not there (any more): gone, or a
/// file where a directory was.
pub fn is_gone(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error().map(Errno::from_raw_os_error),
        Some(Errno::NOENT | Errno::NOTDIR)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_with_their_type_and_without_dot_and_dotdot() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("f"), b"x").unwrap();
        std::os::unix::fs::symlink("f", d.path().join("l")).unwrap();
        let root = at::open_path_dir(d.path()).unwrap();
        let mut seen = Vec::new();
        for_each_entry(&root, |e| {
            seen.push((e.name().to_owned(), e.file_type().unwrap()));
            ControlFlow::Continue(())
        })
        .unwrap();
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            seen,
            vec![
                (c"f".to_owned(), FileType::RegularFile),
                (c"l".to_owned(), FileType::Symlink),
                (c"sub".to_owned(), FileType::Directory),
            ]
        );
        let mut names = dir_names(&root).unwrap();
        names.sort();
        assert_eq!(names, ["f", "l", "sub"]);
    }
}
