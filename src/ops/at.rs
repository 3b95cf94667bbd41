//! The data root as a directory descriptor, for the path calls on the mount's hot paths
//! (unlink, rmdir, rename, write): each names its path relative to the descriptor, never the
//! absolute backing path, which is longer than the path through the mount and overflows
//! PATH_MAX where that one does not. Callers still name the absolute path in their errors.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::sysutil::{self, DirRoot, Stat};
use crate::uri::VPath;

fn rel(p: &VPath) -> &[u8] {
    p.as_str().as_bytes()
}

/// The data root, opened `O_PATH`.
#[derive(Debug)]
pub(crate) struct DataRoot(DirRoot);

impl DataRoot {
    pub fn open(data_root: &Path) -> io::Result<Self> {
        DirRoot::open(data_root).map(DataRoot)
    }

    /// Open file `p` for a background read: a final symlink is not followed (ELOOP), a
    /// FIFO never blocks the opener, a terminal never becomes the daemon's, and the read
    /// leaves the atime its user set where the kernel allows (O_NOATIME: the owner or
    /// CAP_FOWNER only; otherwise read as usual).
    pub fn open_read(&self, p: &VPath) -> io::Result<std::fs::File> {
        let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY;
        let open = |extra: i32| {
            sysutil::with_at(self.0.as_fd(), rel(p), |d, n| {
                sysutil::openat(d.as_raw_fd(), n, flags | extra, 0)
            })
        };
        match open(libc::O_NOATIME) {
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => open(0),
            r => r,
        }
        .map(std::fs::File::from)
    }

    /// `lstat` of `p`; `None` when it does not exist (or a file stands where a directory
    /// on its way would be).
    pub fn lstat(&self, p: &VPath) -> io::Result<Option<Stat>> {
        match sysutil::lstat(self.0.as_fd(), rel(p)) {
            Ok(st) => Ok(Some(st)),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn remove_file(&self, p: &VPath) -> io::Result<()> {
        sysutil::remove_file(self.0.as_fd(), rel(p))
    }

    /// Remove the entry `name` of directory `dir`.
    pub fn remove_in(&self, dir: &VPath, name: &std::ffi::OsStr) -> io::Result<()> {
        let fd = sysutil::open_dir(self.0.as_fd(), rel(dir))?;
        sysutil::unlink_c(fd.as_raw_fd(), &sysutil::cstring(name.as_bytes())?, 0)
    }

    /// rename(2) of `from` to `to`, both in the namespace.
    pub fn rename(&self, from: &VPath, to: &VPath) -> io::Result<()> {
        let root = self.0.as_fd();
        sysutil::rename(root, rel(from), root, rel(to), 0)
    }

    /// rename(2) of `from` to an absolute path out of the namespace (the workspace's scratch
    /// directory, on the same filesystem).
    pub fn rename_out(&self, from: &VPath, to: &Path) -> io::Result<()> {
        let root = self.0.as_fd();
        sysutil::rename(root, rel(from), root, to.as_os_str().as_bytes(), 0)
    }

    /// The names in directory `p`.
    pub fn names(&self, p: &VPath) -> io::Result<Vec<OsString>> {
        sysutil::dir_names(self.0.as_fd(), rel(p))
    }

    /// Replace file `p` with `bytes` atomically: a temp file of an internal name
    /// (`.vikingfs.*`, never listed) in the same directory, then rename(2). A crash leaves
    /// the old or the new content, never a torn file; a leftover temp file is found and
    /// removed by `fsck --repair`.
    pub fn write_atomic(&self, p: &VPath, bytes: &[u8]) -> io::Result<()> {
        let parent = p.parent().unwrap_or_else(VPath::root);
        let dir = sysutil::open_dir(self.0.as_fd(), rel(&parent))?;
        Self::replace_in(dir.as_fd(), p, bytes)
    }

    /// [`write_atomic`](Self::write_atomic) of a summary: unless the mount lists summaries,
    /// a change programs do not see, which leaves its directory's shown times as they were
    /// (see [`crate::dirtimes`]).
    pub fn write_summary(&self, p: &VPath, bytes: &[u8]) -> io::Result<()> {
        if crate::dirtimes::summaries_listed() {
            return self.write_atomic(p, bytes);
        }
        let parent = p.parent().unwrap_or_else(VPath::root);
        let dir = sysutil::open_dir(self.0.as_fd(), rel(&parent))?;
        crate::dirtimes::quietly(dir.as_fd(), c".", || {
            Self::replace_in(dir.as_fd(), p, bytes)
        })
    }

    fn replace_in(dir: BorrowedFd<'_>, p: &VPath, bytes: &[u8]) -> io::Result<()> {
        use std::io::Write;
        let tmp = format!(".vikingfs.tmp.{}", uuid::Uuid::new_v4().simple());
        let tmp = sysutil::cstring(tmp.as_bytes())?;
        let name = sysutil::cstring(p.name().as_bytes())?;
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        let mut f = std::fs::File::from(sysutil::openat(dir.as_raw_fd(), &tmp, flags, 0o666)?);
        let res = f
            .write_all(bytes)
            .and_then(|()| sysutil::rename_c(dir.as_raw_fd(), &tmp, dir.as_raw_fd(), &name, 0));
        if res.is_err() {
            let _ = sysutil::unlink_c(dir.as_raw_fd(), &tmp, 0);
        }
        res
    }
}
