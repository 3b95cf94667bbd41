//! Errors of the filesystem core, and [`ToErrno`]: how any error that reaches a FUSE reply
//! answers with an errno, and how loud the log line of that failure is.
//!
//! Each layer keeps its own enum ([`FsError`] here, [`MutationError`] for the mutation seam,
//! `UriError` for names, `OpsError` for the locked operations behind the seam) and implements
//! [`ToErrno`] once: an error that wraps another asks the inner one, so the errno of each
//! failure is decided in exactly one place, by the error that knows what happened.

use std::io;

use thiserror::Error;
use tracing::Level;

use crate::fs::mutations::MutationError;
use crate::uri::UriError;

/// An error that can answer a FUSE request.
pub trait ToErrno: std::error::Error {
    /// The errno the kernel hands back to the program.
    fn errno(&self) -> i32;

    /// How loud the log line of a failure with this error is. Outcomes a program provokes in
    /// normal use (a missing name, a full directory) are debug; real faults are warnings.
    fn level(&self) -> Level {
        level_of(self.errno())
    }

    /// The disk (or a quota) is full: what the reserve frees room for, and what a job waits
    /// out instead of failing.
    fn is_disk_full(&self) -> bool {
        matches!(self.errno(), libc::ENOSPC | libc::EDQUOT)
    }
}

/// The level of a failure that answers `errno`, when the error knows nothing more (damage
/// is louder: see the stores' errors).
pub fn level_of(errno: i32) -> Level {
    match errno {
        // The machine or its disk failed the request: someone should look.
        libc::EIO
        | libc::ENOSPC
        | libc::EDQUOT
        | libc::ENOMEM
        | libc::EMFILE
        | libc::ENFILE
        | libc::EUCLEAN
        | libc::EFAULT => Level::WARN,
        // A lock held past the lock timeout: not a fault, but contention worth seeing.
        libc::EBUSY => Level::INFO,
        // Everything else answers what the program asked (ENOENT, EEXIST, ENOTEMPTY, EPERM,
        // ESTALE, ...): its own business.
        _ => Level::DEBUG,
    }
}

/// An error from a syscall carries its errno; one without (a custom error) is EIO.
impl ToErrno for io::Error {
    fn errno(&self) -> i32 {
        self.raw_os_error().unwrap_or(libc::EIO)
    }
}

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
            | UriError::NoSession(_) => libc::EINVAL,
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
        let busy = FsError::from(MutationError::Busy {
            path: "resources/a".into(),
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
