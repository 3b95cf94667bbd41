//! The data root's descriptor ([`crate::sys::DataRoot`]) taking namespace paths, for the path
//! calls on the mount's hot paths (unlink, rmdir, rename, write): each names its path relative
//! to the descriptor, never the absolute backing path, which is longer than the path through
//! the mount and overflows PATH_MAX where that one does not. Callers still name the absolute
//! path in their errors.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::fsx::Durable;
use crate::sys::{self, DataRoot, RenameFlags, Stat};
use crate::uri::VPath;

/// The data root, opened `O_PATH`, addressed by [`VPath`].
#[derive(Debug)]
pub(crate) struct VRoot(DataRoot);

impl VRoot {
    pub fn open(data_root: &Path) -> io::Result<Self> {
        DataRoot::open(data_root).map(VRoot)
    }

    /// The descriptor underneath, for a layer below ops (the mount's direct mutations).
    pub fn data_root(&self) -> &DataRoot {
        &self.0
    }

    /// Open regular file `p` for a background read ([`sys::open_regular`]): only a regular
    /// file is opened at all (a FIFO, socket or device node is `ENXIO`, a directory `EISDIR`,
    /// never opened), a final symlink is not followed (`ELOOP`), a terminal never becomes the
    /// daemon's, and the read leaves the atime its user set where the kernel allows.
    pub fn open_read(&self, p: &VPath) -> io::Result<std::fs::File> {
        self.0.at(p.as_bytes(), |d, n| sys::open_regular_file(d, n))
    }

    /// `lstat` of `p`; `None` when it does not exist (or a file stands where a directory
    /// on its way would be).
    pub fn lstat(&self, p: &VPath) -> io::Result<Option<Stat>> {
        match self.0.lstat(p.as_bytes()) {
            Ok(st) => Ok(Some(st)),
            Err(e) if sys::is_gone(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The extended attribute `name` of `p` (a regular file or directory, no symlink followed
    /// on the way or at the end); `None` when it has none.
    pub fn get_xattr(&self, p: &VPath, name: &OsStr) -> io::Result<Option<Vec<u8>>> {
        let fd = self.xattr_target(p)?;
        let absent = |e: &io::Error| e.raw_os_error() == Some(libc::ENODATA);
        let len = match sys::getxattr(&fd, name, &mut []) {
            Err(e) if absent(&e) => return Ok(None),
            r => r?,
        };
        let mut buf = vec![0u8; len.max(1)];
        match sys::getxattr(&fd, name, &mut buf) {
            Err(e) if absent(&e) => Ok(None),
            r => {
                buf.truncate(r?);
                Ok(Some(buf))
            }
        }
    }

    /// Set (`Some`) or remove (`None`; absent already is no error) the extended attribute
    /// `name` of `p`, as [`Self::get_xattr`] finds it.
    pub fn set_xattr(&self, p: &VPath, name: &OsStr, value: Option<&[u8]>) -> io::Result<()> {
        let fd = self.xattr_target(p)?;
        match value {
            Some(v) => sys::setxattr(&fd, name, v, 0),
            None => match sys::removexattr(&fd, name) {
                Err(e) if e.raw_os_error() == Some(libc::ENODATA) => Ok(()),
                r => r,
            },
        }
    }

    /// `p` opened `O_PATH` without following a symlink, when it is a regular file or a
    /// directory: a symlink, FIFO or device carries no user attributes (`EPERM`).
    fn xattr_target(&self, p: &VPath) -> io::Result<std::os::fd::OwnedFd> {
        let fd = self
            .0
            .open_nofollow(p.as_bytes(), sys::OFlags::PATH | sys::OFlags::NOFOLLOW)?;
        let st = sys::fstat(&fd)?;
        if !(st.is_dir() || st.is_file()) {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        Ok(fd)
    }

    /// mkdir(2) of `p` with `mode`.
    pub fn mkdir(&self, p: &VPath, mode: u32) -> io::Result<()> {
        self.0.at(p.as_bytes(), |d, n| sys::mkdirat(d, n, mode))
    }

    pub fn remove_file(&self, p: &VPath) -> io::Result<()> {
        self.0.remove_file(p.as_bytes())
    }

    /// Remove the entry `name` of directory `dir`.
    pub fn remove_in(&self, dir: &VPath, name: &OsStr) -> io::Result<()> {
        sys::unlinkat(self.0.open_dir(dir.as_bytes())?, name)
    }

    /// rename(2) of `from` to `to`, both in the namespace.
    pub fn rename(&self, from: &VPath, to: &VPath) -> io::Result<()> {
        self.0
            .rename(from.as_bytes(), to.as_bytes(), RenameFlags::empty())
    }

    /// rename(2) of `from` to an absolute path out of the namespace (the workspace's scratch
    /// directory, on the same filesystem).
    pub fn rename_out(&self, from: &VPath, to: &Path) -> io::Result<()> {
        let to = to.as_os_str().as_bytes();
        self.0.rename(from.as_bytes(), to, RenameFlags::empty())
    }

    /// The names in directory `p`.
    pub fn names(&self, p: &VPath) -> io::Result<Vec<OsString>> {
        self.0.names(p.as_bytes())
    }

    /// Replace file `p` with `bytes` atomically and durably, keeping its mode and owner
    /// ([`crate::fsx::replace_at`]); a new file gets `new_mode`.
    pub fn write_atomic(&self, p: &VPath, bytes: &[u8], new_mode: u32) -> io::Result<()> {
        let parent = p.parent().unwrap_or_else(VPath::root);
        let dir = self.0.open_dir(parent.as_bytes())?;
        let name = OsStr::new(p.name());
        crate::fsx::replace_at(dir.as_fd(), name, bytes, new_mode, Durable::Rename)
    }

    /// Replace the summary `p` (derived: its content is synced before the rename, the rename
    /// is not waited for). Unless the mount lists summaries, a change programs do not see,
    /// which leaves its directory's shown times as they were (see [`crate::dirtimes`]).
    pub fn write_summary(&self, p: &VPath, bytes: &[u8]) -> io::Result<()> {
        let parent = p.parent().unwrap_or_else(VPath::root);
        let dir = self.0.open_dir(parent.as_bytes())?;
        let name = OsStr::new(p.name());
        let replace = || crate::fsx::replace_at(dir.as_fd(), name, bytes, 0o644, Durable::Content);
        if crate::dirtimes::summaries_listed() {
            return replace();
        }
        crate::dirtimes::quietly(dir.as_fd(), c".", replace)
    }
}
