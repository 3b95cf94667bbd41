//! On-disk storage of tokens: exclusive create, and compare-and-swap rewrite and removal.
//!
//! A CAS opens the file, takes `flock(LOCK_EX)` on it, checks that its content is still the
//! token the caller read and that the path still names the inode it opened (the file may have
//! been removed and re-created between open and flock), then rewrites it in place or unlinks
//! it. Every vikingfs writer that changes an existing token goes through this, so a refresh
//! and a stale takeover can never both win (OpenViking #4943).

use std::ffi::CStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::BorrowedFd;
use std::os::unix::fs::{FileExt, MetadataExt};

use crate::sys::{self, FlockOperation, OFlags};

/// Open `name` in `dir` as a `File`.
fn open_at(dir: BorrowedFd<'_>, name: &CStr, flags: OFlags, mode: u32) -> io::Result<File> {
    sys::openat(dir, name, flags, mode).map(File::from)
}

/// Read a whole (small) file: one `read` into a stack buffer for a token, without the
/// `fstat` and the second `read` of `read_to_end`; longer content falls back to it.
pub fn read_small(f: &mut File, buf: &mut Vec<u8>) -> io::Result<()> {
    let mut chunk = [0u8; 256];
    let n = loop {
        match f.read(&mut chunk) {
            Ok(n) => break n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    };
    buf.extend_from_slice(&chunk[..n]);
    if n == chunk.len() {
        f.read_to_end(buf)?;
    }
    Ok(())
}

/// Read the lock file `name` in `dir`. `Ok(false)` when it does not exist.
pub fn read(dir: BorrowedFd<'_>, name: &CStr, buf: &mut Vec<u8>) -> io::Result<bool> {
    buf.clear();
    match open_at(dir, name, OFlags::RDONLY, 0) {
        Ok(mut f) => {
            read_small(&mut f, buf)?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Create the lock file `name` in `dir` holding `token`; fails with `AlreadyExists` when any
/// lock file is there. The open file is returned so the holder can release it later without
/// opening it again.
///
/// The token is written into an anonymous file (O_TMPFILE) that is then linked under the lock
/// file's name, which fails if the name exists: the lock file appears with its token, never
/// empty. A process killed between a plain create and its write would leave an empty file,
/// which counts as held (a token being written) until lock_expire, although its owner is dead.
/// Filesystems without O_TMPFILE fall back to create-then-write.
pub fn create_excl(dir: BorrowedFd<'_>, name: &CStr, token: &[u8]) -> io::Result<File> {
    match create_linked(dir, name, token) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR)) => {}
        r => return r,
    }
    let f = open_at(
        dir,
        name,
        OFlags::RDWR | OFlags::CREATE | OFlags::EXCL,
        0o644,
    )?;
    if let Err(e) = f.write_all_at(token, 0) {
        let _ = sys::unlinkat(dir, name);
        return Err(e);
    }
    Ok(f)
}

/// [`create_excl`] through an O_TMPFILE file linked into place.
fn create_linked(dir: BorrowedFd<'_>, name: &CStr, token: &[u8]) -> io::Result<File> {
    let f = open_at(dir, c".", OFlags::RDWR | OFlags::TMPFILE, 0o644)?;
    f.write_all_at(token, 0)?;
    sys::link_file(&f, dir, name)?;
    Ok(f)
}

/// The outcome of a compare-and-swap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cas {
    Done,
    /// The file holds something else now (or is gone): nothing was changed.
    Changed,
}

/// Open `name` in `dir`, flock it and check it still holds `expected` at the same inode.
fn lock_expect(dir: BorrowedFd<'_>, name: &CStr, expected: &[u8]) -> io::Result<Option<File>> {
    let f = match open_at(dir, name, OFlags::RDWR, 0) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(lock_expect_fd(&f, expected)?.then_some(f))
}

/// Flock an open lock file and check it still holds `expected` and is still linked. Lock
/// files are never renamed or hard-linked, so a file that still has a link is still the one
/// its path names: one `fstat` instead of comparing inodes of the fd and of the path.
fn lock_expect_fd(f: &File, expected: &[u8]) -> io::Result<bool> {
    sys::flock(f, FlockOperation::LockExclusive)?;
    let mut chunk = [0u8; 256];
    let n = f.read_at(&mut chunk, 0)?;
    if n == chunk.len() || &chunk[..n] != expected {
        return Ok(false);
    }
    Ok(f.metadata()?.nlink() > 0)
}

/// Unlink a lock file we hold the flock of; gone already is `Changed`.
fn unlink_checked(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Cas> {
    match sys::unlinkat(dir, name) {
        Ok(()) => Ok(Cas::Done),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Cas::Changed),
        Err(e) => Err(e),
    }
}

/// Release a lock file this process created and kept open: remove it if it still holds
/// `expected`.
pub fn cas_remove_open(
    f: &File,
    dir: BorrowedFd<'_>,
    name: &CStr,
    expected: &[u8],
) -> io::Result<Cas> {
    if !lock_expect_fd(f, expected)? {
        return Ok(Cas::Changed);
    }
    unlink_checked(dir, name)
}

/// Replace `expected` by `new` in place (refresh, stale takeover).
pub fn cas_replace(
    dir: BorrowedFd<'_>,
    name: &CStr,
    expected: &[u8],
    new: &[u8],
) -> io::Result<Cas> {
    let Some(f) = lock_expect(dir, name, expected)? else {
        return Ok(Cas::Changed);
    };
    // Readers take no flock. A refresh keeps the token's length, so it is written over in
    // place and a reader sees the old or the new token. A takeover may change the length: the
    // file is emptied first, and a reader sees the old token, an empty file (held) or the new
    // token; a torn read is re-done under a shared flock (`read_locked`) before anyone calls
    // the content corrupt.
    if new.len() != expected.len() {
        f.set_len(0)?;
    }
    f.write_all_at(new, 0)?;
    Ok(Cas::Done)
}

/// Remove the file if it still holds `expected` (release, stale removal).
pub fn cas_remove(dir: BorrowedFd<'_>, name: &CStr, expected: &[u8]) -> io::Result<Cas> {
    let Some(_f) = lock_expect(dir, name, expected)? else {
        return Ok(Cas::Changed);
    };
    unlink_checked(dir, name)
}

/// Read a lock file under a shared flock, so no CAS writer is midway (used before reporting a
/// token as corrupt). `Ok(false)` when it is gone.
pub fn read_locked(dir: BorrowedFd<'_>, name: &CStr, buf: &mut Vec<u8>) -> io::Result<bool> {
    buf.clear();
    let mut f = match open_at(dir, name, OFlags::RDONLY, 0) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    sys::flock(&f, FlockOperation::LockShared)?;
    f.read_to_end(buf)?;
    Ok(true)
}

/// Modification time of a lock file in nanoseconds since the epoch (age of an empty one).
pub fn mtime_ns(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<u64> {
    Ok(sys::lstatat(dir, name)?.mtime_ns())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn create_is_exclusive_and_cas_checks_content() {
        let d = tempfile::tempdir().unwrap();
        let root = sys::DataRoot::open(d.path()).unwrap();
        let dir = root.as_fd();
        let n = c".path.ovlock";
        let held = create_excl(dir, n, b"a:1:E").unwrap();
        let e = create_excl(dir, n, b"b:1:E").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(
            cas_replace(dir, n, b"b:1:E", b"b:2:E").unwrap(),
            Cas::Changed
        );
        assert_eq!(cas_replace(dir, n, b"a:1:E", b"a:22:E").unwrap(), Cas::Done);
        let mut buf = Vec::new();
        assert!(read(dir, n, &mut buf).unwrap());
        assert_eq!(buf, b"a:22:E");
        assert_eq!(cas_remove(dir, n, b"a:1:E").unwrap(), Cas::Changed);
        assert!(d.path().join(".path.ovlock").exists());
        assert_eq!(
            cas_remove_open(&held, dir, n, b"a:1:E").unwrap(),
            Cas::Changed
        );
        assert_eq!(
            cas_remove_open(&held, dir, n, b"a:22:E").unwrap(),
            Cas::Done
        );
        assert!(!read(dir, n, &mut buf).unwrap());
        assert_eq!(cas_remove(dir, n, b"a:22:E").unwrap(), Cas::Changed);
    }
}
