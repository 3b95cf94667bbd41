//! Export file handles (`name_to_handle_at`/`open_by_handle_at`): a name for a backing inode
//! that needs no open descriptor and that the filesystem refuses (ESTALE) once the inode is
//! gone, even when its number has been given to a new file — the handle carries a generation.
//!
//! The inode table keeps one per inode so it can close the inode's O_PATH descriptor when
//! cold and reopen it on demand, as virtiofsd does with `--inode-file-handles`.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use crate::sys;

/// The opaque bytes the backing filesystem uses to find an inode again, plus its type.
#[derive(Clone, PartialEq, Eq)]
pub struct ExportHandle {
    kind: i32,
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

impl ExportHandle {
    /// The handle of the file `fd` refers to (any descriptor, O_PATH included) and the id of
    /// the mount it was reached through. Fails with EOPNOTSUPP when the backing filesystem
    /// can't export handles.
    pub fn of(fd: impl AsFd) -> io::Result<(ExportHandle, i32)> {
        let (raw, mount_id) = sys::name_to_handle_at(fd)?;
        Ok((
            ExportHandle {
                kind: raw.kind(),
                bytes: Bytes::new(raw.bytes()),
            },
            mount_id,
        ))
    }

    /// Open the inode again as O_PATH, through `mount_fd` (a descriptor on the same mount,
    /// not O_PATH). Needs CAP_DAC_READ_SEARCH (EPERM without); ESTALE once the inode is gone.
    pub fn open(&self, mount_fd: impl AsFd) -> io::Result<OwnedFd> {
        let raw = sys::RawHandle::new(self.kind, self.bytes.as_slice())?;
        sys::open_by_handle_at(mount_fd, &raw)
    }
}
