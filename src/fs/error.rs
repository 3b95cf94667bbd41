//! Errors of the filesystem core, each answering with an errno through [`ToErrno`]
//! ([`crate::errno`]).
//!
//! Each layer keeps its own enum ([`FsError`] here, [`MutationError`] for the mutation seam,
//! `UriError` for names, `OpsError` for the locked operations behind the seam) and implements
//! [`ToErrno`] once: an error that wraps another asks the inner one, so the errno of each
//! failure is decided in exactly one place, by the error that knows what happened.

use std::io;

use thiserror::Error;
use tracing::Level;

use crate::errno::{level_of, ToErrno};
use crate::fs::mutations::MutationError;
use crate::uri::UriError;

/// A name the namespace refuses.
impl ToErrno for UriError {
    fn errno(&self) -> i32 {
        match self {
            UriError::NameTooLong(_) => libc::ENAMETOOLONG,
            UriError::InternalName { .. } => libc::EPERM,
            UriError::UnknownScope { .. } => libc::ENOENT,
            UriError::NotViking(_)
            | UriError::DotComponent(_)
            | UriError::Nul(_)
            | UriError::EmptyComponent(_)
            | UriError::NoSession(_)
            | UriError::NotForResources(_)
            | UriError::NotASkill(_) => libc::EINVAL,
        }
    }
}

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
    #[error("the past under .history/ is read-only: `vikingfs undo PATH --at T` restores it")]
    ReadOnlyPast,
    #[error("only the scopes resources, user and agent live at the root")]
    RootIsFixed,
    #[error("inode {0} is not a directory")]
    NotADirectory(u64),
    /// The inode's last name was removed while it was still open or cached.
    #[error("inode {0} has no name left")]
    Unlinked(u64),
    #[error("invalid name")]
    Name(#[from] UriError),
    #[error("{0}")]
    Invalid(&'static str),
    #[error(transparent)]
    Mutation(#[from] MutationError),
    #[error("{op}")]
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
}

impl ToErrno for FsError {
    fn errno(&self) -> i32 {
        match self {
            // The kernel retries the path walk once with revalidation on ESTALE: a name that
            // now leads to another file gets looked up again.
            FsError::UnknownInode(_) | FsError::Stale(_) => libc::ESTALE,
            FsError::UnknownHandle(_) => libc::EBADF,
            FsError::Hidden(_) | FsError::Unlinked(_) => libc::ENOENT,
            FsError::InternalName(_) | FsError::RootIsFixed => libc::EPERM,
            FsError::ReadOnlySidecar(_) => libc::EACCES,
            FsError::ReadOnlyPast => libc::EROFS,
            FsError::NotADirectory(_) => libc::ENOTDIR,
            FsError::Invalid(_) => libc::EINVAL,
            FsError::Name(e) => e.errno(),
            FsError::Mutation(e) => e.errno(),
            FsError::Io { source, .. } => source.errno(),
        }
    }

    fn level(&self) -> Level {
        match self {
            FsError::Mutation(e) => e.level(),
            _ => level_of(self.errno()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_maps_each_kind() {
        let busy = FsError::from(MutationError::Io {
            op: "lock",
            path: "resources/a".into(),
            source: io::Error::from_raw_os_error(libc::EBUSY),
        });
        assert_eq!(busy.errno(), libc::EBUSY);
        assert_eq!(busy.level(), Level::INFO);
        let nf = FsError::io("lookup", io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(nf.errno(), libc::ENOENT);
        assert_eq!(nf.level(), Level::DEBUG);
        let other = FsError::io("read", io::Error::other("disk on fire"));
        assert_eq!(other.errno(), libc::EIO);
        assert_eq!(other.level(), Level::WARN);
        let full = FsError::io("write", io::Error::from_raw_os_error(libc::ENOSPC));
        assert!(full.is_disk_full());
        assert_eq!(full.level(), Level::WARN);
        assert_eq!(
            FsError::Name(UriError::NameTooLong("x".into())).errno(),
            libc::ENAMETOOLONG
        );
        assert_eq!(FsError::ReadOnlySidecar("a".into()).errno(), libc::EACCES);
        assert_eq!(FsError::InternalName("a".into()).errno(), libc::EPERM);
        assert_eq!(FsError::Hidden("a".into()).errno(), libc::ENOENT);
        assert_eq!(FsError::Unlinked(7).errno(), libc::ENOENT);
        assert_eq!(FsError::NotADirectory(7).errno(), libc::ENOTDIR);
        assert_eq!(FsError::Stale(7).errno(), libc::ESTALE);
        assert_eq!(FsError::Stale(7).level(), Level::DEBUG);
    }
}
