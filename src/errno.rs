//! [`ToErrno`]: how any error that reaches a FUSE reply (or a face that speaks errno) answers
//! with an errno, and how loud the log line of that failure is. A leaf: the filesystem core,
//! the locked operations and the stores implement it without importing one another.

use std::io;

use tracing::Level;

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
