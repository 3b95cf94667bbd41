//! A process's own append-only file that another process takes over once its owner died (the
//! queue's job spool, the journal's intent spool): the owner holds an exclusive `flock` on it
//! while it lives, and a replay takes a file it can lock.
//!
//! Invariant: a file shows under its own name only once its owner holds the lock. Made under
//! its own name and locked after, a replay could lock it in between (its owner looking dead),
//! find it empty and delete it, and what the owner went on to append would land in a file no
//! replay reads. So it is made as `NAME.new` (a name replays pass over), locked, then renamed.
//! A process that dies between the making and the renaming leaves an empty `NAME.new`, which
//! [`clear_abandoned`] removes once it is a minute old and unlocked.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::sys::{self, FlockOperation};

/// The suffix of a spool file being made (see the module doc).
pub const MAKING: &str = "new";

/// How old an unnamed file must be before a replay removes it: one younger may be between its
/// making and its lock.
const GRACE: Duration = Duration::from_secs(60);

/// Create `dir/name` for appending (and reading), locked by this process, under the module's
/// rule. Returns the file and its path.
pub fn create_locked(dir: &Path, name: &str) -> io::Result<(File, PathBuf)> {
    let path = dir.join(name);
    let making = dir.join(format!("{name}.{MAKING}"));
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .create_new(true)
        .open(&making)?;
    let named = sys::flock(&file, FlockOperation::NonBlockingLockExclusive)
        .and_then(|()| std::fs::rename(&making, &path));
    if let Err(e) = named {
        let _ = std::fs::remove_file(&making);
        return Err(e);
    }
    Ok((file, path))
}

/// Whether `path` is a file [`create_locked`] is making (or a dead process left unnamed).
pub fn is_making(path: &Path) -> bool {
    path.extension() == Some(MAKING.as_ref())
}

/// Remove `path`, a file [`create_locked`] made and never named, when it is older than a
/// minute and unlocked (its process died between the two).
pub fn clear_abandoned(path: &Path) {
    let Ok(file) = File::open(path) else { return };
    let old = file
        .metadata()
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > GRACE));
    if old && sys::flock(&file, FlockOperation::NonBlockingLockExclusive).is_ok() {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file shows under its name only locked; an unnamed one is cleared once stale, never
    /// while young.
    #[test]
    fn named_only_once_locked_and_an_unnamed_one_is_cleared_once_stale() {
        let d = tempfile::tempdir().unwrap();
        let (_f, path) = create_locked(d.path(), "1-a.spool").unwrap();
        let names: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["1-a.spool"]);
        let other = File::open(&path).unwrap();
        assert!(sys::flock(&other, FlockOperation::NonBlockingLockExclusive).is_err());
        let young = d.path().join("1-young.spool.new");
        let stale = d.path().join("1-stale.spool.new");
        std::fs::write(&young, "").unwrap();
        File::create(&stale)
            .unwrap()
            .set_modified(std::time::SystemTime::now() - 2 * GRACE)
            .unwrap();
        for p in [&young, &stale] {
            assert!(is_making(p));
            clear_abandoned(p);
        }
        assert!(young.exists(), "a young one may be about to be locked");
        assert!(!stale.exists(), "a stale one is cleared");
        assert!(!is_making(&path));
    }
}
