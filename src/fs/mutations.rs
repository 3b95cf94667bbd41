//! The mutation seam: every change the mount makes to the namespace goes through
//! [`Mutations`], named after the operation a program asked for.
//!
//! The FUSE side only decides *what* to change (a validated [`VPath`], never a lock file or a
//! database); the implementation decides *how*. [`DirectMutations`] applies each change with
//! plain system calls on the workspace. The locked operations (EXACT/TREE path locks, index
//! first on rm, index move on mv, enqueue on write-close) plug in behind this same trait and may
//! answer [`MutationError::Busy`], which the mount turns into EBUSY.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::fs::sys::{self, TimeSpec};
use crate::uri::{is_internal_name, is_sidecar_name, VPath};
use crate::workspace::Workspace;

/// Why a mutation failed.
#[derive(Debug, Error)]
pub enum MutationError {
    /// A lock on the path stayed busy past the lock timeout; nothing was changed.
    #[error("{path}: lock busy")]
    Busy { path: String },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: io::Error,
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
/// sidecars are already refused by the caller.
pub trait Mutations: Send + Sync + 'static {
    /// Create and open a regular file (`flags` as open(2), O_CREAT included).
    fn create(&self, path: &VPath, mode: u32, flags: i32, owner: Owner) -> MResult<File>;
    /// Open an existing file for writing (O_WRONLY/O_RDWR, maybe O_TRUNC or O_APPEND).
    fn open_write(&self, path: &VPath, flags: i32) -> MResult<File>;
    /// A handle that wrote to (or created) `path` was released: the file's content changed.
    fn file_written(&self, path: &VPath);
    fn mkdir(&self, path: &VPath, mode: u32, owner: Owner) -> MResult<()>;
    /// A special file (FIFO, socket, device) or empty regular file.
    fn mknod(&self, path: &VPath, mode: u32, rdev: u64, owner: Owner) -> MResult<()>;
    fn symlink(&self, target: &OsStr, link: &VPath, owner: Owner) -> MResult<()>;
    fn link(&self, existing: &VPath, new: &VPath) -> MResult<()>;
    fn unlink(&self, path: &VPath) -> MResult<()>;
    /// Remove a directory that holds nothing but derived sidecars and internal files.
    fn rmdir(&self, path: &VPath) -> MResult<()>;
    fn rename(&self, src: &VPath, dst: &VPath, mode: RenameMode) -> MResult<()>;
    /// Change mode, owner, size or times of `path` (never following a final symlink).
    fn setattr(&self, path: &VPath, change: &AttrChange) -> MResult<()>;
}

/// Plain system calls on the workspace's files: the mutation seam without locks or index.
#[derive(Debug, Clone)]
pub struct DirectMutations {
    data_root: PathBuf,
}

impl DirectMutations {
    pub fn new(ws: &Workspace) -> Self {
        DirectMutations {
            data_root: ws.data_root(),
        }
    }

    fn fs_path(&self, p: &VPath) -> PathBuf {
        if p.is_root() {
            self.data_root.clone()
        } else {
            self.data_root.join(p.as_str())
        }
    }
}

/// The group a new file gets: the parent's when it is set-group-ID (BSD semantics), else the
/// caller's.
fn owner_gid(path: &Path, owner: Owner) -> io::Result<u32> {
    let parent = path.parent().unwrap_or(Path::new("/"));
    let st = sys::lstat(parent)?;
    Ok(if st.st_mode & libc::S_ISGID != 0 {
        st.st_gid
    } else {
        owner.gid
    })
}

/// Give a file we just created (as root) to its caller, keeping set-ID bits chown would clear.
fn give_to(path: &Path, owner: Owner, mode: u32) -> io::Result<()> {
    // Created by its own caller: the kernel already chose owner and group (set-GID parents
    // included).
    if owner.uid == unsafe { libc::geteuid() } && owner.gid == unsafe { libc::getegid() } {
        return Ok(());
    }
    let gid = owner_gid(path, owner)?;
    let c = sys::cpath(path)?;
    let st = sys::lstat(path)?;
    if st.st_uid != owner.uid || st.st_gid != gid {
        sys::cvt(unsafe { libc::lchown(c.as_ptr(), owner.uid, gid) })?;
        if mode & 0o7000 != 0 && !sys::is_lnk(&st) {
            sys::cvt(unsafe { libc::chmod(c.as_ptr(), mode & 0o7777) })?;
        }
    }
    Ok(())
}

/// Remove what a user can't see or remove (sidecars, lock files) so the directory can go.
/// Fails with ENOTEMPTY when anything else is left.
fn clear_hidden(dir: &Path) -> io::Result<()> {
    let mut hidden = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let n = name.to_string_lossy();
        if is_internal_name(&n) || is_sidecar_name(&n) {
            hidden.push(e.path());
        } else {
            return Err(io::Error::from_raw_os_error(libc::ENOTEMPTY));
        }
    }
    for p in hidden {
        match std::fs::remove_file(&p) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

impl Mutations for DirectMutations {
    fn create(&self, path: &VPath, mode: u32, flags: i32, owner: Owner) -> MResult<File> {
        let p = self.fs_path(path);
        let c = sys::cpath(&p).map_err(|e| MutationError::io("create", path, e))?;
        let excl = flags | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC;
        let fd = unsafe { libc::open(c.as_ptr(), excl, mode) };
        if fd >= 0 {
            give_to(&p, owner, mode).map_err(|e| MutationError::io("create", path, e))?;
            return Ok(unsafe { File::from_raw_fd(fd) });
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EEXIST) || flags & libc::O_EXCL != 0 {
            return Err(MutationError::io("create", path, err));
        }
        // Someone created it between the kernel's lookup and here: open what is there.
        self.open_write(path, flags & !libc::O_CREAT)
    }

    fn open_write(&self, path: &VPath, flags: i32) -> MResult<File> {
        let c = sys::cpath(&self.fs_path(path)).map_err(|e| MutationError::io("open", path, e))?;
        let flags = (flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY)) | libc::O_CLOEXEC;
        let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_NOFOLLOW) };
        if fd < 0 {
            return Err(MutationError::io("open", path, io::Error::last_os_error()));
        }
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    fn file_written(&self, path: &VPath) {
        tracing::debug!(path = path.as_str(), "file written");
    }

    fn mkdir(&self, path: &VPath, mode: u32, owner: Owner) -> MResult<()> {
        let p = self.fs_path(path);
        let run = || -> io::Result<()> {
            let c = sys::cpath(&p)?;
            sys::cvt(unsafe { libc::mkdir(c.as_ptr(), mode) })?;
            give_to(&p, owner, mode)
        };
        run().map_err(|e| MutationError::io("mkdir", path, e))
    }

    fn mknod(&self, path: &VPath, mode: u32, rdev: u64, owner: Owner) -> MResult<()> {
        let p = self.fs_path(path);
        let run = || -> io::Result<()> {
            let c = sys::cpath(&p)?;
            sys::cvt(unsafe { libc::mknod(c.as_ptr(), mode, rdev) })?;
            give_to(&p, owner, mode)
        };
        run().map_err(|e| MutationError::io("mknod", path, e))
    }

    fn symlink(&self, target: &OsStr, link: &VPath, owner: Owner) -> MResult<()> {
        let p = self.fs_path(link);
        let run = || -> io::Result<()> {
            std::os::unix::fs::symlink(target, &p)?;
            give_to(&p, owner, 0o777)
        };
        run().map_err(|e| MutationError::io("symlink", link, e))
    }

    fn link(&self, existing: &VPath, new: &VPath) -> MResult<()> {
        std::fs::hard_link(self.fs_path(existing), self.fs_path(new))
            .map_err(|e| MutationError::io("link", new, e))
    }

    fn unlink(&self, path: &VPath) -> MResult<()> {
        let c =
            sys::cpath(&self.fs_path(path)).map_err(|e| MutationError::io("unlink", path, e))?;
        sys::cvt(unsafe { libc::unlink(c.as_ptr()) })
            .map(drop)
            .map_err(|e| MutationError::io("unlink", path, e))
    }

    fn rmdir(&self, path: &VPath) -> MResult<()> {
        let p = self.fs_path(path);
        let run = || -> io::Result<()> {
            let c = sys::cpath(&p)?;
            if unsafe { libc::rmdir(c.as_ptr()) } == 0 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            if !matches!(err.raw_os_error(), Some(libc::ENOTEMPTY | libc::EEXIST)) {
                return Err(err);
            }
            clear_hidden(&p)?;
            sys::cvt(unsafe { libc::rmdir(c.as_ptr()) }).map(drop)
        };
        run().map_err(|e| MutationError::io("rmdir", path, e))
    }

    fn rename(&self, src: &VPath, dst: &VPath, mode: RenameMode) -> MResult<()> {
        let (s, d) = (self.fs_path(src), self.fs_path(dst));
        let flags = match mode {
            RenameMode::Replace => 0,
            RenameMode::NoReplace => libc::RENAME_NOREPLACE,
            RenameMode::Exchange => libc::RENAME_EXCHANGE,
        };
        let run = || -> io::Result<()> {
            let (cs, cd) = (sys::cpath(&s)?, sys::cpath(&d)?);
            let call = || unsafe {
                libc::renameat2(
                    libc::AT_FDCWD,
                    cs.as_ptr(),
                    libc::AT_FDCWD,
                    cd.as_ptr(),
                    flags,
                )
            };
            if call() == 0 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            // A directory holding only sidecars looks empty to the user: replace it anyway.
            if mode == RenameMode::Replace
                && matches!(err.raw_os_error(), Some(libc::ENOTEMPTY | libc::EEXIST))
            {
                clear_hidden(&d)?;
                return sys::cvt(call()).map(drop);
            }
            Err(err)
        };
        run().map_err(|e| MutationError::io("rename", src, e))
    }

    fn setattr(&self, path: &VPath, change: &AttrChange) -> MResult<()> {
        let p = self.fs_path(path);
        apply_attr_change(&p, change).map_err(|e| MutationError::io("setattr", path, e))
    }
}

/// Apply `change` to the file at `path` (which may be `/proc/self/fd/N` of a file no longer
/// in the namespace). Owner first: chown clears set-ID bits a following chmod may set again.
pub fn apply_attr_change(path: &Path, change: &AttrChange) -> io::Result<()> {
    let c = sys::cpath(path)?;
    if change.uid.is_some() || change.gid.is_some() {
        let (u, g) = (
            change.uid.unwrap_or(u32::MAX),
            change.gid.unwrap_or(u32::MAX),
        );
        sys::cvt(unsafe { libc::lchown(c.as_ptr(), u, g) })?;
    }
    if let Some(mode) = change
        .mode
        .filter(|_| !sys::lstat(path).is_ok_and(|st| sys::is_lnk(&st)))
    {
        sys::cvt(unsafe { libc::chmod(c.as_ptr(), mode & 0o7777) })?;
    }
    if let Some(size) = change.size {
        let f = std::fs::OpenOptions::new().write(true).open(path)?;
        sys::cvt(unsafe { libc::ftruncate(f.as_raw_fd(), size as libc::off_t) })?;
    }
    if change.atime.is_some() || change.mtime.is_some() {
        sys::utimens(&c, change.atime, change.mtime)?;
    }
    Ok(())
}
