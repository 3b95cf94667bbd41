//! Calls on an open file, or on the file a descriptor names: space, in-kernel copies, seeks,
//! advisory locks, extended attributes; and `statvfs` of a filesystem.
//!
//! An `O_PATH` descriptor takes no xattr call, so those go through [`super::proc_path`], as the
//! path-based calls they are (a final symlink followed, like `getxattr(2)`).

use std::ffi::OsStr;
use std::io;
use std::os::fd::AsFd;
use std::path::Path;

use rustix::fs::{FallocateFlags, FlockOperation, SeekFrom, StatVfs, XattrFlags};
use rustix::io::Errno;

use super::at::proc_path;

/// `fallocate(f, mode, offset, len)`, `mode` as fallocate(2) takes it.
pub fn fallocate(f: impl AsFd, mode: i32, offset: u64, len: u64) -> io::Result<()> {
    let mode = FallocateFlags::from_bits_retain(mode as u32);
    Ok(rustix::fs::fallocate(f, mode, offset, len)?)
}

/// `copy_file_range` of up to `len` bytes at `*from_off` of `from` to `*to_off` of `to`; the
/// offsets move on by what was copied, which is returned.
pub fn copy_file_range(
    from: impl AsFd,
    from_off: &mut u64,
    to: impl AsFd,
    to_off: &mut u64,
    len: usize,
) -> io::Result<usize> {
    Ok(rustix::fs::copy_file_range(
        from,
        Some(from_off),
        to,
        Some(to_off),
        len,
    )?)
}

/// `lseek(f, offset, whence)`, `whence` as lseek(2) takes it (SEEK_DATA and SEEK_HOLE
/// included); an unknown one is `EINVAL`, as from the kernel.
pub fn lseek(f: impl AsFd, offset: i64, whence: i32) -> io::Result<u64> {
    // Bits as lseek(2) takes them: a negative offset stays the kernel's to refuse.
    let pos = match whence {
        libc::SEEK_SET => SeekFrom::Start(offset as u64),
        libc::SEEK_CUR => SeekFrom::Current(offset),
        libc::SEEK_END => SeekFrom::End(offset),
        libc::SEEK_DATA => SeekFrom::Data(offset as u64),
        libc::SEEK_HOLE => SeekFrom::Hole(offset as u64),
        _ => return Err(Errno::INVAL.into()),
    };
    Ok(rustix::fs::seek(f, pos)?)
}

/// `flock(f, op)`: released when the last descriptor of the open file closes.
pub fn flock(f: impl AsFd, op: FlockOperation) -> io::Result<()> {
    Ok(rustix::fs::flock(f, op)?)
}

/// `ftruncate(f, len)`.
pub fn ftruncate(f: impl AsFd, len: u64) -> io::Result<()> {
    Ok(rustix::fs::ftruncate(f, len)?)
}

/// `statvfs` of the filesystem holding `path`.
/// `syncfs(fd)`: everything written to the filesystem `fd` is on, on disk (one call for a
/// whole tree of new files, where an fsync each would cost a disk flush each).
pub fn syncfs(fd: impl AsFd) -> io::Result<()> {
    Ok(rustix::fs::syncfs(fd)?)
}

pub fn statvfs(path: &Path) -> io::Result<StatVfs> {
    Ok(rustix::fs::statvfs(path)?)
}

/// Whether the mount holding `path` has device nodes off (`nodev`), as the kernel says.
pub fn is_nodev(path: &Path) -> io::Result<bool> {
    Ok(statvfs(path)?
        .f_flag
        .contains(rustix::fs::StatVfsMountFlags::NODEV))
}

/// `getxattr` of the file `fd` names into `buf`; the attribute's length with an empty `buf`.
pub fn getxattr(fd: impl AsFd, name: &OsStr, buf: &mut [u8]) -> io::Result<usize> {
    let path = proc_path(fd);
    if buf.is_empty() {
        return Ok(rustix::fs::getxattr_query(&*path, name)?);
    }
    Ok(rustix::fs::getxattr(&*path, name, buf)?)
}

/// `listxattr` of the file `fd` names into `buf`; the list's length with an empty `buf`.
pub fn listxattr(fd: impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    let path = proc_path(fd);
    if buf.is_empty() {
        return Ok(rustix::fs::listxattr_query(&*path)?);
    }
    Ok(rustix::fs::listxattr(&*path, buf)?)
}

/// `setxattr` of the file `fd` names, `flags` as setxattr(2) takes them.
pub fn setxattr(fd: impl AsFd, name: &OsStr, value: &[u8], flags: i32) -> io::Result<()> {
    let flags = XattrFlags::from_bits_retain(flags as u32);
    Ok(rustix::fs::setxattr(&*proc_path(fd), name, value, flags)?)
}

/// `removexattr` of the file `fd` names.
pub fn removexattr(fd: impl AsFd, name: &OsStr) -> io::Result<()> {
    Ok(rustix::fs::removexattr(&*proc_path(fd), name)?)
}

/// `lsetxattr` and `lgetxattr` of the path `p` (a symlink itself, not its target).
pub fn set_path_xattr(p: &Path, name: &str, value: &[u8]) -> io::Result<()> {
    Ok(rustix::fs::lsetxattr(p, name, value, XattrFlags::empty())?)
}

pub fn path_xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 4096];
    let n = rustix::fs::lgetxattr(p, name, &mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// Take a write lease on the open file `f` (`F_SETLEASE`, `F_WRLCK`): the kernel grants it
/// only while no other descriptor of the file is open on this host, by any process; it goes
/// when `f` closes. (`EAGAIN`: someone has the file open; `EACCES`: not the file's owner
/// without `CAP_LEASE`; `EINVAL`: a filesystem without leases.) While held, another open of
/// the file waits for it to go (at most `/proc/sys/fs/lease-break-time`).
///
/// An open that breaks the lease signals its holder with SIGIO, whose default action ends
/// the process: the first lease sets SIGIO to be ignored (nothing here uses it), so the
/// breaker just waits for the holder to close `f`.
pub fn write_lease(f: impl AsFd) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    static SIGIO_IGNORED: std::sync::Once = std::sync::Once::new();
    SIGIO_IGNORED.call_once(|| {
        use nix::sys::signal::{signal, SigHandler, Signal};
        // SAFETY: installs SIG_IGN, no handler code; SIGIO is used nowhere else.
        let _ = unsafe { signal(Signal::SIGIO, SigHandler::SigIgn) };
    });
    // SAFETY: fcntl(2) on a descriptor `f` keeps open; F_SETLEASE takes an int argument.
    let r = unsafe { libc::fcntl(f.as_fd().as_raw_fd(), libc::F_SETLEASE, libc::F_WRLCK) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Copy every extended attribute of the file `from` onto `to` (ACLs and capabilities too).
pub fn copy_xattrs(from: impl AsFd, to: impl AsFd) -> io::Result<()> {
    let len = listxattr(&from, &mut [])?;
    if len == 0 {
        return Ok(());
    }
    let mut names = vec![0u8; len];
    let len = listxattr(&from, &mut names)?;
    names.truncate(len);
    for name in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        use std::os::unix::ffi::OsStrExt;
        let name = OsStr::from_bytes(name);
        let mut value = vec![0u8; getxattr(&from, name, &mut [])?];
        let n = getxattr(&from, name, &mut value)?;
        value.truncate(n);
        setxattr(&to, name, &value, 0)?;
    }
    Ok(())
}

/// Make `to` (created, exclusive) share the blocks of the file `from` (`FICLONE`: XFS,
/// btrfs); on a filesystem without reflinks the error, and `to` is not left behind.
pub fn reflink(from: &Path, to: &Path) -> io::Result<()> {
    // Never a FIFO or device node: `from` is opened as a regular file or not at all.
    let src = super::open_file(from)?;
    let dst = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)?;
    rustix::fs::ioctl_ficlone(&dst, &src).map_err(|e| {
        drop(dst);
        let _ = std::fs::remove_file(to);
        io::Error::from(e)
    })
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    /// Another process's open of a leased file breaks the lease: the holder is signalled
    /// (SIGIO) and must live on, and the opener gets the file once the holder closes it.
    #[test]
    fn a_broken_write_lease_does_not_end_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"x").unwrap();
        let f = std::fs::File::open(&p).unwrap();
        super::write_lease(&f).unwrap();
        let mut opener = std::process::Command::new("cat").arg(&p).spawn().unwrap();
        // The break has begun (and SIGIO been sent) once the lease reads as going away.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        // SAFETY: fcntl(2) F_GETLEASE on a descriptor `f` keeps open.
        while unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETLEASE) } == libc::F_WRLCK {
            assert!(
                std::time::Instant::now() < deadline,
                "the lease was never broken"
            );
            std::thread::yield_now();
        }
        drop(f);
        assert!(opener.wait().unwrap().success());
    }
}
