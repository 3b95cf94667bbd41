//! Thin safe wrappers over the `*at` system calls the core needs (std has no O_PATH,
//! fstatat, renameat2, utimensat or xattr calls).

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

pub fn cstr(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

pub fn cpath(p: &Path) -> io::Result<CString> {
    cstr(p.as_os_str())
}

/// `openat(dir, name, flags, mode)`.
pub fn openat(dir: RawFd, name: &OsStr, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let c = cstr(name)?;
    // SAFETY: `c` is a NUL-terminated CString alive for the call; `mode` is always passed, so
    // the variadic argument is there whether or not `flags` has O_CREAT or O_TMPFILE.
    let fd = cvt(unsafe { libc::openat(dir, c.as_ptr(), flags | libc::O_CLOEXEC, mode) })?;
    // SAFETY: openat succeeded (cvt passed it), so `fd` is a new descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`, or `fstat(dir)` when `name` is empty.
pub fn statat(dir: RawFd, name: &OsStr) -> io::Result<libc::stat> {
    let c = cstr(name)?;
    // SAFETY: `stat` is a C struct of plain integers: all-zero bytes are a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let flags = libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH;
    // SAFETY: `c` is a NUL-terminated CString alive for the call; fstatat writes one `stat`
    // into `st`, a live local of that type.
    cvt(unsafe { libc::fstatat(dir, c.as_ptr(), &mut st, flags) })?;
    Ok(st)
}

pub fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    statat(fd.as_raw_fd(), OsStr::new(""))
}

/// `/proc/self/fd/N`: reopens an O_PATH descriptor, or names it for path-based calls.
pub fn proc_fd(fd: RawFd) -> CString {
    CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL")
}

pub fn is_dir(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

pub fn is_lnk(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFLNK
}

pub fn is_reg(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFREG
}

/// Apply a timestamp change; `None` leaves it (UTIME_OMIT).
pub fn utimens(
    dir: RawFd,
    path: &std::ffi::CStr,
    atime: Option<TimeSpec>,
    mtime: Option<TimeSpec>,
) -> io::Result<()> {
    let conv = |t: Option<TimeSpec>| match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(TimeSpec::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(TimeSpec::At(s, ns)) => libc::timespec {
            tv_sec: s,
            tv_nsec: ns as i64,
        },
    };
    let ts = [conv(atime), conv(mtime)];
    // SAFETY: `path` is a NUL-terminated CStr borrowed for the call; `ts` is the array of two
    // timespecs utimensat reads (and does not write or keep).
    cvt(unsafe { libc::utimensat(dir, path.as_ptr(), ts.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok(())
}

/// A timestamp to set: now, or seconds and nanoseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeSpec {
    Now,
    At(i64, u32),
}

/// Raise the open-file limit to the hard limit: the inode table's descriptor budget follows
/// the soft limit (see `fdcache::default_budget`).
pub fn raise_nofile_limit() {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into `rl`, a live local of that type.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } == 0 {
        rl.rlim_cur = rl.rlim_max;
        // SAFETY: setrlimit only reads the `rlimit` that `rl` holds.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rl) };
    }
}
