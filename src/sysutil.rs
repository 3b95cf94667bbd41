//! `*at` system calls relative to a directory descriptor, shared by the lock engine and the
//! operations (std has no O_PATH, fstatat, renameat2 or mkdirat).
//!
//! Everything below the data root is addressed relative to a descriptor of it (or of a
//! directory below it), so no path handed to the kernel is longer than the part that matters:
//! a path through the mount of PATH_MAX-1 bytes is longer still as an absolute backing path
//! (`WORKSPACE/viking/ACCOUNT/...`), and a lock file's name is longer than its file's. A
//! relative path of PATH_MAX bytes or more is walked in chunks of whole components, each
//! opened `O_PATH` relative to the one before ([`split_long`]).

use std::ffi::{CStr, CString, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// Longest path the kernel takes, its terminating NUL included.
pub const PATH_MAX: usize = libc::PATH_MAX as usize;

/// Flags of a descriptor that only names a directory (for `*at` calls and `O_TMPFILE`).
const DIR_PATH: i32 = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A path as the kernel takes it; an inner NUL is `EINVAL`.
pub fn cstring(b: &[u8]) -> io::Result<CString> {
    CString::new(b).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `openat(dir, name, flags | O_CLOEXEC, mode)`.
pub fn openat(dir: RawFd, name: &CStr, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated name; the returned descriptor is owned below.
    let fd = cvt(unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC, mode) })?;
    // SAFETY: fd was just opened and belongs to nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Open an absolute directory `O_PATH` (the data root, the lock pool).
pub fn open_path_dir(path: &Path) -> io::Result<OwnedFd> {
    openat(
        libc::AT_FDCWD,
        &cstring(path.as_os_str().as_bytes())?,
        DIR_PATH,
        0,
    )
}

/// For a relative path too long for one system call: open its leading components in chunks,
/// each relative to the one before. Returns the directory reached (`None`: still `base`) and
/// the rest, shorter than PATH_MAX. A single component never exceeds NAME_MAX, so a cut at a
/// `/` always exists.
pub fn split_long<'a>(
    base: BorrowedFd<'_>,
    rel: &'a [u8],
) -> io::Result<(Option<OwnedFd>, &'a [u8])> {
    let mut cur: Option<OwnedFd> = None;
    let mut rest = rel;
    while rest.len() >= PATH_MAX {
        let cut = rest[..PATH_MAX]
            .iter()
            .rposition(|&b| b == b'/')
            .filter(|&i| i > 0)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENAMETOOLONG))?;
        let at = cur.as_ref().map_or(base.as_raw_fd(), |f| f.as_raw_fd());
        cur = Some(openat(at, &cstring(&rest[..cut])?, DIR_PATH, 0)?);
        rest = &rest[cut + 1..];
        while rest.first() == Some(&b'/') {
            rest = &rest[1..];
        }
    }
    Ok((cur, rest))
}

/// Run `f(dir, name)` on `rel` below `base`, split as [`split_long`] says; an empty `rel`
/// names `base` itself (`.`).
pub fn with_at<T>(
    base: BorrowedFd<'_>,
    rel: &[u8],
    f: impl FnOnce(BorrowedFd<'_>, &CStr) -> io::Result<T>,
) -> io::Result<T> {
    if rel.is_empty() {
        return f(base, c".");
    }
    if rel.len() < PATH_MAX {
        return f(base, &cstring(rel)?);
    }
    let (held, tail) = split_long(base, rel)?;
    let dir = held.as_ref().map_or(base, |d| d.as_fd());
    f(dir, &cstring(if tail.is_empty() { b"." } else { tail })?)
}

/// [`with_at`] for a path already NUL-terminated: no copy unless it must be split.
pub fn with_at_c<T>(
    base: BorrowedFd<'_>,
    rel: &CStr,
    f: impl FnOnce(BorrowedFd<'_>, &CStr) -> io::Result<T>,
) -> io::Result<T> {
    let b = rel.to_bytes();
    if !b.is_empty() && b.len() < PATH_MAX {
        return f(base, rel);
    }
    with_at(base, b, f)
}

/// Open the directory `rel` below `base` `O_PATH` (`ENOTDIR` when something else is there).
pub fn open_dir(base: BorrowedFd<'_>, rel: &[u8]) -> io::Result<OwnedFd> {
    with_at(base, rel, |d, n| openat(d.as_raw_fd(), n, DIR_PATH, 0))
}

/// `lstat` of a name in a directory (a final symlink is not followed).
pub fn lstat_c(dir: RawFd, name: &CStr) -> io::Result<Stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstatat fills `st` on success; `name` is NUL-terminated.
    cvt(unsafe {
        libc::fstatat(
            dir,
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    // SAFETY: fstatat succeeded.
    Ok(Stat(unsafe { st.assume_init() }))
}

/// `lstat` of `rel` below `base`.
pub fn lstat(base: BorrowedFd<'_>, rel: &[u8]) -> io::Result<Stat> {
    with_at(base, rel, |d, n| lstat_c(d.as_raw_fd(), n))
}

/// What `lstat` says about a path: the few facts callers ask.
#[derive(Clone, Copy)]
pub struct Stat(pub libc::stat);

impl Stat {
    pub fn is_dir(&self) -> bool {
        self.0.st_mode & libc::S_IFMT == libc::S_IFDIR
    }

    pub fn is_file(&self) -> bool {
        self.0.st_mode & libc::S_IFMT == libc::S_IFREG
    }

    /// Modification time in nanoseconds since the epoch.
    pub fn mtime_ns(&self) -> u64 {
        (self.0.st_mtime as u64).saturating_mul(1_000_000_000) + self.0.st_mtime_nsec as u64
    }
}

impl std::fmt::Debug for Stat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stat")
            .field("mode", &format_args!("{:o}", self.0.st_mode))
            .field("ino", &self.0.st_ino)
            .finish()
    }
}

/// `unlinkat(dir, name, flags)` (`AT_REMOVEDIR` for a directory).
/// linkat(2) of `from` in `from_dir` as `to` in `to_dir` (fails with EEXIST if `to` exists).
pub fn link_c(from_dir: RawFd, from: &CStr, to_dir: RawFd, to: &CStr) -> io::Result<()> {
    // SAFETY: NUL-terminated names.
    cvt(unsafe { libc::linkat(from_dir, from.as_ptr(), to_dir, to.as_ptr(), 0) }).map(drop)
}

pub fn unlink_c(dir: RawFd, name: &CStr, flags: i32) -> io::Result<()> {
    // SAFETY: a NUL-terminated name.
    cvt(unsafe { libc::unlinkat(dir, name.as_ptr(), flags) }).map(drop)
}

/// Remove the file `rel` below `base`.
pub fn remove_file(base: BorrowedFd<'_>, rel: &[u8]) -> io::Result<()> {
    with_at(base, rel, |d, n| unlink_c(d.as_raw_fd(), n, 0))
}

/// `renameat2(from_dir, from, to_dir, to, flags)`.
pub fn rename_c(
    from_dir: RawFd,
    from: &CStr,
    to_dir: RawFd,
    to: &CStr,
    flags: libc::c_uint,
) -> io::Result<()> {
    // SAFETY: two NUL-terminated names.
    cvt(unsafe { libc::renameat2(from_dir, from.as_ptr(), to_dir, to.as_ptr(), flags) }).map(drop)
}

/// Rename `from` below `from_base` to `to` below `to_base` (an absolute `to` ignores its base).
pub fn rename(
    from_base: BorrowedFd<'_>,
    from: &[u8],
    to_base: BorrowedFd<'_>,
    to: &[u8],
    flags: libc::c_uint,
) -> io::Result<()> {
    with_at(from_base, from, |fd, f| {
        with_at(to_base, to, |td, t| {
            rename_c(fd.as_raw_fd(), f, td.as_raw_fd(), t, flags)
        })
    })
}

/// Open the directory `rel` below `base` `O_PATH`, creating what is missing of it (mode 0755,
/// like `create_dir_all`). `ENOTDIR` when a non-directory stands in the way.
pub fn make_dir_all(base: BorrowedFd<'_>, rel: &[u8]) -> io::Result<OwnedFd> {
    match open_dir(base, rel) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        r => return r,
    }
    let trimmed = rel.strip_suffix(b"/").unwrap_or(rel);
    let (parent, name) = match trimmed.iter().rposition(|&b| b == b'/') {
        Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
        None => (&b""[..], trimmed),
    };
    if name.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    let pfd = make_dir_all(base, parent)?;
    let name = cstring(name)?;
    // SAFETY: a NUL-terminated name.
    match cvt(unsafe { libc::mkdirat(pfd.as_raw_fd(), name.as_ptr(), 0o755) }) {
        Ok(_) => {}
        // Made meanwhile by someone else: the open below tells whether it is a directory.
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
        Err(e) => return Err(e),
    }
    openat(pfd.as_raw_fd(), &name, DIR_PATH, 0)
}

/// The names in directory `rel` below `base`, `.` and `..` left out.
pub fn dir_names(base: BorrowedFd<'_>, rel: &[u8]) -> io::Result<Vec<OsString>> {
    let fd = with_at(base, rel, |d, n| {
        openat(d.as_raw_fd(), n, libc::O_RDONLY | libc::O_DIRECTORY, 0)
    })?;
    read_names(fd)
}

/// The names in an open directory (read with `readdir`; the descriptor is consumed).
fn read_names(fd: OwnedFd) -> io::Result<Vec<OsString>> {
    let raw = fd.as_raw_fd();
    // SAFETY: fdopendir takes over `raw` on success; `fd` is forgotten only then.
    let dirp = unsafe { libc::fdopendir(raw) };
    if dirp.is_null() {
        return Err(io::Error::last_os_error());
    }
    std::mem::forget(fd);
    let mut out = Vec::new();
    let res = loop {
        // SAFETY: errno is thread-local; cleared so a NULL return can tell end from error.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: dirp is a valid open DIR*.
        let ent = unsafe { libc::readdir64(dirp) };
        if ent.is_null() {
            let e = io::Error::last_os_error();
            break if e.raw_os_error() == Some(0) {
                Ok(())
            } else {
                Err(e)
            };
        }
        // SAFETY: readdir returned an entry whose d_name is NUL-terminated.
        let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) }.to_bytes();
        if name != b"." && name != b".." {
            out.push(OsString::from_vec(name.to_vec()));
        }
    };
    // SAFETY: dirp was opened above and is closed once.
    unsafe { libc::closedir(dirp) };
    res.map(|()| out)
}

/// A directory opened `O_PATH`, with the path it was opened at (for messages only; never
/// handed to the kernel again).
#[derive(Debug)]
pub struct DirRoot {
    fd: OwnedFd,
    path: std::path::PathBuf,
}

impl DirRoot {
    pub fn open(path: &Path) -> io::Result<Self> {
        Ok(DirRoot {
            fd: open_path_dir(path)?,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl AsFd for DirRoot {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_longer_than_path_max_are_walked_in_chunks() {
        let d = tempfile::tempdir().unwrap();
        let root = DirRoot::open(d.path()).unwrap();
        // 50 components of 200 bytes: 10 KB relative, far beyond PATH_MAX.
        let comp = "c".repeat(200);
        let rel: Vec<u8> = vec![comp.as_str(); 50].join("/").into_bytes();
        assert!(rel.len() > 2 * PATH_MAX);
        let dir = make_dir_all(root.as_fd(), &rel).unwrap();
        assert!(lstat(root.as_fd(), &rel).unwrap().is_dir());
        let mut file = rel.clone();
        file.extend_from_slice(b"/f");
        let fd = openat(
            dir.as_raw_fd(),
            c"f",
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
            0o644,
        )
        .unwrap();
        drop(fd);
        assert!(lstat(root.as_fd(), &file).unwrap().is_file());
        assert_eq!(
            dir_names(root.as_fd(), &rel).unwrap(),
            vec![OsString::from("f")]
        );
        let mut moved = rel.clone();
        moved.extend_from_slice(b"/g");
        rename(root.as_fd(), &file, root.as_fd(), &moved, 0).unwrap();
        assert_eq!(
            lstat(root.as_fd(), &file).unwrap_err().raw_os_error(),
            Some(libc::ENOENT)
        );
        remove_file(root.as_fd(), &moved).unwrap();
        assert!(dir_names(root.as_fd(), &rel).unwrap().is_empty());
        // A file in the way of a directory is ENOTDIR.
        std::fs::write(d.path().join("plain"), b"x").unwrap();
        let e = make_dir_all(root.as_fd(), b"plain/sub").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR));
    }
}
