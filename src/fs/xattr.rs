//! Extended attributes of the core: metadata of the backing file, never of a sidecar.

use std::ffi::OsStr;
use std::io;
use std::sync::Arc;

use super::fdcache::PathFd;
use super::inode::Inode;
use super::{sys, FsError, FsResult, VikingFs};

impl VikingFs {
    /// The inode and `/proc/self/fd/N` of its descriptor; the path is valid while the
    /// returned descriptor lives.
    fn xattr_path(&self, ino: u64) -> FsResult<(Arc<Inode>, PathFd, std::ffi::CString)> {
        let inode = self.inodes.get(ino)?;
        let fd = inode.fd()?;
        let c = fd.proc_path();
        Ok((inode, fd, c))
    }

    /// getxattr; `size` 0 asks for the length only.
    pub fn getxattr(&self, ino: u64, name: &OsStr, size: u32) -> FsResult<Vec<u8>> {
        let (_i, _fd, c) = self.xattr_path(ino)?;
        let n = sys::cstr(name).map_err(|e| FsError::io("getxattr", e))?;
        let mut buf = vec![0u8; size as usize];
        // SAFETY: `c` (naming `_fd`, held open) and `n` are NUL-terminated CStrings alive for
        // the call; getxattr writes at most buf.len() bytes into `buf` (none when it is 0).
        let r =
            unsafe { libc::getxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if r < 0 {
            return Err(FsError::io("getxattr", io::Error::last_os_error()));
        }
        if size == 0 {
            return Ok(vec![0u8; r as usize]);
        }
        buf.truncate(r as usize);
        Ok(buf)
    }

    pub fn listxattr(&self, ino: u64, size: u32) -> FsResult<Vec<u8>> {
        let (_i, _fd, c) = self.xattr_path(ino)?;
        let mut buf = vec![0u8; size as usize];
        // SAFETY: `c` is a NUL-terminated CString naming `_fd`, held open, alive for the call;
        // listxattr writes at most buf.len() bytes into `buf` (none when it is 0).
        let r = unsafe { libc::listxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if r < 0 {
            return Err(FsError::io("listxattr", io::Error::last_os_error()));
        }
        if size == 0 {
            return Ok(vec![0u8; r as usize]);
        }
        buf.truncate(r as usize);
        Ok(buf)
    }

    /// Extended attributes are metadata of the file, not content: set directly (sidecars
    /// excepted), like chmod's times they carry no namespace change.
    pub fn setxattr(&self, ino: u64, name: &OsStr, value: &[u8], flags: i32) -> FsResult<()> {
        let (i, _fd, c) = self.xattr_path(ino)?;
        if self.is_sidecar_inode(&i) {
            return Err(FsError::ReadOnlySidecar(ino.to_string()));
        }
        let n = sys::cstr(name).map_err(|e| FsError::io("setxattr", e))?;
        // SAFETY: `c` (naming `_fd`, held open) and `n` are NUL-terminated CStrings alive for
        // the call; setxattr reads value.len() bytes from `value` and writes none of ours.
        sys::cvt(unsafe {
            libc::setxattr(
                c.as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                flags,
            )
        })
        .map(drop)
        .map_err(|e| FsError::io("setxattr", e))
    }

    pub fn removexattr(&self, ino: u64, name: &OsStr) -> FsResult<()> {
        let (i, _fd, c) = self.xattr_path(ino)?;
        if self.is_sidecar_inode(&i) {
            return Err(FsError::ReadOnlySidecar(ino.to_string()));
        }
        let n = sys::cstr(name).map_err(|e| FsError::io("removexattr", e))?;
        // SAFETY: `c` (naming `_fd`, held open) and `n` are NUL-terminated CStrings alive for
        // the call; removexattr writes no memory of ours.
        sys::cvt(unsafe { libc::removexattr(c.as_ptr(), n.as_ptr()) })
            .map(drop)
            .map_err(|e| FsError::io("removexattr", e))
    }
}
