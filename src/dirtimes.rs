//! Directory times as the mount shows them: the daemon's own traces left out.
//!
//! The lock protocol places and removes lock files beside what it locks (`.exact.ovlock.*`
//! in a file's directory, `.path.ovlock` inside a directory), and the workers replace the
//! hidden summaries of a directory in it. Each of these moves the directory's mtime and ctime
//! on disk, though no entry a program can list changed; pjdfstest (link/00) and xfstests
//! (generic/003) check that a chmod of a file leaves its directory's times alone, and `make`,
//! rsync and backup tools read a directory's mtime as "its entries changed". A ctime cannot be
//! set back, so the daemon reports instead the times of the last change it did not make for
//! itself.
//!
//! Each such change runs in [`quietly`], serialised with the others in the same directory:
//! the directory's times are read before and after it. mtime and ctime are judged apart:
//! one that is still what the previous quiet change left stays shown as it was; one that
//! moved since was moved by something else, and its value before this change is the one to
//! show (a chmod of the directory moves its ctime alone). [`shown`] puts the shown times in a
//! stat of the directory for as long as the real ones are those the last quiet change left;
//! once both moved, the real times show and the record is dropped.
//!
//! Invariants:
//! - A change of a directory's entries through the mount always shows: the mount calls
//!   [`changed`] after making one, which drops the record (serialised with quiet changes, so
//!   one that landed inside a quiet change's window is not taken for part of it). Changes
//!   from other processes show unless they land inside a quiet change's window, a few
//!   microseconds wide.
//! - Shown times are times the directory really had: never invented, never later than its
//!   real times.
//! - Kept in memory only, at most [`MAX_RECORDS`] directories: after a restart, or for a
//!   directory whose record was dropped, the real times show (lock traces included), which is
//!   what a plain filesystem under OpenViking would show.

use std::collections::HashMap;
use std::ffi::CStr;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::LazyLock;

use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::sys::{self, Stat, Time};

/// Directories whose shown times are kept, at most (a record is about 80 bytes).
pub const MAX_RECORDS: usize = SHARDS * PER_SHARD;
const SHARDS: usize = 64;
const PER_SHARD: usize = 4096;

/// A directory's mtime and ctime, (seconds, nanoseconds) each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Times {
    mtime: Time,
    ctime: Time,
}

impl Times {
    fn of(st: &Stat) -> Times {
        Times {
            mtime: st.mtime(),
            ctime: st.ctime(),
        }
    }

    /// What to show for a directory whose real times are `self`, given its record: each of
    /// mtime and ctime is the shown one while it is still what the last quiet change left, and
    /// the real one once something else moved it (a chmod of the directory moves its ctime
    /// alone, and its mtime still shows the last change of its entries).
    fn seen_through(self, r: &Record) -> Times {
        Times {
            mtime: if self.mtime == r.after.mtime {
                r.shown.mtime
            } else {
                self.mtime
            },
            ctime: if self.ctime == r.after.ctime {
                r.shown.ctime
            } else {
                self.ctime
            },
        }
    }

    fn put(self, st: &mut Stat) {
        st.set_mtime(self.mtime);
        st.set_ctime(self.ctime);
    }
}

/// What one directory shows, and the real times for which it does.
#[derive(Debug, Clone, Copy)]
struct Record {
    /// The directory's times when the last quiet change was done.
    after: Times,
    /// The times of its last change that was not quiet.
    shown: Times,
}

type Key = (u64, u64);

struct Records {
    shards: Vec<Mutex<HashMap<Key, Record>>>,
}

impl Records {
    /// The shard of `key`, locked. A std mutex, not parking_lot's: a quiet change holds it
    /// across a system call, and a contender (a stat of the directory on a FUSE thread while
    /// the settler removes lock files in it) must sleep until it is free, not spin through
    /// `sched_yield`, which on a busy machine hands its CPU to whatever else runs.
    fn lock(&self, key: Key) -> MutexGuard<'_, HashMap<Key, Record>> {
        let h = key.1 ^ key.0.rotate_left(32);
        self.shards[(h % SHARDS as u64) as usize]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

static RECORDS: LazyLock<Records> = LazyLock::new(|| Records {
    shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
});

/// Whether the mount lists the summaries (`-o show_summaries`): then their replacement is a
/// change of the directory's entries like any other, and not quiet.
static SUMMARIES_LISTED: AtomicBool = AtomicBool::new(false);

/// Tell the module what the mount lists (set once at mount).
pub fn set_summaries_listed(listed: bool) {
    SUMMARIES_LISTED.store(listed, Ordering::Relaxed);
}

pub fn summaries_listed() -> bool {
    SUMMARIES_LISTED.load(Ordering::Relaxed)
}

/// The directory holding `rel` (relative to `dir`): its part before the last `/`.
fn parent_of(rel: &CStr) -> &[u8] {
    let b = rel.to_bytes();
    match b.iter().rposition(|&c| c == b'/') {
        Some(0) => b"/",
        Some(i) => &b[..i],
        None => b".",
    }
}

/// Run `change`, which the daemon makes for itself to the directory holding `rel` (relative to
/// `dir`; a lock file placed or removed, a hidden summary replaced), so that the directory's
/// shown times stay those of its last other change. Whatever `change` returns is returned;
/// the bookkeeping never fails it.
pub fn quietly<T>(
    dir: BorrowedFd<'_>,
    rel: &CStr,
    change: impl FnOnce() -> io::Result<T>,
) -> io::Result<T> {
    let parent = parent_of(rel);
    let stat = || sys::lstatat(dir, parent);
    // The shard to wait in is the directory's: guessed from the last quiet change this
    // thread made through the same descriptor and name (`rm -rf` is one lock file after
    // another in one directory), else read. The read under the shard's lock proves the
    // guess; a wrong one (the name now another directory) is read again and taken anew.
    let mut key = match last_key(dir, parent) {
        Some(k) => k,
        None => match stat() {
            Ok(st) => st.key(),
            Err(_) => return change(),
        },
    };
    let mut records = RECORDS.lock(key);
    // Read again now the directory's quiet changes wait for us: a first read may be older
    // than one that just finished.
    let mut now = stat();
    if let Ok(st) = &now {
        if st.key() != key {
            drop(records);
            key = st.key();
            records = RECORDS.lock(key);
            now = stat();
        }
    }
    let before = match now {
        Ok(st) if st.key() == key => Times::of(&st),
        _ => {
            drop(records);
            forget_key();
            return change();
        }
    };
    remember_key(dir, parent, key);
    let shown = match records.get(&key) {
        Some(r) => before.seen_through(r),
        None => before,
    };
    let result = change();
    match stat() {
        Ok(st) if st.key() == key && Times::of(&st) != shown => {
            if records.len() >= PER_SHARD && !records.contains_key(&key) {
                // Full: these directories show their real times from now on.
                records.clear();
            }
            records.insert(
                key,
                Record {
                    after: Times::of(&st),
                    shown,
                },
            );
        }
        _ => {
            records.remove(&key);
        }
    }
    result
}

thread_local! {
    /// The directory of this thread's last quiet change: descriptor, name and key.
    static LAST: std::cell::RefCell<Option<(i32, Vec<u8>, Key)>> =
        const { std::cell::RefCell::new(None) };
}

fn last_key(dir: BorrowedFd<'_>, parent: &[u8]) -> Option<Key> {
    use std::os::fd::AsRawFd;
    LAST.with_borrow(|l| {
        l.as_ref()
            .filter(|(fd, p, _)| *fd == dir.as_raw_fd() && p == parent)
            .map(|l| l.2)
    })
}

fn remember_key(dir: BorrowedFd<'_>, parent: &[u8], key: Key) {
    use std::os::fd::AsRawFd;
    LAST.with_borrow_mut(|l| match l {
        Some((fd, p, k)) if *fd == dir.as_raw_fd() && p == parent => *k = key,
        _ => *l = Some((dir.as_raw_fd(), parent.to_vec(), key)),
    });
}

fn forget_key() {
    LAST.with_borrow_mut(|l| *l = None);
}

/// Put the times to show into `st`, a stat of a directory (anything else is left alone).
pub fn shown(st: &mut Stat) {
    if !st.is_dir() {
        return;
    }
    let key = st.key();
    let mut records = RECORDS.lock(key);
    let Some(r) = records.get(&key) else {
        return;
    };
    let real = Times::of(st);
    let show = real.seen_through(r);
    if show == real {
        records.remove(&key);
    } else {
        show.put(st);
    }
}

/// The directory `key` (device, inode) had its entries changed through the mount: its real
/// times show from now on.
pub fn changed(key: (u64, u64)) {
    RECORDS.lock(key).remove(&key);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::time::Duration;

    fn stat(p: &std::path::Path) -> Stat {
        sys::lstatat(sys::CWD, p).unwrap()
    }

    fn tick() {
        std::thread::sleep(Duration::from_millis(20));
    }

    #[test]
    fn quiet_changes_leave_the_shown_times_and_others_move_them() {
        let d = tempfile::tempdir().unwrap();
        let root = sys::open_path_dir(d.path()).unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        let sub = d.path().join("sub");
        let shown_now = || {
            let mut st = stat(&sub);
            shown(&mut st);
            Times::of(&st)
        };
        let start = Times::of(&stat(&sub));
        tick();
        let lock = sub.join("lock");
        quietly(root.as_fd(), c"sub/lock", || std::fs::write(&lock, "t")).unwrap();
        assert_ne!(Times::of(&stat(&sub)), start, "the real times moved");
        assert_eq!(shown_now(), start);
        tick();
        quietly(root.as_fd(), c"sub/lock", || std::fs::remove_file(&lock)).unwrap();
        assert_eq!(shown_now(), start, "a second quiet change keeps them");

        // Someone else's change shows at once, and stays shown across later quiet changes.
        tick();
        std::fs::write(sub.join("visible"), "x").unwrap();
        let visible = Times::of(&stat(&sub));
        assert_eq!(shown_now(), visible);
        tick();
        quietly(root.as_fd(), c"sub/lock", || std::fs::write(&lock, "t")).unwrap();
        assert_eq!(shown_now(), visible);

        // A change inside a quiet change's window, then `changed`: shown, not absorbed.
        tick();
        quietly(root.as_fd(), c"sub/lock", || {
            std::fs::write(sub.join("inside"), "x")?;
            std::fs::remove_file(&lock)
        })
        .unwrap();
        assert_eq!(shown_now(), visible, "absorbed until the mount says so");
        let st = stat(&sub);
        changed(st.key());
        assert_eq!(shown_now(), Times::of(&st));
        assert_ne!(Times::of(&st), visible);
    }

    #[test]
    fn files_and_unknown_directories_show_their_real_times() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, "x").unwrap();
        let mut st = stat(&f);
        let real = Times::of(&st);
        shown(&mut st);
        assert_eq!(Times::of(&st), real);
        let mut st = stat(d.path());
        let real = Times::of(&st);
        shown(&mut st);
        assert_eq!(Times::of(&st), real);
    }

    /// The directory is guessed from this thread's last quiet change through the same name:
    /// when another directory has taken that name since, its own times are the ones kept.
    #[test]
    fn a_name_that_now_holds_another_directory_is_judged_as_that_directory() {
        let d = tempfile::tempdir().unwrap();
        let root = sys::open_path_dir(d.path()).unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        let shown_of = |p: &std::path::Path| {
            let mut st = stat(p);
            shown(&mut st);
            Times::of(&st)
        };
        let a_start = Times::of(&stat(&a));
        tick();
        quietly(root.as_fd(), c"a/lock", || {
            std::fs::write(a.join("lock"), "t")
        })
        .unwrap();
        assert_eq!(shown_of(&a), a_start);
        // b takes a's name (a moves aside), then a quiet change through the same name.
        std::fs::rename(&a, d.path().join("old")).unwrap();
        std::fs::rename(&b, &a).unwrap();
        let b_start = Times::of(&stat(&a));
        tick();
        quietly(root.as_fd(), c"a/lock", || {
            std::fs::write(a.join("lock"), "t")
        })
        .unwrap();
        assert_ne!(Times::of(&stat(&a)), b_start, "the real times moved");
        assert_eq!(shown_of(&a), b_start, "b's own times before the change");
        // (Its move changed its ctime: that shows; its mtime is still the one kept.)
        assert_eq!(
            shown_of(&d.path().join("old")).mtime,
            a_start.mtime,
            "a's record kept"
        );
    }

    #[test]
    fn parent_of_names_the_directory_part() {
        assert_eq!(parent_of(c"a/b/c"), b"a/b");
        assert_eq!(parent_of(c"c"), b".");
        assert_eq!(parent_of(c"/c"), b"/");
    }
}
