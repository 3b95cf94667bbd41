//! The mutation seam: every change the mount makes to the namespace goes through
//! [`Mutations`], named after the operation a program asked for.
//!
//! The FUSE side only decides *what* to change (a validated [`VPath`], never a lock file or a
//! database); the implementation decides *how*. [`DirectMutations`] applies each change with
//! plain system calls on the workspace. The locked operations (EXACT/TREE path locks, index
//! first on rm, index move on mv, enqueue on write-close) plug in behind this same trait and
//! answer with their own error ([`MutationError::Backend`]), which decides the errno.

use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use thiserror::Error;

use crate::fs::error::{level_of, ToErrno};
use crate::fs::sys::{self, TimeSpec};
use crate::uri::{is_internal_name, is_sidecar_name, VPath};
use crate::workspace::Workspace;

/// Why a mutation failed.
#[derive(Debug, Error)]
pub enum MutationError {
    /// A lock on the path stayed busy past the lock timeout; nothing was changed.
    #[error("{path}: lock busy")]
    Busy { path: String },
    #[error("{op} {path}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: io::Error,
    },
    /// What is behind the seam (the locked operations) failed the change: its own error,
    /// which decides the errno (EBUSY for a lock that stayed busy) and the log level.
    #[error("{op} {path}")]
    Backend {
        op: &'static str,
        path: String,
        #[source]
        source: BackendError,
    },
}

pub type MResult<T> = Result<T, MutationError>;

impl MutationError {
    pub fn io(op: &'static str, path: &VPath, source: io::Error) -> Self {
        MutationError::Io {
            op,
            path: path.as_str().to_string(),
            source,
        }
    }

    /// `source`, the error of an implementation of [`Mutations`], kept whole.
    pub fn backend(
        op: &'static str,
        path: &VPath,
        source: impl ToErrno + Send + Sync + 'static,
    ) -> Self {
        MutationError::Backend {
            op,
            path: path.as_str().to_string(),
            source: BackendError(Box::new(source)),
        }
    }
}

impl ToErrno for MutationError {
    fn errno(&self) -> i32 {
        match self {
            MutationError::Busy { .. } => libc::EBUSY,
            MutationError::Io { source, .. } => source.errno(),
            MutationError::Backend { source, .. } => source.errno(),
        }
    }

    fn level(&self) -> tracing::Level {
        match self {
            MutationError::Backend { source, .. } => source.level(),
            _ => level_of(self.errno()),
        }
    }
}

/// The error of what implements the seam, whatever its type: the core asks it only for its
/// errno and level, so it needs to know nothing of locks or stores. Shows as the error itself
/// (its message, then its causes).
pub struct BackendError(Box<dyn ToErrno + Send + Sync>);

impl std::fmt::Debug for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl ToErrno for BackendError {
    fn errno(&self) -> i32 {
        self.0.errno()
    }

    fn level(&self) -> tracing::Level {
        self.0.level()
    }
}

/// Who a new file belongs to: the calling process's fsuid/fsgid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

/// How rename treats an existing destination (renameat2 flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenameMode {
    /// Plain rename(2): atomically replace the destination.
    Replace,
    /// RENAME_NOREPLACE: fail with EEXIST when the destination exists.
    NoReplace,
    /// RENAME_EXCHANGE: swap source and destination.
    Exchange,
}

/// A setattr request: each `None` leaves that attribute as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AttrChange {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeSpec>,
    pub mtime: Option<TimeSpec>,
}

/// Every change the mount makes. Paths are validated namespace paths (never an internal name);
/// the caller refuses every change of a sidecar but one: its unlink once its directory holds
/// nothing else.
pub trait Mutations: Send + Sync + 'static {
    /// Create and open a regular file (`flags` as open(2), O_CREAT included).
    fn create(&self, path: &VPath, mode: u32, flags: i32, owner: Owner) -> MResult<File>;
    /// Open an existing file for writing (O_WRONLY/O_RDWR, maybe O_TRUNC or O_APPEND).
    fn open_write(&self, path: &VPath, flags: i32) -> MResult<File>;
    /// Write `data` at `offset` of the open `file`, which is `path` (O_APPEND files append
    /// wherever `offset` points, as pwrite(2) does on Linux).
    fn write(&self, path: &VPath, file: &File, offset: u64, data: &[u8]) -> MResult<()> {
        use std::os::unix::fs::FileExt;
        file.write_all_at(data, offset)
            .map_err(|e| MutationError::io("write", path, e))
    }
    /// Must every write to `path` come through [`Mutations::write`] (no FUSE passthrough)?
    /// True where a writer must be serialised with an operation that rewrites the file in
    /// place under a lock (a session's `messages.jsonl` and a commit).
    fn locks_each_write(&self, _path: &VPath) -> bool {
        false
    }
    /// A handle that wrote to (or created) `path` was released: the file's content changed.
    fn file_written(&self, path: &VPath);
    /// Do `create`, `open_write` and a truncating `setattr` already report the file as
    /// changed (before changing it)? Then a release reports only a change made after open,
    /// and a created or truncated file that got no write costs no second report.
    fn reports_at_open(&self) -> bool {
        false
    }
    fn mkdir(&self, path: &VPath, mode: u32, owner: Owner) -> MResult<()>;
    /// A special file (FIFO, socket, device) or empty regular file.
    fn mknod(&self, path: &VPath, mode: u32, rdev: u64, owner: Owner) -> MResult<()>;
    fn symlink(&self, target: &OsStr, link: &VPath, owner: Owner) -> MResult<()>;
    fn link(&self, existing: &VPath, new: &VPath) -> MResult<()>;
    fn unlink(&self, path: &VPath) -> MResult<()>;
    /// Wait, as a change of `path` alone would, for a lock someone else holds on it, then
    /// give the lock back at once; changes nothing. An error answering EBUSY when it stays
    /// taken. The core asks it before refusing a change for a reason the lock holder may be
    /// changing (see `VikingFs::unlink` of a sidecar), so that the refusal is judged once the
    /// lock is free, and a locked path answers EBUSY as it does for every other change.
    fn wait_unlocked(&self, _path: &VPath) -> MResult<()> {
        Ok(())
    }
    /// Remove a directory that holds nothing but derived sidecars and internal files.
    fn rmdir(&self, path: &VPath) -> MResult<()>;
    fn rename(&self, src: &VPath, dst: &VPath, mode: RenameMode) -> MResult<()>;
    /// Change mode, owner, size or times of `path` (never following a final symlink).
    fn setattr(&self, path: &VPath, change: &AttrChange) -> MResult<()>;
}

/// Plain system calls on the workspace's files: the mutation seam without locks or index.
/// Every call is relative to a descriptor of the data root (`*at` calls), so a deep path
/// that would overflow PATH_MAX as an absolute backing path still works.
#[derive(Debug)]
pub struct DirectMutations {
    root: OwnedFd,
}

/// A path as one `*at` call takes it: a directory descriptor (`None`: the data root) and a
/// name relative to it.
struct At {
    dir: Option<OwnedFd>,
    name: CString,
}

impl At {
    fn fd(&self, root: RawFd) -> RawFd {
        self.dir.as_ref().map_or(root, |d| d.as_raw_fd())
    }

    fn os(&self) -> &OsStr {
        OsStr::from_bytes(self.name.to_bytes())
    }
}

/// A path relative to the data root, as the `*at` calls take it.
fn rel(p: &VPath) -> io::Result<CString> {
    let s = if p.is_root() { "." } else { p.as_str() };
    CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

impl DirectMutations {
    pub fn new(ws: &Workspace) -> io::Result<Self> {
        let root = sys::openat(
            libc::AT_FDCWD,
            ws.data_root().as_os_str(),
            libc::O_PATH | libc::O_DIRECTORY,
            0,
        )?;
        Ok(DirectMutations { root })
    }

    fn fd(&self) -> RawFd {
        self.root.as_raw_fd()
    }

    /// Where `p` is for an `*at` call: the data root and `p` itself while the path fits one
    /// system call, else a directory on its way opened in steps and the rest (the kernel lets
    /// the mount hold paths longer than PATH_MAX relative to the data root).
    fn at(&self, p: &VPath) -> io::Result<At> {
        let c = rel(p)?;
        if c.as_bytes().len() < crate::sysutil::PATH_MAX {
            return Ok(At { dir: None, name: c });
        }
        let (dir, rest) = crate::sysutil::split_long(self.root.as_fd(), c.as_bytes())?;
        Ok(At {
            dir,
            name: crate::sysutil::cstring(rest)?,
        })
    }

    /// Whether `p` is a directory now (not following a final symlink).
    pub fn is_dir(&self, p: &VPath) -> bool {
        self.at(p)
            .is_ok_and(|a| sys::statat(a.fd(self.fd()), a.os()).is_ok_and(|st| sys::is_dir(&st)))
    }

    /// Give a file we just created (as root) to its caller, keeping set-ID bits chown clears.
    fn give_to(&self, p: &VPath, owner: Owner, mode: u32) -> io::Result<()> {
        // Created by its own caller: the kernel already chose owner and group (set-GID
        // parents included).
        // SAFETY: geteuid and getegid take no arguments, cannot fail and touch no memory.
        if owner.uid == unsafe { libc::geteuid() } && owner.gid == unsafe { libc::getegid() } {
            return Ok(());
        }
        let parent = p.parent().unwrap_or_else(VPath::root);
        let pa = self.at(&parent)?;
        let pst = sys::statat(pa.fd(self.fd()), pa.os())?;
        // BSD semantics: a set-group-ID directory passes its group on.
        let gid = if pst.st_mode & libc::S_ISGID != 0 {
            pst.st_gid
        } else {
            owner.gid
        };
        let a = self.at(p)?;
        let (d, c) = (a.fd(self.fd()), &a.name);
        let st = sys::statat(d, a.os())?;
        if st.st_uid != owner.uid || st.st_gid != gid {
            // SAFETY: `c` is a NUL-terminated name `a` owns, alive for the call, relative to
            // `d` (the data root or `a`'s open directory); fchownat writes no memory.
            sys::cvt(unsafe {
                libc::fchownat(d, c.as_ptr(), owner.uid, gid, libc::AT_SYMLINK_NOFOLLOW)
            })?;
            if mode & 0o7000 != 0 && !sys::is_lnk(&st) {
                // SAFETY: the same live NUL-terminated name and directory as the chown above.
                sys::cvt(unsafe { libc::fchmodat(d, c.as_ptr(), mode & 0o7777, 0) })?;
            }
        }
        Ok(())
    }

    /// Remove what a user can't see or remove (sidecars, lock files) so the directory can go.
    /// `false` (nothing removed) when anything else is in it.
    fn clear_hidden(&self, p: &VPath) -> io::Result<bool> {
        let a = self.at(p)?;
        let dir = sys::openat(
            a.fd(self.fd()),
            a.os(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )?;
        let mut hidden = Vec::new();
        for e in std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))? {
            let name = e?.file_name();
            let n = name.to_string_lossy();
            if is_internal_name(&n) || is_sidecar_name(&n) {
                hidden.push(sys::cstr(&name)?);
            } else {
                return Ok(false);
            }
        }
        for h in hidden {
            // SAFETY: `h` is a NUL-terminated CString alive for the call; `dir` is a directory
            // descriptor we own; unlinkat writes no memory.
            if unsafe { libc::unlinkat(dir.as_raw_fd(), h.as_ptr(), 0) } != 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::NotFound {
                    return Err(e);
                }
            }
        }
        Ok(true)
    }
}

impl Mutations for DirectMutations {
    fn create(&self, path: &VPath, mode: u32, flags: i32, owner: Owner) -> MResult<File> {
        let e = |e| MutationError::io("create", path, e);
        let a = self.at(path).map_err(e)?;
        let excl = flags | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC;
        // SAFETY: `a.name` is NUL-terminated and alive for the call, relative to a directory
        // descriptor `a` or `self` holds open; O_CREAT is set and `mode` is passed with it.
        let fd = unsafe { libc::openat(a.fd(self.fd()), a.name.as_ptr(), excl, mode) };
        if fd >= 0 {
            // SAFETY: openat succeeded, so `fd` is a new descriptor nobody else owns.
            let f = unsafe { File::from_raw_fd(fd) };
            self.give_to(path, owner, mode).map_err(e)?;
            return Ok(f);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EEXIST) || flags & libc::O_EXCL != 0 {
            return Err(e(err));
        }
        // Someone created it between the kernel's lookup and here: open what is there.
        self.open_write(path, flags & !libc::O_CREAT)
    }

    fn open_write(&self, path: &VPath, flags: i32) -> MResult<File> {
        let a = self
            .at(path)
            .map_err(|e| MutationError::io("open", path, e))?;
        let flags = (flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY))
            | libc::O_CLOEXEC
            | libc::O_NOFOLLOW;
        // SAFETY: `a.name` is NUL-terminated and alive for the call, relative to a directory
        // descriptor `a` or `self` holds open; O_CREAT is cleared (and the kernel sends no
        // O_TMPFILE to open), so the missing mode argument is never read.
        let fd = unsafe { libc::openat(a.fd(self.fd()), a.name.as_ptr(), flags) };
        if fd < 0 {
            return Err(MutationError::io("open", path, io::Error::last_os_error()));
        }
        // SAFETY: openat succeeded, so `fd` is a new descriptor nobody else owns.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    fn file_written(&self, path: &VPath) {
        tracing::debug!(path = path.as_str(), "file written");
    }

    fn mkdir(&self, path: &VPath, mode: u32, owner: Owner) -> MResult<()> {
        let run = || -> io::Result<()> {
            let a = self.at(path)?;
            // SAFETY: `a.name` is NUL-terminated and alive for the call, relative to a directory
            // descriptor `a` or `self` holds open; mkdirat writes no memory.
            sys::cvt(unsafe { libc::mkdirat(a.fd(self.fd()), a.name.as_ptr(), mode) })?;
            self.give_to(path, owner, mode)
        };
        run().map_err(|e| MutationError::io("mkdir", path, e))
    }

    fn mknod(&self, path: &VPath, mode: u32, rdev: u64, owner: Owner) -> MResult<()> {
        let run = || -> io::Result<()> {
            let a = self.at(path)?;
            // SAFETY: `a.name` is NUL-terminated and alive for the call, relative to a directory
            // descriptor `a` or `self` holds open; mknodat writes no memory.
            sys::cvt(unsafe { libc::mknodat(a.fd(self.fd()), a.name.as_ptr(), mode, rdev) })?;
            self.give_to(path, owner, mode)
        };
        run().map_err(|e| MutationError::io("mknod", path, e))
    }

    fn symlink(&self, target: &OsStr, link: &VPath, owner: Owner) -> MResult<()> {
        let run = || -> io::Result<()> {
            let (t, a) = (sys::cstr(target)?, self.at(link)?);
            // SAFETY: `t` and `a.name` are NUL-terminated CStrings alive for the call, the name
            // relative to a directory descriptor held open; symlinkat writes no memory.
            sys::cvt(unsafe { libc::symlinkat(t.as_ptr(), a.fd(self.fd()), a.name.as_ptr()) })?;
            self.give_to(link, owner, 0o777)
        };
        run().map_err(|e| MutationError::io("symlink", link, e))
    }

    fn link(&self, existing: &VPath, new: &VPath) -> MResult<()> {
        let run = || -> io::Result<()> {
            let (a, b) = (self.at(existing)?, self.at(new)?);
            let (ad, bd) = (a.fd(self.fd()), b.fd(self.fd()));
            // SAFETY: both names are NUL-terminated CStrings alive for the call, each relative
            // to a directory descriptor `a`, `b` or `self` holds open; no memory is written.
            sys::cvt(unsafe { libc::linkat(ad, a.name.as_ptr(), bd, b.name.as_ptr(), 0) }).map(drop)
        };
        run().map_err(|e| MutationError::io("link", new, e))
    }

    fn unlink(&self, path: &VPath) -> MResult<()> {
        let run = || -> io::Result<()> {
            let a = self.at(path)?;
            // SAFETY: `a.name` is NUL-terminated and alive for the call, relative to a directory
            // descriptor `a` or `self` holds open; unlinkat writes no memory.
            sys::cvt(unsafe { libc::unlinkat(a.fd(self.fd()), a.name.as_ptr(), 0) }).map(drop)
        };
        run().map_err(|e| MutationError::io("unlink", path, e))
    }

    fn rmdir(&self, path: &VPath) -> MResult<()> {
        let run = || -> io::Result<()> {
            let a = self.at(path)?;
            // SAFETY: the closure borrows `a`, so `a.name` (NUL-terminated) and its directory
            // descriptor outlive each call; unlinkat writes no memory.
            let call =
                || unsafe { libc::unlinkat(a.fd(self.fd()), a.name.as_ptr(), libc::AT_REMOVEDIR) };
            if call() == 0 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            if !matches!(err.raw_os_error(), Some(libc::ENOTEMPTY | libc::EEXIST)) {
                return Err(err);
            }
            // Not empty for the user: the syscall's own answer stands.
            if !self.clear_hidden(path)? {
                return Err(err);
            }
            sys::cvt(call()).map(drop)
        };
        run().map_err(|e| MutationError::io("rmdir", path, e))
    }

    fn rename(&self, src: &VPath, dst: &VPath, mode: RenameMode) -> MResult<()> {
        let flags = match mode {
            RenameMode::Replace => 0,
            RenameMode::NoReplace => libc::RENAME_NOREPLACE,
            RenameMode::Exchange => libc::RENAME_EXCHANGE,
        };
        let run = || -> io::Result<()> {
            let (cs, cd) = (self.at(src)?, self.at(dst)?);
            let (sd, dd) = (cs.fd(self.fd()), cd.fd(self.fd()));
            // SAFETY: the closure borrows `cs` and `cd`, so both NUL-terminated names, and the
            // directories `sd` and `dd` they hold open, outlive each call; renameat2 writes no
            // memory.
            let call =
                || unsafe { libc::renameat2(sd, cs.name.as_ptr(), dd, cd.name.as_ptr(), flags) };
            if call() == 0 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            // A directory holding only sidecars looks empty to the user: replace it anyway.
            if mode == RenameMode::Replace
                && matches!(err.raw_os_error(), Some(libc::ENOTEMPTY | libc::EEXIST))
            {
                if !self.clear_hidden(dst)? {
                    return Err(err);
                }
                return sys::cvt(call()).map(drop);
            }
            Err(err)
        };
        run().map_err(|e| MutationError::io("rename", src, e))
    }

    fn setattr(&self, path: &VPath, change: &AttrChange) -> MResult<()> {
        let run = || {
            let a = self.at(path)?;
            apply_attr_change(a.fd(self.fd()), &a.name, change)
        };
        run().map_err(|e| MutationError::io("setattr", path, e))
    }
}

/// Apply `change` to `rel` under directory `dir` (or to `/proc/self/fd/N` with AT_FDCWD, for
/// a file no longer in the namespace). Owner first: chown clears set-ID bits a following
/// chmod may set again. Never follows a final symlink.
pub fn apply_attr_change(dir: RawFd, rel: &CStr, change: &AttrChange) -> io::Result<()> {
    let name = OsStr::from_bytes(rel.to_bytes());
    if change.uid.is_some() || change.gid.is_some() {
        let (u, g) = (
            change.uid.unwrap_or(u32::MAX),
            change.gid.unwrap_or(u32::MAX),
        );
        // SAFETY: `rel` is a NUL-terminated CStr borrowed for the call; `dir` is the caller's
        // open directory or AT_FDCWD; fchownat writes no memory.
        sys::cvt(unsafe { libc::fchownat(dir, rel.as_ptr(), u, g, libc::AT_SYMLINK_NOFOLLOW) })?;
    }
    if let Some(mode) = change.mode {
        // Linux has no mode on symlinks.
        if !sys::is_lnk(&sys::statat(dir, name)?) {
            // SAFETY: the same borrowed NUL-terminated `rel` and `dir` as above; no memory
            // is written.
            sys::cvt(unsafe { libc::fchmodat(dir, rel.as_ptr(), mode & 0o7777, 0) })?;
        }
    }
    if let Some(size) = change.size {
        let fd = sys::openat(dir, name, libc::O_WRONLY, 0)?;
        // SAFETY: `fd` is a descriptor we own, open until the end of this block; ftruncate
        // takes no pointer.
        sys::cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) })?;
    }
    if change.atime.is_some() || change.mtime.is_some() {
        sys::utimens(dir, rel, change.atime, change.mtime)?;
    }
    Ok(())
}
