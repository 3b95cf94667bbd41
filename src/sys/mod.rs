//! The system calls vikingfs makes beyond std, in one place, over `rustix`: safe wrappers that
//! return `io::Result`, so that no other module calls `libc` (its constants aside) or holds an
//! `unsafe` block for a system call.
//!
//! - `at`: one call on a name relative to a directory descriptor (`openat`, `openat2` beneath
//!   it with no symlink, `fstatat`, `mkdirat`, `unlinkat`, `renameat2`, `linkat`,
//!   `symlinkat`, `mknodat`, `fchownat`, `fchmodat`, `utimensat`, `readlinkat`,
//!   `faccessat`), and [`proc_path`] for the calls that only take a path.
//! - `root`: [`DataRoot`], the data root's `O_PATH` descriptor, the walk of a relative path
//!   of PATH_MAX bytes or more in chunks, and the open that follows no symlink and never
//!   leaves the root (`DataRoot::open_nofollow`: what every read for a remote caller uses).
//! - `dir`: reading a directory (`getdents64`).
//! - `file`: calls on an open file: allocation, copies, seeks, `flock`, `statvfs`, xattrs.
//! - `handle`: export file handles (`name_to_handle_at`, `open_by_handle_at`).
//! - `process`: the process's own state: ids, umask, limits, priority, signals, sessions.
//! - `mount`: `mount(2)` and `umount2(2)`.
//! - `mounts`: which mount a path is on (`/proc/self/mountinfo`, matched by device).
//! - `open`: [`open_regular`], the one opener of the daemon's own reads: a regular file only,
//!   never a FIFO, socket or device, never through a final symlink.
//! - `stat`: what a `stat` says ([`Stat`]) and the timestamps `utimensat` takes.
//!
//! It imports nothing from the rest of the crate.

mod at;
mod dir;
mod file;
mod handle;
mod mount;
mod mounts;
mod open;
mod process;
mod root;
mod stat;

pub use at::*;
pub use dir::*;
pub use file::*;
pub use handle::*;
pub use mount::*;
pub use mounts::*;
pub use open::*;
pub use process::*;
pub use root::*;
pub use stat::*;

pub use rustix::fs::{FileType, FlockOperation, OFlags, RenameFlags, StatVfs, CWD};
pub use rustix::io::Errno;
pub use rustix::mount::{MountFlags, UnmountFlags};

/// Longest path the kernel takes, its terminating NUL included.
pub const PATH_MAX: usize = libc::PATH_MAX as usize;

/// The flags a descriptor from the kernel's interface (a FUSE request's `open` flags) means.
/// Every bit is kept, known to rustix or not: the kernel judges them as it did.
pub fn oflags(raw: i32) -> OFlags {
    OFlags::from_bits_retain(raw as u32)
}
