//! Single system calls on a name relative to a directory descriptor (the `*at` family), or on
//! a descriptor itself. A name here must fit one call (shorter than [`super::PATH_MAX`]):
//! [`super::DataRoot`] walks a longer path in chunks first. Every descriptor opened is
//! close-on-exec.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Access, AtFlags, FileType, Gid, Mode, OFlags, RenameFlags, Uid, CWD};
use rustix::path::Arg;

use super::stat::{timestamps, Stat, TimeSpec};

/// Flags of a descriptor that only names a directory (for `*at` calls and `O_TMPFILE`).
const DIR_PATH: OFlags = OFlags::PATH.union(OFlags::DIRECTORY);

/// `openat(dir, name, flags | O_CLOEXEC, mode)`.
pub fn openat<P: Arg>(dir: impl AsFd, name: P, flags: OFlags, mode: u32) -> io::Result<OwnedFd> {
    let mode = Mode::from_bits_retain(mode);
    Ok(rustix::fs::openat(
        dir,
        name,
        flags | OFlags::CLOEXEC,
        mode,
    )?)
}

/// `openat2(dir, name, flags | O_CLOEXEC)` resolved strictly below `dir` without following
/// any symlink on the way, the last component included (`RESOLVE_BENEATH |
/// RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`): a symlink anywhere is `ELOOP`, a `..`
/// that would climb out of `dir` is `EXDEV`. `ENOSYS` on a kernel older than 5.6 (or where a
/// seccomp filter refuses the call).
pub fn openat_beneath<P: Arg>(dir: impl AsFd, name: P, flags: OFlags) -> io::Result<OwnedFd> {
    use rustix::fs::ResolveFlags;
    let how = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    Ok(rustix::fs::openat2(
        dir,
        name,
        flags | OFlags::CLOEXEC,
        Mode::empty(),
        how,
    )?)
}

/// Open the directory `name` in `dir` `O_PATH`: a descriptor that only names it, for `*at`
/// calls (`ENOTDIR` when something else is there).
pub fn open_dir_path<P: Arg>(dir: impl AsFd, name: P) -> io::Result<OwnedFd> {
    openat(dir, name, DIR_PATH, 0)
}

/// Open the directory at `path` (absolute, or relative to the working directory) `O_PATH`.
pub fn open_path_dir(path: &Path) -> io::Result<OwnedFd> {
    open_dir_path(CWD, path)
}

/// `/proc/self/fd/N`: names the file a descriptor (`O_PATH` included) refers to, for the calls
/// that take only a path. Valid while the descriptor stays open.
pub fn proc_path(fd: impl AsFd) -> CString {
    CString::new(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd())).expect("no NUL")
}

/// The path the kernel shows for the file `fd` refers to (the name it was opened by, as it is
/// now; `… (deleted)` once it has none).
pub fn fd_path(fd: impl AsFd) -> io::Result<PathBuf> {
    std::fs::read_link(OsStr::from_bytes(proc_path(fd).as_bytes()))
}

/// Open the file `fd` refers to anew, with `flags` (an `O_PATH` descriptor can't read or
/// write): through [`proc_path`], which works on any file the descriptor names. `flags` must
/// not create a file.
pub fn reopen(fd: impl AsFd, flags: OFlags) -> io::Result<OwnedFd> {
    openat(CWD, proc_path(fd), flags, 0)
}

/// `lstat` of `name` in `dir` (a final symlink is not followed).
pub fn lstatat<P: Arg>(dir: impl AsFd, name: P) -> io::Result<Stat> {
    Ok(Stat(rustix::fs::statat(
        dir,
        name,
        AtFlags::SYMLINK_NOFOLLOW,
    )?))
}

/// `fstat` of a descriptor (an `O_PATH` one included).
pub fn fstat(fd: impl AsFd) -> io::Result<Stat> {
    Ok(Stat(rustix::fs::fstat(fd)?))
}

/// `fchmod(fd, mode)` (not on an `O_PATH` descriptor).
pub fn chmod_fd(fd: impl AsFd, mode: u32) -> io::Result<()> {
    Ok(rustix::fs::fchmod(fd, Mode::from_bits_retain(mode))?)
}

/// `mkdirat(dir, name, mode)`.
pub fn mkdirat<P: Arg>(dir: impl AsFd, name: P, mode: u32) -> io::Result<()> {
    Ok(rustix::fs::mkdirat(
        dir,
        name,
        Mode::from_bits_retain(mode),
    )?)
}

/// `mknodat(dir, name, mode, rdev)`: `mode` holds the file type as mknod(2)'s does (none is a
/// regular file).
pub fn mknodat<P: Arg>(dir: impl AsFd, name: P, mode: u32, rdev: u64) -> io::Result<()> {
    // rustix takes the type apart from the permission bits, and has no "none".
    let kind = match mode & libc::S_IFMT {
        0 => FileType::RegularFile,
        t => FileType::from_raw_mode(t),
    };
    Ok(rustix::fs::mknodat(
        dir,
        name,
        kind,
        Mode::from_raw_mode(mode),
        rdev,
    )?)
}

/// `symlinkat(target, dir, name)`: make `name` in `dir` a symlink to `target`.
pub fn symlinkat<T: Arg, P: Arg>(target: T, dir: impl AsFd, name: P) -> io::Result<()> {
    Ok(rustix::fs::symlinkat(target, dir, name)?)
}

/// `linkat(from_dir, from, to_dir, to, 0)`: a new name for a file (a final symlink is linked
/// itself; `EEXIST` when `to` exists).
pub fn linkat<P: Arg, Q: Arg>(
    from_dir: impl AsFd,
    from: P,
    to_dir: impl AsFd,
    to: Q,
) -> io::Result<()> {
    Ok(rustix::fs::linkat(
        from_dir,
        from,
        to_dir,
        to,
        AtFlags::empty(),
    )?)
}

/// Give the open file `file` (an `O_TMPFILE` one: no name yet) the name `name` in `dir`;
/// `EEXIST` when it exists. Through [`proc_path`] and `AT_SYMLINK_FOLLOW`, which needs no
/// capability (`AT_EMPTY_PATH` would need CAP_DAC_READ_SEARCH).
pub fn link_file<P: Arg>(file: impl AsFd, dir: impl AsFd, name: P) -> io::Result<()> {
    let src = proc_path(file);
    Ok(rustix::fs::linkat(
        CWD,
        &*src,
        dir,
        name,
        AtFlags::SYMLINK_FOLLOW,
    )?)
}

/// `unlinkat(dir, name, 0)`: remove a name that is not a directory.
pub fn unlinkat<P: Arg>(dir: impl AsFd, name: P) -> io::Result<()> {
    Ok(rustix::fs::unlinkat(dir, name, AtFlags::empty())?)
}

/// `unlinkat(dir, name, AT_REMOVEDIR)`: remove an empty directory.
pub fn rmdirat<P: Arg>(dir: impl AsFd, name: P) -> io::Result<()> {
    Ok(rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)?)
}

/// `renameat2(from_dir, from, to_dir, to, flags)`.
pub fn renameat<P: Arg, Q: Arg>(
    from_dir: impl AsFd,
    from: P,
    to_dir: impl AsFd,
    to: Q,
    flags: RenameFlags,
) -> io::Result<()> {
    Ok(rustix::fs::renameat_with(
        from_dir, from, to_dir, to, flags,
    )?)
}

/// The target of the symlink `fd` (opened `O_PATH | O_NOFOLLOW`) names.
pub fn readlink(fd: impl AsFd) -> io::Result<Vec<u8>> {
    Ok(rustix::fs::readlinkat(fd, c"", Vec::new())?.into_bytes())
}

/// A user or group id as chown(2) takes it: `None` (or -1) leaves it.
fn id(raw: Option<u32>) -> Option<u32> {
    raw.filter(|&r| r != u32::MAX)
}

/// `fchownat(dir, name, uid, gid, AT_SYMLINK_NOFOLLOW)`; `None` leaves that id.
pub fn chownat<P: Arg>(
    dir: impl AsFd,
    name: P,
    uid: Option<u32>,
    gid: Option<u32>,
) -> io::Result<()> {
    Ok(rustix::fs::chownat(
        dir,
        name,
        id(uid).map(Uid::from_raw),
        id(gid).map(Gid::from_raw),
        AtFlags::SYMLINK_NOFOLLOW,
    )?)
}

/// `fchownat(fd, "", uid, gid, AT_EMPTY_PATH)`: the file `fd` (`O_PATH` included, a
/// symlink's too) refers to itself; `None` leaves that id. (`/proc/self/fd/N` with
/// `AT_SYMLINK_NOFOLLOW` would name the magic link instead, and change nothing.)
pub fn chown_fd(fd: impl AsFd, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
    Ok(rustix::fs::chownat(
        fd,
        c"",
        id(uid).map(Uid::from_raw),
        id(gid).map(Gid::from_raw),
        AtFlags::EMPTY_PATH,
    )?)
}

/// Set the times of the file `fd` (`O_PATH` included) refers to; `None` leaves that time.
/// A file other than a symlink through [`proc_path`], followed (works on any kernel); a
/// symlink's own with `AT_EMPTY_PATH` (Linux 5.8 and later).
pub fn utimens_fd(
    fd: impl AsFd,
    atime: Option<TimeSpec>,
    mtime: Option<TimeSpec>,
) -> io::Result<()> {
    let times = timestamps(atime, mtime);
    if fstat(&fd)?.is_symlink() {
        Ok(rustix::fs::utimensat(fd, c"", &times, AtFlags::EMPTY_PATH)?)
    } else {
        Ok(rustix::fs::utimensat(
            CWD,
            &*proc_path(fd),
            &times,
            AtFlags::empty(),
        )?)
    }
}

/// `fchmodat(dir, name, mode, 0)`: follows a final symlink (Linux has no mode on symlinks).
pub fn chmodat<P: Arg>(dir: impl AsFd, name: P, mode: u32) -> io::Result<()> {
    let mode = Mode::from_bits_retain(mode);
    Ok(rustix::fs::chmodat(dir, name, mode, AtFlags::empty())?)
}

/// `utimensat(dir, name, [atime, mtime], AT_SYMLINK_NOFOLLOW)`; `None` leaves that time.
pub fn utimensat<P: Arg>(
    dir: impl AsFd,
    name: P,
    atime: Option<TimeSpec>,
    mtime: Option<TimeSpec>,
) -> io::Result<()> {
    let times = timestamps(atime, mtime);
    Ok(rustix::fs::utimensat(
        dir,
        name,
        &times,
        AtFlags::SYMLINK_NOFOLLOW,
    )?)
}

/// `faccessat(AT_FDCWD, /proc/self/fd/N, mask, 0)`: whether the caller's real ids may access
/// the file `fd` refers to as `mask` (`R_OK`, `W_OK`, `X_OK`, `F_OK`) says.
pub fn access(fd: impl AsFd, mask: i32) -> io::Result<()> {
    let mask = Access::from_bits_retain(mask as _);
    Ok(rustix::fs::accessat(
        CWD,
        &*proc_path(fd),
        mask,
        AtFlags::empty(),
    )?)
}
