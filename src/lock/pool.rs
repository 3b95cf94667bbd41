//! Spare lock-file inodes, recycled instead of created and deleted for every lock.
//!
//! Every locked syscall of the mount takes and drops a lock file, and so do the workers'
//! write-backs. Creating one allocates an ext4 inode and removing it frees one; ext4 then
//! skips each recently freed inode on later allocations (`recently_deleted`), so the churn
//! made every create in the workspace — the user's too — scan further and further (most of
//! the daemon's time under `cp -r`). The pool keeps spare lock files in
//! `WORKSPACE/.vikingfs/lockpool/` instead. An acquire writes its token into a spare and
//! hard-links it into place (`linkat(2)`, which fails if any lock file is there — the same
//! exclusive create as before, and the lock file appears with its token, never empty); the
//! release unlinks the lock file's name, and the spare, still linked in the pool, serves the
//! next lock. A link and an unlink change one directory each, where renaming the file in and
//! out of the pool changed two. What other processes see is unchanged: a lock file appears
//! under its name holding a token, and disappears.
//!
//! Why a recycled inode cannot confuse a compare-and-swap ([`super::provider`]): a CAS writer
//! acts only if the file still holds the exact token it judged stale, and tokens are unique
//! (owner and nanosecond time). Only a fresh token of a live owner is released into the pool,
//! which no one judges stale, and a spare is written with a new token before it is placed.
//!
//! A spare is named `{pid}.{seq}`; a process killed with spares leaves them behind, and the
//! next [`Spares::open`] removes those of dead processes. Where linking between the pool and
//! the data directories is not possible (another filesystem), the pool turns itself off and
//! lock files are created and removed as before.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::sys::{self, OFlags};

/// Spares kept at most; more released at once are deleted (rare: as many locks held at once).
const MAX_SPARES: usize = 1024;

/// A lock file out of the namespace, with its open descriptor and the length of what it holds.
struct Spare {
    file: File,
    /// Its name in the pool directory.
    name: CString,
    len: u64,
}

/// The spare lock files of one process.
pub(crate) struct Spares {
    /// The pool directory, open `O_PATH`: spares are named relative to it. `None` when it
    /// could not be made (the pool is then off).
    dir: Option<OwnedFd>,
    enabled: AtomicBool,
    spares: Mutex<Vec<Spare>>,
}

impl Spares {
    /// The pool in `dir` (created if missing); spares of dead processes found there go.
    pub fn open(dir: PathBuf) -> Spares {
        let fd = std::fs::create_dir_all(&dir)
            .and_then(|()| sys::open_path_dir(&dir))
            .ok();
        if let Some(fd) = &fd {
            for name in sys::dir_names(fd).unwrap_or_default() {
                let pid = name
                    .to_str()
                    .and_then(|n| n.split('.').next()?.parse().ok());
                if pid.is_some_and(|p| !sys::pid_alive(p)) {
                    let _ = sys::unlinkat(fd, name.as_os_str());
                }
            }
        }
        Spares {
            enabled: AtomicBool::new(fd.is_some()),
            dir: fd,
            spares: Mutex::new(Vec::new()),
        }
    }

    fn fresh_name() -> CString {
        // One counter for the process: two managers of one process share the pool directory.
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        CString::new(format!("{}.{n}", std::process::id())).expect("no NUL")
    }

    fn disable(&self, why: &io::Error) {
        if self.enabled.swap(false, Ordering::Relaxed) {
            tracing::info!(error = %why, "lock file pool off: creating lock files afresh");
        }
    }

    /// The pool directory, while the pool is on.
    fn dir(&self) -> Option<BorrowedFd<'_>> {
        if !self.enabled.load(Ordering::Relaxed) {
            return None;
        }
        self.dir.as_ref().map(|d| d.as_fd())
    }

    /// Create `target` (a name in directory `dir`) holding `token`, exclusively, from a spare.
    /// Returns the file and the spare's name in the pool, which the lock keeps until
    /// [`Spares::retire`] or [`Spares::forget`]. `Ok(None)`: the pool cannot do it here (off, or
    /// the spare vanished); the caller creates the file itself. Errors are the target's, as an exclusive create reports them
    /// (`AlreadyExists`, `ENOENT`, ...).
    pub fn place(
        &self,
        dir: BorrowedFd<'_>,
        target: &CStr,
        token: &[u8],
    ) -> io::Result<Option<(File, CString)>> {
        let Some(pool) = self.dir() else {
            return Ok(None);
        };
        let popped = self.spares.lock().pop();
        let mut spare = match popped {
            Some(s) => s,
            None => {
                let name = Self::fresh_name();
                let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL;
                let file = match sys::openat(pool, &name, flags, 0o644) {
                    Ok(f) => File::from(f),
                    Err(e) => {
                        self.disable(&e);
                        return Ok(None);
                    }
                };
                Spare { file, name, len: 0 }
            }
        };
        let prepared = (|| {
            spare.file.write_all_at(token, 0)?;
            if spare.len != token.len() as u64 {
                spare.file.set_len(token.len() as u64)?;
                spare.len = token.len() as u64;
            }
            Ok::<_, io::Error>(())
        })();
        if let Err(e) = prepared {
            let _ = sys::unlinkat(pool, &spare.name);
            return Err(e);
        }
        match sys::linkat(pool, &spare.name, dir, target) {
            Ok(()) => Ok(Some((spare.file, spare.name))),
            Err(e) => match e.raw_os_error() {
                Some(libc::EXDEV | libc::EINVAL | libc::ENOSYS | libc::EPERM) => {
                    self.disable(&e);
                    let _ = sys::unlinkat(pool, &spare.name);
                    Ok(None)
                }
                // Missing: the target's directory, or our spare (removed behind our back).
                Some(libc::ENOENT) if sys::lstatat(pool, &spare.name).is_err() => Ok(None),
                _ => {
                    self.spares.lock().push(spare);
                    Err(e)
                }
            },
        }
    }

    /// Release the lock file `name` in `dir` (ours, open as `file`, holding `len` bytes,
    /// placed from the spare `spare`): unlink the name and keep the spare; `file` and `spare`
    /// are taken only then. The caller has established that it is still ours. `Ok(false)`
    /// when the pool does not take it (off, full, or not from the pool): remove it instead,
    /// then [`Spares::forget`] the spare.
    pub fn retire(
        &self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        file: &mut Option<File>,
        spare: &mut Option<CString>,
        len: u64,
    ) -> io::Result<bool> {
        if self.dir().is_none()
            || file.is_none()
            || spare.is_none()
            || self.spares.lock().len() >= MAX_SPARES
        {
            return Ok(false);
        }
        sys::unlinkat(dir, name)?;
        self.spares.lock().push(Spare {
            file: file.take().expect("checked above"),
            name: spare.take().expect("checked above"),
            len,
        });
        Ok(true)
    }

    /// A lock file placed from the spare `name` went some other way (removed by
    /// compare-and-swap, moved away with its directory): drop the spare's pool name too.
    pub fn forget(&self, name: &CStr) {
        if let Some(pool) = &self.dir {
            let _ = sys::unlinkat(pool, name);
        }
    }
}

impl Drop for Spares {
    fn drop(&mut self) {
        let Some(dir) = &self.dir else { return };
        for s in self.spares.get_mut().drain(..) {
            let _ = sys::unlinkat(dir, &s.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(d: &tempfile::TempDir) -> OwnedFd {
        sys::open_path_dir(d.path()).unwrap()
    }

    #[test]
    fn placed_file_holds_the_token_and_is_exclusive_and_recycled() {
        let d = tempfile::tempdir().unwrap();
        let pool = Spares::open(d.path().join("pool"));
        let at = root(&d);
        let target = d.path().join(".path.ovlock");
        let name = c".path.ovlock";
        let (f, spare) = pool
            .place(at.as_fd(), name, b"a:1:E")
            .unwrap()
            .expect("pool on");
        assert_eq!(std::fs::read(&target).unwrap(), b"a:1:E");
        let e = pool.place(at.as_fd(), name, b"b:22:E").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(
            std::fs::read(&target).unwrap(),
            b"a:1:E",
            "a refused place changes nothing"
        );
        use std::os::unix::fs::MetadataExt;
        let ino = f.metadata().unwrap().ino();
        let (mut f, mut spare) = (Some(f), Some(spare));
        assert!(pool
            .retire(at.as_fd(), name, &mut f, &mut spare, 5)
            .unwrap());
        assert!(f.is_none() && spare.is_none(), "the pool took both");
        assert!(!target.exists());
        // Both spares are in the pool now; a shorter token leaves no tail of a longer one.
        let (f, fs) = pool.place(at.as_fd(), name, b"c:3:T").unwrap().unwrap();
        let (g, gs) = pool.place(at.as_fd(), c"x", b"d:4444:E").unwrap().unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"c:3:T");
        assert_eq!(std::fs::read(d.path().join("x")).unwrap(), b"d:4444:E");
        let inos = [f.metadata().unwrap().ino(), g.metadata().unwrap().ino()];
        assert!(inos.contains(&ino), "a released inode is used again");
        // A lock file that goes another way (here: removed by hand) takes its spare's pool
        // name with it once forgotten; a retired one leaves a spare the drop removes.
        std::fs::remove_file(d.path().join("x")).unwrap();
        pool.forget(&gs);
        assert!(pool
            .retire(at.as_fd(), name, &mut Some(f), &mut Some(fs), 5)
            .unwrap());
        drop(g);
        drop(pool);
        assert_eq!(std::fs::read_dir(d.path().join("pool")).unwrap().count(), 0);
    }

    #[test]
    fn missing_directory_is_the_targets_error() {
        let d = tempfile::tempdir().unwrap();
        let pool = Spares::open(d.path().join("pool"));
        let sub = d.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let gone = sys::open_path_dir(&sub).unwrap();
        std::fs::remove_dir(&sub).unwrap();
        let e = pool.place(gone.as_fd(), c"such", b"a:1:E").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(pool
            .place(root(&d).as_fd(), c"ok", b"a:1:E")
            .unwrap()
            .is_some());
    }

    #[test]
    fn spares_of_dead_processes_are_removed_on_open() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("pool");
        std::fs::create_dir_all(&dir).unwrap();
        // A pid above pid_max never names a live process.
        std::fs::write(dir.join("2147483646.0"), b"x").unwrap();
        std::fs::write(dir.join(format!("{}.99", std::process::id())), b"x").unwrap();
        let _pool = Spares::open(dir.clone());
        assert!(!dir.join("2147483646.0").exists());
        assert!(dir.join(format!("{}.99", std::process::id())).exists());
    }
}
