//! Export file handles: `name_to_handle_at` and `open_by_handle_at`, which neither rustix nor
//! nix offers, so the two `libc` calls (and their `unsafe`) live here.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

/// `struct file_handle` with room for the largest handle the kernel hands out.
#[repr(C)]
pub struct RawHandle {
    handle_bytes: libc::c_uint,
    handle_type: libc::c_int,
    f_handle: [u8; libc::MAX_HANDLE_SZ as usize],
}

impl RawHandle {
    fn empty() -> Self {
        RawHandle {
            handle_bytes: libc::MAX_HANDLE_SZ as libc::c_uint,
            handle_type: 0,
            f_handle: [0; libc::MAX_HANDLE_SZ as usize],
        }
    }

    /// A handle of type `kind` holding `bytes` (`EINVAL` when too long for any handle).
    pub fn new(kind: i32, bytes: &[u8]) -> io::Result<Self> {
        let mut raw = RawHandle::empty();
        raw.f_handle
            .get_mut(..bytes.len())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?
            .copy_from_slice(bytes);
        raw.handle_bytes = bytes.len() as libc::c_uint;
        raw.handle_type = kind;
        Ok(raw)
    }

    /// The handle's type, which the filesystem needs with its bytes.
    pub fn kind(&self) -> i32 {
        self.handle_type
    }

    /// The opaque bytes the filesystem finds the inode by.
    pub fn bytes(&self) -> &[u8] {
        let len = (self.handle_bytes as usize).min(self.f_handle.len());
        &self.f_handle[..len]
    }
}

/// The handle of the file `fd` refers to (any descriptor, `O_PATH` included) and the id of the
/// mount it was reached through. `EOPNOTSUPP` when the filesystem can't export handles.
pub fn name_to_handle_at(fd: impl AsFd) -> io::Result<(RawHandle, i32)> {
    let mut raw = RawHandle::empty();
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `raw` is a repr(C) `struct file_handle` whose handle_bytes says how much room
    // f_handle has (MAX_HANDLE_SZ), so the kernel writes within it; `mount_id` is a live
    // c_int; the empty path is a NUL-terminated literal; `fd` is borrowed, so open, for the
    // call. Nothing is kept.
    let r = unsafe {
        libc::name_to_handle_at(
            fd.as_fd().as_raw_fd(),
            c"".as_ptr(),
            (&mut raw as *mut RawHandle).cast(),
            &mut mount_id,
            libc::AT_EMPTY_PATH,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((raw, mount_id))
}

/// Open the inode `handle` names as `O_PATH` (directories and symlinks alike; a handle never
/// follows a link), through `mount_fd`: a descriptor on the same mount, not `O_PATH`. Needs
/// CAP_DAC_READ_SEARCH (EPERM without); ESTALE once the inode is gone.
pub fn open_by_handle_at(mount_fd: impl AsFd, handle: &RawHandle) -> io::Result<OwnedFd> {
    // SAFETY: `handle` is a repr(C) `struct file_handle` whose handle_bytes is no more than its
    // f_handle array holds (RawHandle::new checks it, the kernel filled the others); the kernel
    // only reads it, during the call; `mount_fd` is borrowed, so open, for the call.
    let fd = unsafe {
        libc::open_by_handle_at(
            mount_fd.as_fd().as_raw_fd(),
            (handle as *const RawHandle).cast_mut().cast(),
            libc::O_PATH | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: open_by_handle_at succeeded, so `fd` is a new descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
