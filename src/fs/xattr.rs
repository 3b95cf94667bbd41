//! Extended attributes of the core: metadata of the backing file, never of a sidecar.

use std::ffi::OsStr;

use super::{FsError, FsResult, VikingFs};
use crate::sys;

/// A reply of `size` bytes at most from `call` into a buffer; `size` 0 asks for the length
/// only (answered as that many bytes, which the adapter turns into a size reply).
fn sized(
    size: u32,
    call: impl FnOnce(&mut [u8]) -> std::io::Result<usize>,
) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; size as usize];
    let n = call(&mut buf)?;
    if size == 0 {
        return Ok(vec![0u8; n]);
    }
    buf.truncate(n);
    Ok(buf)
}

impl VikingFs {
    /// getxattr; `size` 0 asks for the length only.
    pub fn getxattr(&self, ino: u64, name: &OsStr, size: u32) -> FsResult<Vec<u8>> {
        if super::past::is_past(ino) {
            // The past keeps content, owner and mode; no extended attributes.
            let none = std::io::Error::from_raw_os_error(libc::ENODATA);
            return Err(FsError::io("getxattr", none));
        }
        let fd = self.inodes.get(ino)?.fd()?;
        sized(size, |buf| sys::getxattr(&fd, name, buf)).map_err(|e| FsError::io("getxattr", e))
    }

    pub fn listxattr(&self, ino: u64, size: u32) -> FsResult<Vec<u8>> {
        if super::past::is_past(ino) {
            return Ok(Vec::new());
        }
        let fd = self.inodes.get(ino)?.fd()?;
        sized(size, |buf| sys::listxattr(&fd, buf)).map_err(|e| FsError::io("listxattr", e))
    }

    /// Extended attributes are metadata of the file, not content: set directly (sidecars
    /// excepted), like chmod's times they carry no namespace change.
    pub fn setxattr(&self, ino: u64, name: &OsStr, value: &[u8], flags: i32) -> FsResult<()> {
        self.not_past(ino)?;
        let inode = self.inodes.get(ino)?;
        if self.is_sidecar_inode(&inode) {
            return Err(FsError::ReadOnlySidecar(ino.to_string()));
        }
        sys::setxattr(inode.fd()?, name, value, flags).map_err(|e| FsError::io("setxattr", e))
    }

    pub fn removexattr(&self, ino: u64, name: &OsStr) -> FsResult<()> {
        self.not_past(ino)?;
        let inode = self.inodes.get(ino)?;
        if self.is_sidecar_inode(&inode) {
            return Err(FsError::ReadOnlySidecar(ino.to_string()));
        }
        sys::removexattr(inode.fd()?, name).map_err(|e| FsError::io("removexattr", e))
    }
}
