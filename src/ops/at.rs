//! The data root as a directory descriptor, for the path calls on the mount's hot paths
//! (unlink, rmdir, rename, write): each names its path relative to the descriptor, never the
//! absolute backing path, which is longer than the path through the mount and overflows
//! PATH_MAX where that one does not. Callers still name the absolute path in their errors.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::fsx::Durable;
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

    /// Replace file `p` with `bytes` atomically and durably, keeping its mode and owner
    /// ([`crate::fsx::replace_at`]); a new file gets `new_mode`.
    pub fn write_atomic(&self, p: &VPath, bytes: &[u8], new_mode: u32) -> io::Result<()> {
        let parent = p.parent().unwrap_or_else(VPath::root);
        let dir = sysutil::open_dir(self.0.as_fd(), rel(&parent))?;
        let name = sysutil::cstring(p.name().as_bytes())?;
        crate::fsx::replace_at(dir.as_fd(), &name, bytes, new_mode, Durable::Rename)
    }

    /// Replace the summary `p` (derived: its content is synced before the rename, the rename
    /// is not waited for). Unless the mount lists summaries, a change programs do not see,
    /// which leaves its directory's shown times as they were (see [`crate::dirtimes`]).
    pub fn write_summary(&self, p: &VPath, bytes: &[u8]) -> io::Result<()> {
        let parent = p.parent().unwrap_or_else(VPath::root);
        let dir = sysutil::open_dir(self.0.as_fd(), rel(&parent))?;
        let name = sysutil::cstring(p.name().as_bytes())?;
        let replace = || crate::fsx::replace_at(dir.as_fd(), &name, bytes, 0o644, Durable::Content);
        if crate::dirtimes::summaries_listed() {
            return replace();
        }
        crate::dirtimes::quietly(dir.as_fd(), c".", replace)
    }
}
