//! Durable file primitives the commit relies on: whole-file replacement by rename (for files
//! nobody appends to), and fsync of a file and of its directory so a step that is recorded as
//! done survives a crash of the machine, not only of the process.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

use super::SessionError;

/// Replace `dest` with `data` atomically and durably ([`crate::fsx::replace`]: a temporary in
/// its directory, fsync, rename, fsync of the directory). Readers see the old or the new
/// content, never a part; an existing file keeps its mode and owner. Creates missing parent
/// directories.
pub fn atomic_write(dest: &Path, data: &[u8]) -> Result<(), SessionError> {
    replace(dest, data, crate::fsx::Durable::Rename)
}

/// [`atomic_write`] without the directory fsync, for advisory content: after a power loss the
/// file may be the old one, but never empty or torn (its data was synced before the rename).
pub fn atomic_write_advisory(dest: &Path, data: &[u8]) -> Result<(), SessionError> {
    replace(dest, data, crate::fsx::Durable::Content)
}

fn replace(dest: &Path, data: &[u8], durable: crate::fsx::Durable) -> Result<(), SessionError> {
    let parent = dest
        .parent()
        .ok_or_else(|| SessionError::io(dest, io::Error::other("no parent directory")))?;
    std::fs::create_dir_all(parent).map_err(|e| SessionError::io(parent, e))?;
    crate::fsx::replace(dest, data, 0o644, durable).map_err(|e| SessionError::io(dest, e))
}

/// fsync a directory, so a rename or create inside it is durable.
pub fn sync_dir(dir: &Path) -> Result<(), SessionError> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| SessionError::io(dir, e))
}

/// Create a directory (and parents) and make its entry durable.
pub fn create_dir_durable(dir: &Path) -> Result<(), SessionError> {
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|e| SessionError::io(dir, e))?;
    if let Some(p) = dir.parent() {
        sync_dir(p)?;
    }
    Ok(())
}

/// The whole file, or `None` when it does not exist.
pub fn read_opt(path: &Path) -> Result<Option<Vec<u8>>, SessionError> {
    match crate::sys::read_file(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(SessionError::io(path, e)),
    }
}

/// Open for appending, creating the file (and its directory) when missing.
pub fn open_append(path: &Path) -> Result<File, SessionError> {
    if let Some(p) = path.parent() {
        create_dir_durable(p)?;
    }
    OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| SessionError::io(path, e))
}

/// SHA-256 of `b`, hex: what a commit records of the bytes it archives and trims, to know them
/// again after a crash.
pub fn sha256_hex(b: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(b))
}
