//! A lean recursive directory walk for lock files: `getdents64` with a large buffer, `d_type`
//! instead of a `stat` per entry, `openat` relative to the parent, no allocation per entry.
//! A TREE acquire runs this over its whole subtree, so it is the TREE lock's cost.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::resolver::is_lock_name;
use crate::sys::{self, FileType, OFlags};

/// One lock file found by the walk: the directory it lies in, relative to the walk's root
/// (empty for the root), its directory fd, and its name.
pub struct Found<'a> {
    pub rel_dir: &'a Path,
    pub dir_fd: BorrowedFd<'a>,
    pub name: &'a CStr,
}

/// Open a directory of the walk for reading; a symlink is not followed.
fn open_dir(at: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW;
    sys::openat(at, name, flags, 0)
}

/// Visit every lock file below `rel` in `base` (a missing directory has none); `root` is where
/// that is, for messages. `f` returning `Err` stops. `io_err` turns a walk error into the
/// caller's error, given the directory it happened in.
pub fn lock_files<E>(
    base: BorrowedFd<'_>,
    rel: &[u8],
    root: &Path,
    io_err: &dyn Fn(PathBuf, io::Error) -> E,
    f: &mut dyn FnMut(Found<'_>) -> Result<(), E>,
) -> Result<(), E> {
    let fd = match sys::with_at(base, rel, open_dir) {
        Ok(fd) => fd,
        Err(e) if sys::is_gone(&e) => return Ok(()),
        Err(e) => return Err(io_err(root.to_path_buf(), e)),
    };
    let mut buf = sys::dir_buffer(64 * 1024);
    let mut rel = PathBuf::new();
    let err = |rel: &Path, e| io_err(root.join(rel), e);
    walk_dir(fd, &mut rel, &mut buf, &err, f)
}

fn walk_dir<E>(
    fd: OwnedFd,
    rel: &mut PathBuf,
    buf: &mut [std::mem::MaybeUninit<u8>],
    err: &dyn Fn(&Path, io::Error) -> E,
    f: &mut dyn FnMut(Found<'_>) -> Result<(), E>,
) -> Result<(), E> {
    // Subdirectories are collected first and walked after, so one buffer serves every level.
    let mut subdirs: Vec<CString> = Vec::new();
    let mut entries = sys::Entries::new(fd.as_fd(), buf);
    while let Some(e) = entries.next() {
        let e = e.map_err(|e| err(rel, e))?;
        if e.is_dot() {
            continue;
        }
        let is_dir = match e.file_type() {
            Ok(t) => t == FileType::Directory,
            // Removed since it was listed: nothing to find there.
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(err(rel, e)),
        };
        let name = e.name();
        if is_dir {
            subdirs.push(name.to_owned());
        } else if is_lock_name(name.to_bytes()) {
            f(Found {
                rel_dir: rel,
                dir_fd: fd.as_fd(),
                name,
            })?;
        }
    }
    for name in subdirs {
        let sub = match open_dir(fd.as_fd(), &name) {
            Ok(s) => s,
            // Removed or replaced while we walked: nothing to find there.
            Err(e) if sys::is_gone(&e) => continue,
            Err(e) => return Err(err(rel, e)),
        };
        rel.push(std::ffi::OsStr::from_bytes(name.to_bytes()));
        let r = walk_dir(sub, rel, buf, err, f);
        rel.pop();
        r?;
    }
    Ok(())
}
