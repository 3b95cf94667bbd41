//! `mount(2)` and `umount2(2)`.

use std::ffi::CStr;
use std::io;
use std::path::Path;

use rustix::mount::{MountFlags, UnmountFlags};

/// Mount `source` (of type `fstype`, with the filesystem's options `data`) at `target`.
pub fn mount(
    source: &Path,
    target: &Path,
    fstype: &CStr,
    flags: MountFlags,
    data: &CStr,
) -> io::Result<()> {
    Ok(rustix::mount::mount(source, target, fstype, flags, data)?)
}

/// Change the flags of the live mount at `target` (MS_REMOUNT). No filesystem options are
/// passed (an empty string, which the kernel parses as none).
pub fn remount(target: &Path, flags: MountFlags) -> io::Result<()> {
    Ok(rustix::mount::mount_remount(target, flags, c"")?)
}

/// `umount2(target, flags)`.
pub fn unmount(target: &Path, flags: UnmountFlags) -> io::Result<()> {
    Ok(rustix::mount::unmount(target, flags)?)
}
