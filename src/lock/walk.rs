//! A lean recursive directory walk for lock files: `getdents64` with a large buffer, `d_type`
//! instead of a `stat` per entry, `openat` relative to the parent, no allocation per entry.
//! A TREE acquire runs this over its whole subtree, so it is the TREE lock's cost.

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use super::resolver::is_lock_name;

/// One lock file found by the walk: the directory it lies in, relative to the walk's root
/// (empty for the root), its directory fd, and its name.
pub struct Found<'a> {
    pub rel_dir: &'a Path,
    pub dir_fd: BorrowedFd<'a>,
    pub name: &'a CStr,
}

fn open_dir(at: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    // SAFETY: plain openat on a NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            at,
            name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by openat and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
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
    let opened = crate::sysutil::with_at(base, rel, |d, n| {
        let fd = open_dir(d.as_raw_fd(), n)?;
        Ok(fd)
    });
    let fd = match opened {
        Ok(fd) => fd,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR)) => {
            return Ok(())
        }
        Err(e) => return Err(io_err(root.to_path_buf(), e)),
    };
    let mut buf = vec![0u8; 64 * 1024];
    let mut rel = PathBuf::new();
    let err = |rel: &Path, e| io_err(root.join(rel), e);
    walk_dir(fd, &mut rel, &mut buf, &err, f)
}

fn walk_dir<E>(
    fd: OwnedFd,
    rel: &mut PathBuf,
    buf: &mut Vec<u8>,
    err: &dyn Fn(&Path, io::Error) -> E,
    f: &mut dyn FnMut(Found<'_>) -> Result<(), E>,
) -> Result<(), E> {
    // Subdirectories are collected first and walked after, so one buffer serves every level.
    let mut subdirs: Vec<CString> = Vec::new();
    loop {
        // SAFETY: getdents64 writes at most buf.len() bytes into buf.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                fd.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        if n < 0 {
            return Err(err(rel, io::Error::last_os_error()));
        }
        if n == 0 {
            break;
        }
        let mut off = 0usize;
        while off < n as usize {
            // linux_dirent64: d_ino u64, d_off i64, d_reclen u16, d_type u8, d_name[].
            let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
            let d_type = buf[off + 18];
            let name_bytes = &buf[off + 19..off + reclen];
            let name = CStr::from_bytes_until_nul(name_bytes)
                .map_err(|e| err(rel, io::Error::other(e)))?;
            off += reclen;
            let b = name.to_bytes();
            if b == b"." || b == b".." {
                continue;
            }
            let is_dir = match d_type {
                libc::DT_DIR => true,
                libc::DT_UNKNOWN => is_dir_at(fd.as_raw_fd(), name).map_err(|e| err(rel, e))?,
                _ => false,
            };
            if is_dir {
                subdirs.push(name.to_owned());
            } else if is_lock_name(b) {
                f(Found {
                    rel_dir: rel,
                    dir_fd: fd.as_fd(),
                    name,
                })?;
            }
        }
    }
    for name in subdirs {
        let sub = match open_dir(fd.as_raw_fd(), &name) {
            Ok(s) => s,
            // Removed or replaced while we walked: nothing to find there.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR)) => {
                continue
            }
            Err(e) => return Err(err(rel, e)),
        };
        rel.push(std::ffi::OsStr::from_bytes(name.to_bytes()));
        let r = walk_dir(sub, rel, buf, err, f);
        rel.pop();
        r?;
    }
    Ok(())
}

fn is_dir_at(dir: RawFd, name: &CStr) -> io::Result<bool> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstatat fills `st` on success.
    let r = unsafe {
        libc::fstatat(
            dir,
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::ENOENT) {
            Ok(false)
        } else {
            Err(e)
        };
    }
    // SAFETY: fstatat succeeded.
    Ok(unsafe { st.assume_init() }.st_mode & libc::S_IFMT == libc::S_IFDIR)
}

/// Read a file relative to a directory fd; `Ok(false)` when it is gone.
pub fn read_at(dir: BorrowedFd<'_>, name: &CStr, out: &mut Vec<u8>) -> io::Result<bool> {
    out.clear();
    // SAFETY: plain openat on a NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::ENOENT) {
            Ok(false)
        } else {
            Err(e)
        };
    }
    // SAFETY: fd was just opened and is owned by nobody else.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    super::provider::read_small(&mut file, out)?;
    Ok(true)
}
