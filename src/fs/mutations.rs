//! The mutation seam: every change the mount makes to the namespace goes through
//! [`Mutations`], named after the operation a program asked for.
//!
//! The FUSE side only decides *what* to change (a validated [`VPath`], never a lock file or a
//! database); the implementation decides *how*. [`DirectMutations`] applies each change with
//! plain system calls on the workspace. The locked operations (EXACT/TREE path locks, index
//! first on rm, index move on mv, enqueue on write-close) plug in behind this same trait and
//! answer with their own error ([`MutationError::Backend`]), which decides the errno.

use std::ffi::{CStr, OsStr};
use std::fs::File;
use std::io;
use std::ops::ControlFlow;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;

use thiserror::Error;

use crate::errno::{level_of, ToErrno};
use crate::sys::{self, DataRoot, OFlags, RenameFlags, TimeSpec};
use crate::uri::{is_internal_name, is_sidecar_name, VPath};
use crate::workspace::Workspace;

/// Why a mutation failed.
#[derive(Debug, Error)]
pub enum MutationError {
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
    root: DataRoot,
    /// The daemon's own umask (it keeps the one it was started with): the bits of a
    /// caller's mode it takes off are put back ([`DirectMutations::lost_bits`]).
    umask: u32,
}

impl DirectMutations {
    pub fn new(ws: &Workspace) -> io::Result<Self> {
        Ok(Self::at(DataRoot::open(&ws.data_root())?))
    }

    /// The mutations through `root`, a data root descriptor another layer holds already.
    pub fn at(root: DataRoot) -> Self {
        DirectMutations {
            root,
            umask: sys::umask(),
        }
    }

    /// The permission bits of `mode` the daemon's umask takes off. The mode a request brings
    /// is the caller's, its umask already applied by the kernel (no `FUSE_DONT_MASK`): a
    /// node made through the mount gets exactly it, as on a native filesystem, whatever
    /// umask the daemon runs with. Zero (no extra call) when the caller's umask is at least
    /// the daemon's, as it mostly is.
    fn lost_bits(&self, mode: u32) -> u32 {
        mode & 0o777 & self.umask
    }

    /// Put back on `name` in `dir`, just made, the bits `lost` the daemon's umask took off
    /// (keeping what the kernel added: a set-group-ID parent's bit on a directory).
    fn restore_bits(dir: BorrowedFd<'_>, name: &CStr, lost: u32) -> io::Result<()> {
        let st = sys::lstatat(dir, name)?;
        sys::chmodat(dir, name, (st.st_mode & 0o7777) | lost)
    }

    /// Whether `p` is a directory now (not following a final symlink).
    pub fn is_dir(&self, p: &VPath) -> bool {
        self.root.lstat(p.as_bytes()).is_ok_and(|st| st.is_dir())
    }

    /// Give a file we just created (as root) to its caller, keeping set-ID bits chown clears.
    fn give_to(&self, p: &VPath, owner: Owner, mode: u32) -> io::Result<()> {
        // Created by its own caller: the kernel already chose owner and group (set-GID
        // parents included).
        if owner.uid == sys::euid() && owner.gid == sys::egid() {
            return Ok(());
        }
        let parent = p.parent().unwrap_or_else(VPath::root);
        let pst = self.root.lstat(parent.as_bytes())?;
        // BSD semantics: a set-group-ID directory passes its group on.
        let gid = if pst.st_mode & libc::S_ISGID != 0 {
            pst.st_gid
        } else {
            owner.gid
        };
        self.root.at(p.as_bytes(), |d, n| {
            let st = sys::lstatat(d, n)?;
            if st.st_uid != owner.uid || st.st_gid != gid {
                sys::chownat(d, n, Some(owner.uid), Some(gid))?;
                if mode & 0o7000 != 0 && !st.is_symlink() {
                    sys::chmodat(d, n, mode & 0o7777)?;
                }
            }
            Ok(())
        })
    }

    /// Remove what a user can't see or remove (sidecars, lock files) so the directory can go.
    /// `false` (nothing removed) when anything else is in it.
    fn clear_hidden(&self, p: &VPath) -> io::Result<bool> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW;
        let dir = self.root.openat(p.as_bytes(), flags, 0)?;
        let mut hidden = Vec::new();
        let mut user_entry = false;
        sys::for_each_entry(&dir, |e| {
            let name = OsStr::from_bytes(e.name().to_bytes());
            let n = name.to_string_lossy();
            if is_internal_name(&n) || is_sidecar_name(&n) {
                hidden.push(name.to_os_string());
                ControlFlow::Continue(())
            } else {
                user_entry = true;
                ControlFlow::Break(())
            }
        })?;
        if user_entry {
            return Ok(false);
        }
        for h in hidden {
            match sys::unlinkat(&dir, &h) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(true)
    }
}

impl Mutations for DirectMutations {
    fn create(&self, path: &VPath, mode: u32, flags: i32, owner: Owner) -> MResult<File> {
        let e = |e| MutationError::io("create", path, e);
        let excl = sys::oflags(flags) | OFlags::CREATE | OFlags::EXCL;
        match self.root.openat(path.as_bytes(), excl, mode) {
            Ok(fd) => {
                let lost = self.lost_bits(mode);
                if lost != 0 {
                    let st = sys::fstat(&fd).map_err(e)?;
                    sys::chmod_fd(&fd, (st.st_mode & 0o7777) | lost).map_err(e)?;
                }
                let f = File::from(fd);
                self.give_to(path, owner, mode).map_err(e)?;
                Ok(f)
            }
            // Someone created it between the kernel's lookup and here: open what is there.
            Err(err) if err.raw_os_error() == Some(libc::EEXIST) && flags & libc::O_EXCL == 0 => {
                self.open_write(path, flags & !libc::O_CREAT)
            }
            Err(err) => Err(e(err)),
        }
    }

    fn open_write(&self, path: &VPath, flags: i32) -> MResult<File> {
        // No O_CREAT (nor a mode): the file exists.
        let flags = sys::oflags(flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY))
            | OFlags::NOFOLLOW;
        self.root
            .openat(path.as_bytes(), flags, 0)
            .map(File::from)
            .map_err(|e| MutationError::io("open", path, e))
    }

    fn file_written(&self, path: &VPath) {
        tracing::debug!(path = path.as_str(), "file written");
    }

    fn mkdir(&self, path: &VPath, mode: u32, owner: Owner) -> MResult<()> {
        let run = || -> io::Result<()> {
            let lost = self.lost_bits(mode);
            self.root.at(path.as_bytes(), |d, n| {
                sys::mkdirat(d, n, mode)?;
                if lost != 0 {
                    Self::restore_bits(d, n, lost)?;
                }
                Ok(())
            })?;
            self.give_to(path, owner, mode)
        };
        run().map_err(|e| MutationError::io("mkdir", path, e))
    }

    fn mknod(&self, path: &VPath, mode: u32, rdev: u64, owner: Owner) -> MResult<()> {
        let run = || -> io::Result<()> {
            let lost = self.lost_bits(mode);
            self.root.at(path.as_bytes(), |d, n| {
                sys::mknodat(d, n, mode, rdev)?;
                if lost != 0 {
                    Self::restore_bits(d, n, lost)?;
                }
                Ok(())
            })?;
            self.give_to(path, owner, mode)
        };
        run().map_err(|e| MutationError::io("mknod", path, e))
    }

    fn symlink(&self, target: &OsStr, link: &VPath, owner: Owner) -> MResult<()> {
        let run = || -> io::Result<()> {
            self.root
                .at(link.as_bytes(), |d, n| sys::symlinkat(target, d, n))?;
            self.give_to(link, owner, 0o777)
        };
        run().map_err(|e| MutationError::io("symlink", link, e))
    }

    fn link(&self, existing: &VPath, new: &VPath) -> MResult<()> {
        let run = || {
            self.root.at(existing.as_bytes(), |ed, en| {
                self.root
                    .at(new.as_bytes(), |nd, nn| sys::linkat(ed, en, nd, nn))
            })
        };
        run().map_err(|e| MutationError::io("link", new, e))
    }

    fn unlink(&self, path: &VPath) -> MResult<()> {
        self.root
            .remove_file(path.as_bytes())
            .map_err(|e| MutationError::io("unlink", path, e))
    }

    fn rmdir(&self, path: &VPath) -> MResult<()> {
        let call = || self.root.at(path.as_bytes(), |d, n| sys::rmdirat(d, n));
        let run = || -> io::Result<()> {
            match call() {
                // Not empty for the user: the syscall's own answer stands.
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTEMPTY | libc::EEXIST)) => {
                    if self.clear_hidden(path)? {
                        call()
                    } else {
                        Err(e)
                    }
                }
                r => r,
            }
        };
        run().map_err(|e| MutationError::io("rmdir", path, e))
    }

    fn rename(&self, src: &VPath, dst: &VPath, mode: RenameMode) -> MResult<()> {
        let flags = match mode {
            RenameMode::Replace => RenameFlags::empty(),
            RenameMode::NoReplace => RenameFlags::NOREPLACE,
            RenameMode::Exchange => RenameFlags::EXCHANGE,
        };
        let call = || self.root.rename(src.as_bytes(), dst.as_bytes(), flags);
        let run = || -> io::Result<()> {
            match call() {
                // A directory holding only sidecars looks empty to the user: replace it anyway.
                Err(e)
                    if mode == RenameMode::Replace
                        && matches!(e.raw_os_error(), Some(libc::ENOTEMPTY | libc::EEXIST)) =>
                {
                    if self.clear_hidden(dst)? {
                        call()
                    } else {
                        Err(e)
                    }
                }
                r => r,
            }
        };
        run().map_err(|e| MutationError::io("rename", src, e))
    }

    fn setattr(&self, path: &VPath, change: &AttrChange) -> MResult<()> {
        self.root
            .at(path.as_bytes(), |d, n| apply_attr_change(d, n, change))
            .map_err(|e| MutationError::io("setattr", path, e))
    }
}

/// Apply `change` to `name` in directory `dir`. Owner first: chown clears set-ID bits a
/// following chmod may set again. Never follows a final symlink.
pub fn apply_attr_change(dir: BorrowedFd<'_>, name: &CStr, change: &AttrChange) -> io::Result<()> {
    if change.uid.is_some() || change.gid.is_some() {
        sys::chownat(dir, name, change.uid, change.gid)?;
    }
    if let Some(mode) = change.mode {
        // Linux has no mode on symlinks.
        if !sys::lstatat(dir, name)?.is_symlink() {
            sys::chmodat(dir, name, mode & 0o7777)?;
        }
    }
    if let Some(size) = change.size {
        sys::ftruncate(sys::openat(dir, name, OFlags::WRONLY, 0)?, size)?;
    }
    if change.atime.is_some() || change.mtime.is_some() {
        sys::utimensat(dir, name, change.atime, change.mtime)?;
    }
    Ok(())
}

/// [`apply_attr_change`] for what has no name in the namespace (the root, a file unlinked
/// while open): to the file the `O_PATH` descriptor `fd` refers to itself. Not through
/// `/proc/self/fd/N` with the `*at` calls above, which do not follow a final symlink: they
/// would change the magic link, answer 0 and change nothing.
pub fn apply_attr_change_fd(fd: BorrowedFd<'_>, change: &AttrChange) -> io::Result<()> {
    if change.uid.is_some() || change.gid.is_some() {
        sys::chown_fd(fd, change.uid, change.gid)?;
    }
    if let Some(mode) = change.mode {
        // Linux has no mode on symlinks; anything else through its descriptor's name, followed.
        if !sys::fstat(fd)?.is_symlink() {
            sys::chmodat(sys::CWD, sys::proc_path(fd), mode & 0o7777)?;
        }
    }
    if let Some(size) = change.size {
        sys::ftruncate(sys::reopen(fd, OFlags::WRONLY)?, size)?;
    }
    if change.atime.is_some() || change.mtime.is_some() {
        sys::utimens_fd(fd, change.atime, change.mtime)?;
    }
    Ok(())
}
