//! The data root as a directory descriptor ([`DataRoot`]), and relative paths of any length
//! below a directory descriptor ([`with_at`]).
//!
//! Everything below the data root is addressed relative to a descriptor of it (or of a
//! directory below it), so no path handed to the kernel is longer than the part that matters:
//! a path through the mount of PATH_MAX-1 bytes is longer still as an absolute backing path
//! (`WORKSPACE/viking/ACCOUNT/...`), and a lock file's name is longer than its file's. A
//! relative path of PATH_MAX bytes or more is walked in chunks of whole components, each
//! opened `O_PATH` relative to the one before.

use std::ffi::{CStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use rustix::fs::{OFlags, RenameFlags};
use rustix::io::Errno;
use rustix::path::Arg;

use super::{at, dir, Stat, PATH_MAX};

/// Run `f` on `name` as a C string: copied on the stack when short (no allocation); an inner
/// NUL is `EINVAL`.
fn with_c<T>(name: &[u8], f: impl FnOnce(&CStr) -> io::Result<T>) -> io::Result<T> {
    let mut out = None;
    name.into_with_c_str(|c| {
        out = Some(f(c));
        Ok(())
    })?;
    out.expect("into_with_c_str ran the closure")
}

/// For a relative path too long for one system call: open its leading components in chunks,
/// each relative to the one before. Returns the directory reached (`None`: still `base`) and
/// the rest, shorter than PATH_MAX. A single component never exceeds NAME_MAX, so a cut at a
/// `/` always exists.
fn split_long<'a>(base: BorrowedFd<'_>, rel: &'a [u8]) -> io::Result<(Option<OwnedFd>, &'a [u8])> {
    let mut cur: Option<OwnedFd> = None;
    let mut rest = rel;
    while rest.len() >= PATH_MAX {
        let cut = rest[..PATH_MAX]
            .iter()
            .rposition(|&b| b == b'/')
            .filter(|&i| i > 0)
            .ok_or(Errno::NAMETOOLONG)?;
        let at = cur.as_ref().map_or(base, |f| f.as_fd());
        cur = Some(at::open_dir_path(at, &rest[..cut])?);
        rest = &rest[cut + 1..];
        while rest.first() == Some(&b'/') {
            rest = &rest[1..];
        }
    }
    Ok((cur, rest))
}

/// Run `f(dir, name)` on `rel` below `base`, with `dir` a directory on its way when `rel` is
/// too long for one call; an empty `rel` names `base` itself (`.`). An absolute `rel` ignores
/// `base`, as the kernel does.
pub fn with_at<T>(
    base: BorrowedFd<'_>,
    rel: &[u8],
    f: impl FnOnce(BorrowedFd<'_>, &CStr) -> io::Result<T>,
) -> io::Result<T> {
    if rel.is_empty() {
        return f(base, c".");
    }
    if rel.len() < PATH_MAX {
        return with_c(rel, |c| f(base, c));
    }
    let (held, tail) = split_long(base, rel)?;
    let dir = held.as_ref().map_or(base, |d| d.as_fd());
    with_c(if tail.is_empty() { b"." } else { tail }, |c| f(dir, c))
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

/// The data root (or any directory paths are resolved below), opened `O_PATH`, with the path it
/// was opened at (for messages only; never handed to the kernel again). Paths are relative
/// byte strings of any length ([`with_at`]); the empty path is the root itself. A clone
/// shares the descriptor.
#[derive(Debug, Clone)]
pub struct DataRoot {
    fd: Arc<OwnedFd>,
    path: Arc<Path>,
}

impl DataRoot {
    pub fn open(path: &Path) -> io::Result<Self> {
        Ok(DataRoot {
            fd: Arc::new(at::open_path_dir(path)?),
            path: path.into(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The descriptor itself, shared: for a holder that keeps it among others of its kind
    /// (the inode table's root inode).
    pub fn shared_fd(&self) -> Arc<OwnedFd> {
        self.fd.clone()
    }

    /// [`with_at`] below the root.
    pub fn at<T>(
        &self,
        rel: &[u8],
        f: impl FnOnce(BorrowedFd<'_>, &CStr) -> io::Result<T>,
    ) -> io::Result<T> {
        with_at(self.as_fd(), rel, f)
    }

    /// [`with_at_c`] below the root.
    pub fn at_c<T>(
        &self,
        rel: &CStr,
        f: impl FnOnce(BorrowedFd<'_>, &CStr) -> io::Result<T>,
    ) -> io::Result<T> {
        with_at_c(self.as_fd(), rel, f)
    }

    /// `lstat` of `rel`.
    pub fn lstat(&self, rel: &[u8]) -> io::Result<Stat> {
        self.at(rel, |d, n| at::lstatat(d, n))
    }

    /// Open `rel` with `flags` (and `mode`, when they create it).
    pub fn openat(&self, rel: &[u8], flags: OFlags, mode: u32) -> io::Result<OwnedFd> {
        self.at(rel, |d, n| at::openat(d, n, flags, mode))
    }

    /// Open `rel` with `flags` without following a symlink anywhere on the way, and never
    /// leaving the root: a symlink on the way is `ENOTDIR`, a final one `ELOOP`. For a reader
    /// on behalf of a remote caller (the HTTP API, MCP): a symlink a local user made through
    /// the mount (to `/etc`, or into another user's tree) must not hand it what it points at.
    ///
    /// One `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` where the kernel has it
    /// (5.6 on); it answers `ELOOP` for a symlink anywhere, so that answer (rare: a caller
    /// asked for a path through a link) is looked at again by the walk below, which tells a
    /// link on the way from a final one as the callers expect. Elsewhere, and for a path of
    /// PATH_MAX bytes or more, the walk alone: each directory opened `O_PATH | O_NOFOLLOW |
    /// O_DIRECTORY` relative to the one before, the last `flags | O_NOFOLLOW`. `rel` has no
    /// `.` or `..` component (a namespace path), so neither leaves the root.
    pub fn open_nofollow(&self, rel: &[u8], flags: OFlags) -> io::Result<OwnedFd> {
        use std::sync::atomic::{AtomicBool, Ordering};
        // Set once a call met a kernel (or a seccomp filter) without openat2.
        static NO_OPENAT2: AtomicBool = AtomicBool::new(false);
        if rel.len() < PATH_MAX && !NO_OPENAT2.load(Ordering::Relaxed) {
            let name: &[u8] = if rel.is_empty() { b"." } else { rel };
            // openat2 refuses (EINVAL) what openat ignores beside O_PATH (O_NOCTTY, …).
            let flags2 = if flags.contains(OFlags::PATH) {
                flags & (OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW)
            } else {
                flags
            };
            match with_c(name, |c| at::openat_beneath(self.as_fd(), c, flags2)) {
                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                    NO_OPENAT2.store(true, Ordering::Relaxed);
                }
                // ELOOP: told apart by the walk. EPERM: an older seccomp filter's answer
                // for a call it does not know, or the open's own; EINVAL: flags openat2 is
                // stricter about than openat. The walk gives the answer openat would.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ELOOP | libc::EPERM | libc::EINVAL)
                    ) => {}
                r => return r,
            }
        }
        self.walk_nofollow(rel, flags)
    }

    /// The regular file at `rel` for reading on a caller's behalf: no symlink followed on the
    /// way or at the end ([`DataRoot::open_nofollow`]), and nothing but a regular file opened
    /// (as [`super::open_regular`]: a FIFO, socket or device is never opened, its type read on
    /// an `O_PATH` descriptor first). Anything else is the error [`super::not_regular`] names.
    pub fn open_regular_beneath(&self, rel: &[u8]) -> io::Result<(std::fs::File, Stat)> {
        let path = self.open_nofollow(rel, OFlags::PATH | OFlags::NOFOLLOW)?;
        match super::open::open_checked(path, |flags| self.open_nofollow(rel, flags))? {
            super::Opened::File(f, st) => Ok((f, st)),
            super::Opened::Other(st) => Err(super::not_regular(&st)),
        }
    }

    /// [`DataRoot::open_nofollow`] by a walk of one component at a time.
    fn walk_nofollow(&self, rel: &[u8], flags: OFlags) -> io::Result<OwnedFd> {
        let mut parts = rel
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty())
            .peekable();
        let mut cur: Option<OwnedFd> = None;
        while let Some(part) = parts.next() {
            let dir = cur.as_ref().map_or(self.as_fd(), |f| f.as_fd());
            let last = parts.peek().is_none();
            let f = if last {
                flags | OFlags::NOFOLLOW
            } else {
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW
            };
            let fd = with_c(part, |c| at::openat(dir, c, f, 0))?;
            if last {
                return Ok(fd);
            }
            cur = Some(fd);
        }
        // The root itself.
        at::openat(self.as_fd(), c".", flags, 0)
    }

    /// Open the directory `rel` `O_PATH` (`ENOTDIR` when something else is there).
    pub fn open_dir(&self, rel: &[u8]) -> io::Result<OwnedFd> {
        self.at(rel, |d, n| at::open_dir_path(d, n))
    }

    /// Open the directory `rel` `O_PATH`, creating what is missing of it (mode 0755, like
    /// `create_dir_all`). `ENOTDIR` when a non-directory stands in the way.
    pub fn make_dir_all(&self, rel: &[u8]) -> io::Result<OwnedFd> {
        match self.open_dir(rel) {
            Err(e) if e.raw_os_error() == Some(Errno::NOENT.raw_os_error()) => {}
            r => return r,
        }
        let trimmed = rel.strip_suffix(b"/").unwrap_or(rel);
        let (parent, name) = match trimmed.iter().rposition(|&b| b == b'/') {
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => (&b""[..], trimmed),
        };
        if name.is_empty() {
            return Err(Errno::NOENT.into());
        }
        let pfd = self.make_dir_all(parent)?;
        match rustix::fs::mkdirat(&pfd, name, 0o755.into()) {
            // Made meanwhile by someone else: the open below tells whether it is a directory.
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        at::open_dir_path(&pfd, name)
    }

    /// The names in directory `rel`, `.` and `..` left out.
    pub fn names(&self, rel: &[u8]) -> io::Result<Vec<OsString>> {
        dir::dir_names(self.open_dir(rel)?)
    }

    /// Remove the file `rel`.
    pub fn remove_file(&self, rel: &[u8]) -> io::Result<()> {
        self.at(rel, |d, n| at::unlinkat(d, n))
    }

    /// `renameat2` of `from` to `to`, both below the root (or `to` absolute, on the same
    /// filesystem).
    pub fn rename(&self, from: &[u8], to: &[u8], flags: RenameFlags) -> io::Result<()> {
        self.at(from, |fd, f| {
            self.at(to, |td, t| at::renameat(fd, f, td, t, flags))
        })
    }
}

impl AsFd for DataRoot {
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
        let root = DataRoot::open(d.path()).unwrap();
        // 50 components of 200 bytes: 10 KB relative, far beyond PATH_MAX.
        let comp = "c".repeat(200);
        let rel: Vec<u8> = vec![comp.as_str(); 50].join("/").into_bytes();
        assert!(rel.len() > 2 * PATH_MAX);
        let dir = root.make_dir_all(&rel).unwrap();
        assert!(root.lstat(&rel).unwrap().is_dir());
        let mut file = rel.clone();
        file.extend_from_slice(b"/f");
        let flags = OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY;
        drop(at::openat(&dir, c"f", flags, 0o644).unwrap());
        assert!(root.lstat(&file).unwrap().is_file());
        assert_eq!(root.names(&rel).unwrap(), vec![OsString::from("f")]);
        let mut moved = rel.clone();
        moved.extend_from_slice(b"/g");
        root.rename(&file, &moved, RenameFlags::empty()).unwrap();
        assert_eq!(
            root.lstat(&file).unwrap_err().raw_os_error(),
            Some(libc::ENOENT)
        );
        root.remove_file(&moved).unwrap();
        assert!(root.names(&rel).unwrap().is_empty());
        // A file in the way of a directory is ENOTDIR.
        std::fs::write(d.path().join("plain"), b"x").unwrap();
        let e = root.make_dir_all(b"plain/sub").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR));
    }

    #[test]
    fn open_nofollow_never_follows_a_link_on_the_way_or_at_the_end() {
        let d = tempfile::tempdir().unwrap();
        let (inside, outside) = (d.path().join("in"), d.path().join("out"));
        std::fs::create_dir_all(inside.join("a")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(inside.join("a/f"), b"mine").unwrap();
        std::fs::write(outside.join("secret"), b"theirs").unwrap();
        std::os::unix::fs::symlink(&outside, inside.join("a/dir")).unwrap();
        std::os::unix::fs::symlink("../../out/secret", inside.join("a/rel")).unwrap();
        std::os::unix::fs::symlink("f", inside.join("a/same")).unwrap();
        let root = DataRoot::open(&inside).unwrap();
        let read = OFlags::RDONLY;
        let fd = root.open_nofollow(b"a/f", read).unwrap();
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(fd), &mut s).unwrap();
        assert_eq!(s, "mine");
        let errno = |rel: &[u8]| root.open_nofollow(rel, read).unwrap_err().raw_os_error();
        assert_eq!(
            errno(b"a/dir/secret"),
            Some(libc::ENOTDIR),
            "a link on the way"
        );
        assert_eq!(errno(b"a/rel"), Some(libc::ELOOP), "a link out, at the end");
        assert_eq!(
            errno(b"a/same"),
            Some(libc::ELOOP),
            "even one that stays inside"
        );
        assert_eq!(errno(b"a/dir"), Some(libc::ELOOP));
        assert_eq!(errno(b"a/none"), Some(libc::ENOENT));
        assert!(
            root.open_nofollow(b"", OFlags::PATH).is_ok(),
            "the root itself"
        );
        // What openat ignores beside O_PATH, openat2 refuses: it must still open.
        let dir = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOCTTY;
        let fd = root.open_nofollow(b"a", dir).unwrap();
        assert_eq!(super::dir::dir_names(&fd).unwrap().len(), 4);
    }

    #[test]
    fn a_short_path_is_one_call_and_the_empty_path_is_the_root() {
        let d = tempfile::tempdir().unwrap();
        let root = DataRoot::open(d.path()).unwrap();
        std::fs::write(d.path().join("f"), b"x").unwrap();
        root.at(b"f", |dir, name| {
            assert_eq!(name, c"f");
            assert_eq!(
                at::fstat(dir)?.st_ino,
                at::fstat(root.as_fd())?.st_ino,
                "relative to the root itself"
            );
            Ok(())
        })
        .unwrap();
        root.at(b"", |_, name| {
            assert_eq!(name, c".");
            Ok(())
        })
        .unwrap();
        let e = root.lstat(b"a\0b").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "an inner NUL");
    }
}
