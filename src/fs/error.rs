//! Errors of the filesystem core and the one table that maps every error below the FUSE
//! adapter to an errno.
//!
//! Each layer keeps its own enum ([`FsError`] here, [`MutationError`] for the mutation seam,
//! `UriError` for names); [`FsError::errno`] is the only place an errno is chosen.

use std::io;

use thiserror::Error;

use crate::fs::mutations::MutationError;
use crate::uri::UriError;

/// Why a filesystem request failed.
#[derive(Debug, Error)]
pub enum FsError {
    #[error("no such inode {0}")]
    UnknownInode(u64),
    #[error("inode {0} is gone from the backing filesystem")]
    Stale(u64),
    #[error("no such file handle {0}")]
    UnknownHandle(u64),
    #[error("{0:?} is not visible in the namespace")]
    Hidden(String),
    #[error("{0:?} is an internal name and cannot be created")]
    InternalName(String),
    #[error("{0:?} is a derived summary and cannot be changed by users")]
    ReadOnlySidecar(String),
    #[error("only the scopes resources, user and agent live at the root")]
    RootIsFixed,
    #[error("invalid name: {0}")]
    Name(#[from] UriError),
    #[error("{0}")]
    Invalid(&'static str),
    #[error(transparent)]
    Mutation(#[from] MutationError),
    #[error("{op}: {source}")]
    Io {
        op: &'static str,
        #[source]
        source: io::Error,
    },
}

pub type FsResult<T> = Result<T, FsError>;

impl FsError {
    pub fn io(op: &'static str, source: io::Error) -> Self {
        FsError::Io { op, source }
    }

    /// The errno the kernel hands back to the program. The single errno table of vikingfs.
    pub fn errno(&self) -> i32 {
        match self {
            // The kernel retries the path walk once with revalidation on ESTALE: a name that
            // now leads to another file gets looked up again.
            FsError::UnknownInode(_) | FsError::Stale(_) => libc::ESTALE,
            FsError::UnknownHandle(_) => libc::EBADF,
            FsError::Hidden(_) => libc::ENOENT,
            FsError::InternalName(_) | FsError::RootIsFixed => libc::EPERM,
            FsError::ReadOnlySidecar(_) => libc::EACCES,
            FsError::Name(e) => match e {
                UriError::NameTooLong(_) => libc::ENAMETOOLONG,
                UriError::InternalName { .. } => libc::EPERM,
                UriError::UnknownScope { .. } => libc::ENOENT,
                _ => libc::EINVAL,
            },
            FsError::Invalid(_) => libc::EINVAL,
            FsError::Mutation(MutationError::Busy { .. }) => libc::EBUSY,
            FsError::Mutation(MutationError::Io { source, .. }) => io_errno(source),
            FsError::Io { source, .. } => io_errno(source),
        }
    }

    /// Errors a program provokes in normal use (a missing file, a full directory): not worth a
    /// warning in the log. Only real I/O failures are.
    pub fn is_expected(&self) -> bool {
        self.errno() != libc::EIO
    }
}

/// The errno of an I/O error; EIO only when the OS gave none (a real I/O failure).
pub fn io_errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_maps_each_kind() {
        let busy = FsError::from(MutationError::Busy {
            path: "resources/a".into(),
        });
        assert_eq!(busy.errno(), libc::EBUSY);
        let nf = FsError::io("lookup", io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(nf.errno(), libc::ENOENT);
        assert!(nf.is_expected());
        let other = FsError::io("read", io::Error::other("disk on fire"));
        assert_eq!(other.errno(), libc::EIO);
        assert!(!other.is_expected());
        assert_eq!(
            FsError::Name(UriError::NameTooLong("x".into())).errno(),
            libc::ENAMETOOLONG
        );
        assert_eq!(FsError::ReadOnlySidecar("a".into()).errno(), libc::EACCES);
        assert_eq!(FsError::InternalName("a".into()).errno(), libc::EPERM);
        assert_eq!(FsError::Hidden("a".into()).errno(), libc::ENOENT);
        assert_eq!(FsError::Stale(7).errno(), libc::ESTALE);
        assert!(FsError::Stale(7).is_expected());
    }
}
