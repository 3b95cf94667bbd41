//! Export file handles (`name_to_handle_at`/`open_by_handle_at`): a name for a backing inode
//! that needs no open descriptor and that the filesystem refuses (ESTALE) once the inode is
//! gone, even when its number has been given to a new file — the handle carries a generation.
//!
//! The inode table keeps one per inode so it can close the inode's O_PATH descriptor when
//! cold and reopen it on demand, as virtiofsd does with `--inode-file-handles`.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// The opaque bytes the backing filesystem uses to find an inode again, plus its type.
#[derive(Clone, PartialEq, Eq)]
pub struct ExportHandle {
    kind: libc::c_int,
    bytes: Bytes,
}

/// A handle's bytes: inline up to [`INLINE`] (ext4 and xfs hand out 8 to 16), so that the
/// inode table's hundred thousand handles are not as many small heap blocks.
#[derive(Clone, PartialEq, Eq)]
enum Bytes {
    Inline { len: u8, buf: [u8; INLINE] },
    Heap(Box<[u8]>),
}

const INLINE: usize = 20;

impl Bytes {
    fn new(b: &[u8]) -> Bytes {
        if b.len() <= INLINE {
            let mut buf = [0; INLINE];
            buf[..b.len()].copy_from_slice(b);
            Bytes::Inline {
                len: b.len() as u8,
                buf,
            }
        } else {
            Bytes::Heap(b.into())
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Inline { len, buf } => &buf[..*len as usize],
            Bytes::Heap(b) => b,
        }
    }
}

impl std::fmt::Debug for ExportHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ExportHandle({}:{})",
            self.kind,
            hex::encode(self.bytes.as_slice())
        )
    }
}

/// `struct file_handle` with room for the largest handle the kernel hands out.
#[repr(C)]
struct RawHandle {
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
}

impl ExportHandle {
    /// The handle of the file `fd` refers to (any descriptor, O_PATH included) and the id of
    /// the mount it was reached through. Fails with EOPNOTSUPP when the backing filesystem
    /// can't export handles.
    pub fn of(fd: RawFd) -> io::Result<(ExportHandle, i32)> {
        let mut raw = RawHandle::empty();
        let mut mount_id: libc::c_int = 0;
        // SAFETY: `raw` is a repr(C) `struct file_handle` whose handle_bytes says how much
        // room f_handle has (MAX_HANDLE_SZ), so the kernel writes within it; `mount_id` is a
        // live c_int; the empty path is a NUL-terminated literal. Nothing is kept.
        let r = unsafe {
            libc::name_to_handle_at(
                fd,
                c"".as_ptr(),
                (&mut raw as *mut RawHandle).cast(),
                &mut mount_id,
                libc::AT_EMPTY_PATH,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let len = (raw.handle_bytes as usize).min(raw.f_handle.len());
        Ok((
            ExportHandle {
                kind: raw.handle_type,
                bytes: Bytes::new(&raw.f_handle[..len]),
            },
            mount_id,
        ))
    }

    /// Open the inode again as O_PATH, through `mount_fd` (a descriptor on the same mount,
    /// not O_PATH). Needs CAP_DAC_READ_SEARCH (EPERM without); ESTALE once the inode is gone.
    pub fn open(&self, mount_fd: RawFd) -> io::Result<OwnedFd> {
        let mut raw = RawHandle::empty();
        let bytes = self.bytes.as_slice();
        raw.handle_bytes = bytes.len() as libc::c_uint;
        raw.handle_type = self.kind;
        raw.f_handle[..bytes.len()].copy_from_slice(bytes);
        // O_PATH opens symlinks and directories alike; a handle never follows a link.
        // SAFETY: `raw` is a repr(C) `struct file_handle` filled above, handle_bytes no more
        // than the f_handle array holds; the kernel only reads it during the call.
        let fd = unsafe {
            libc::open_by_handle_at(
                mount_fd,
                (&mut raw as *mut RawHandle).cast(),
                libc::O_PATH | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: open_by_handle_at succeeded, so `fd` is a new descriptor nobody else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}
