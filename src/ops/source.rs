//! A source as the derived state sees it: its version (what a record was built from), whether
//! a name is a source at all, and its metadata. A leaf of `ops`: every layer uses it.

use std::io;
use std::path::Path;

use super::{OpsError, Result};

/// What a source looked like when it was read: a record built from it carries this, and a
/// job writes back only if the source still has it. rename(2) keeps all three, so an `mv`
/// does not make moved records look stale.
pub fn source_version(meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format_version(meta.ino(), meta.size(), meta.mtime(), meta.mtime_nsec())
}

/// The one format of a source version: `{ino}-{size}-{mtime_ns}` in hex.
fn format_version(ino: u64, size: u64, mtime: i64, mtime_nsec: i64) -> String {
    let mtime_ns = mtime as i128 * 1_000_000_000 + mtime_nsec as i128;
    format!("{ino:x}-{size:x}-{mtime_ns:x}")
}

/// Whether two source versions differ only in the inode number: the same size and the same
/// modification time to the nanosecond, under another inode — a copy (`cp -a`, `rsync -a`,
/// a restore), whose content is the one the record was built from.
pub(crate) fn same_but_inode(a: &str, b: &str) -> bool {
    match (a.split_once('-'), b.split_once('-')) {
        (Some((ia, ra)), Some((ib, rb))) => ia != ib && ra == rb,
        _ => false,
    }
}

/// [`source_version`] from an `lstat` made relative to the data root (the same string).
pub(crate) fn stat_version(st: &crate::sys::Stat) -> String {
    let (mtime, mtime_ns) = st.mtime();
    format_version(st.st_ino, st.st_size as u64, mtime, mtime_ns)
}

/// The metadata of a path without following a final symlink; `None` when it does not exist.
pub(crate) fn stat(path: &Path) -> Result<Option<std::fs::Metadata>> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => Ok(None),
        Err(e) => Err(OpsError::io(path, e)),
    }
}

/// Whether a directory entry is a source file the index covers: not a lock, internal or
/// sidecar name.
pub(crate) fn is_source_name(name: &str) -> bool {
    !crate::uri::is_internal_name(name) && !crate::uri::is_sidecar_name(name)
}
