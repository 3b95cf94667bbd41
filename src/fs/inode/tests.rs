//! The table without FUSE: a small descriptor budget over many files, files reached again
//! after their descriptor was closed, and numbers reused by new files.

use std::collections::HashSet;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use super::*;
use crate::sys::{self, OFlags};

const BUDGET: usize = 50;

/// A table over a fresh directory.
struct Fixture {
    dir: tempfile::TempDir,
    root: OwnedFd,
    table: InodeTable,
}

fn open_path(dir: &OwnedFd, name: &str) -> OwnedFd {
    sys::openat(dir, name, OFlags::PATH | OFlags::NOFOLLOW, 0).unwrap()
}

fn key_of(fd: impl AsFd) -> (u64, u64) {
    sys::fstat(fd).unwrap().key()
}

fn fixture(budget: usize) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let open_root = || sys::open_path_dir(dir.path()).unwrap();
    let root = open_root();
    let root_for_table = Arc::new(open_root());
    let key = key_of(&root);
    let table = InodeTable::new(root_for_table, key, budget).unwrap();
    Fixture { dir, root, table }
}

impl Fixture {
    /// Create `name` and look it up, as the core's lookup does.
    fn create(&self, name: &str) -> Arc<Inode> {
        std::fs::write(self.dir.path().join(name), name).unwrap();
        self.lookup(name)
    }

    fn lookup(&self, name: &str) -> Arc<Inode> {
        let fd = open_path(&self.root, name);
        let key = key_of(&fd);
        self.table.remember(key, fd)
    }

    fn handles_in_use(&self) -> bool {
        self.table.fd_cache().uses_handles()
    }
}

/// The content of the file an O_PATH descriptor names (reopened through /proc).
fn read(fd: &impl AsRawFd) -> String {
    std::fs::read_to_string(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap()
}

/// Descriptors this process holds on any of `keys` (other tests' files don't count).
fn open_fds_on(keys: &HashSet<(u64, u64)>) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::metadata(e.ok()?.path()).ok())
        .filter(|m| {
            use std::os::unix::fs::MetadataExt;
            keys.contains(&(m.dev(), m.ino()))
        })
        .count()
}

/// Handles need root (CAP_DAC_READ_SEARCH) and an exporting filesystem; elsewhere every
/// inode stays pinned, which the other tests of the core cover.
fn skip_without_handles(f: &Fixture) -> bool {
    if f.handles_in_use() {
        return false;
    }
    assert!(
        !sys::is_root(),
        "root on {:?} should have file handles",
        f.dir.path()
    );
    eprintln!("skipped: no file handles here");
    true
}

#[test]
fn a_thousand_files_stay_within_the_budget_and_each_resolves_to_its_file() {
    let f = fixture(BUDGET);
    if skip_without_handles(&f) {
        return;
    }
    let mut keys = HashSet::new();
    let inodes: Vec<_> = (0..1000)
        .map(|i| {
            let inode = f.create(&format!("f{i}"));
            keys.insert(inode.key);
            inode
        })
        .collect();
    assert_eq!(keys.len(), 1000);
    assert!(f.table.fd_cache().held() <= BUDGET);
    assert!(open_fds_on(&keys) <= BUDGET, "{}", open_fds_on(&keys));
    // Every inode reaches its own file, most of them reopened from their handle.
    let before = f.table.fd_cache().reopens();
    for inode in &inodes {
        let fd = inode.fd().unwrap();
        assert_eq!(key_of(&fd), inode.key);
        assert_eq!(
            inode.ino, inode.key.1,
            "backing numbers serve as inode numbers"
        );
    }
    assert!(f.table.fd_cache().reopens() >= before + (1000 - BUDGET as u64));
    assert!(open_fds_on(&keys) <= BUDGET);
    assert_eq!(f.table.len(), 1001);
}

#[test]
fn a_descriptor_in_use_survives_eviction() {
    let f = fixture(1);
    if skip_without_handles(&f) {
        return;
    }
    let a = f.create("a");
    let held = a.fd().unwrap();
    for i in 0..20 {
        f.create(&format!("g{i}")).fd().unwrap();
    }
    // The cache let go of a's descriptor long ago; ours still names a.
    assert!(f.table.fd_cache().held() <= 1);
    assert_eq!(key_of(&held), a.key);
    let st = sys::fstat(&held).unwrap();
    assert_eq!(st.st_ino, a.key.1);
}

#[test]
fn a_file_renamed_while_cold_still_resolves() {
    let f = fixture(2);
    if skip_without_handles(&f) {
        return;
    }
    std::fs::create_dir(f.dir.path().join("sub")).unwrap();
    let a = f.create("a");
    for i in 0..10 {
        f.create(&format!("g{i}"));
    }
    let reopens = f.table.fd_cache().reopens();
    std::fs::rename(f.dir.path().join("a"), f.dir.path().join("sub/moved")).unwrap();
    let fd = a.fd().unwrap();
    assert_eq!(f.table.fd_cache().reopens(), reopens + 1, "a was cold");
    assert_eq!(key_of(&fd), a.key);
    assert_eq!(read(&fd), "a");
    // And a lookup of its new name finds the same inode.
    let again = f.lookup("sub/moved");
    assert!(Arc::ptr_eq(&a, &again));
    assert_eq!(f.table.lookup_count(a.ino), 2);
}

#[test]
fn hard_links_share_one_inode_after_eviction() {
    let f = fixture(1);
    if skip_without_handles(&f) {
        return;
    }
    let a = f.create("a");
    f.create("b");
    f.create("c");
    std::fs::hard_link(f.dir.path().join("a"), f.dir.path().join("a2")).unwrap();
    let l = f.lookup("a2");
    assert!(Arc::ptr_eq(&a, &l));
    assert_eq!(f.table.lookup_count(a.ino), 2);
    assert!(!f.table.forget(a.ino, 1));
    assert!(f.table.forget(a.ino, 1));
    assert_eq!(f.table.len(), 3);
}

/// The table is told a known key with another file's descriptor: what it sees when a file
/// was deleted while cold and its number given to a new one.
#[test]
fn a_reused_number_gets_its_own_inode() {
    let f = fixture(4);
    if skip_without_handles(&f) {
        return;
    }
    let old = f.create("old");
    std::fs::write(f.dir.path().join("new"), "new").unwrap();
    let fd = open_path(&f.root, "new");
    let new = f.table.remember(old.key, fd);
    assert!(!Arc::ptr_eq(&old, &new));
    assert!(
        new.ino >= SYNTHETIC_BASE,
        "{} is still taken by the old inode",
        old.key.1
    );
    assert_eq!(f.table.find(old.key), Some(new.ino));
    assert_eq!(f.table.listing_ino(old.key.0, old.key.1), new.ino);
    // The old inode stays reachable by number until the kernel forgets it.
    assert!(Arc::ptr_eq(&f.table.get(old.ino).unwrap(), &old));
    assert!(f.table.forget(old.ino, 1));
    assert_eq!(
        f.table.find(old.key),
        Some(new.ino),
        "forgetting the old keeps the new"
    );
    assert_eq!(f.table.len(), 2);
}

/// The same through the filesystem: a file deleted while cold, its number reused (ext4 hands
/// a freed number out again at once).
#[test]
fn a_deleted_cold_file_is_stale_and_its_number_reused_is_a_new_inode() {
    let f = fixture(1);
    if skip_without_handles(&f) {
        return;
    }
    let old = f.create("old");
    f.create("x").fd().unwrap();
    f.create("y").fd().unwrap();
    std::fs::remove_file(f.dir.path().join("old")).unwrap();
    match old.fd() {
        Err(FsError::Stale(ino)) => assert_eq!(ino, old.ino),
        other => panic!("a deleted cold file reopens: {other:?}"),
    }
    let reused = (0..200).find_map(|i| {
        let name = format!("n{i}");
        std::fs::write(f.dir.path().join(&name), "new").unwrap();
        let st = std::fs::symlink_metadata(f.dir.path().join(&name)).unwrap();
        use std::os::unix::fs::MetadataExt;
        (st.ino() == old.key.1).then_some(name)
    });
    let Some(name) = reused else {
        eprintln!("skipped: {:?} did not reuse the number", f.dir.path());
        return;
    };
    let new = f.lookup(&name);
    assert_eq!(new.key, old.key);
    assert!(!Arc::ptr_eq(&old, &new));
    assert_ne!(new.ino, old.ino);
    let fd = new.fd().unwrap();
    assert_eq!(key_of(&fd), old.key);
    assert_eq!(read(&fd), "new");
}

/// A file unlinked while a program holds it open is still there: its handle reopens.
#[test]
fn an_unlinked_open_file_reopens_from_its_handle() {
    let f = fixture(1);
    if skip_without_handles(&f) {
        return;
    }
    let a = f.create("a");
    let open = std::fs::File::open(f.dir.path().join("a")).unwrap();
    std::fs::remove_file(f.dir.path().join("a")).unwrap();
    f.create("x").fd().unwrap();
    f.create("y").fd().unwrap();
    let reopens = f.table.fd_cache().reopens();
    let fd = a.fd().unwrap();
    assert_eq!(f.table.fd_cache().reopens(), reopens + 1, "a was cold");
    let st = sys::fstat(fd.as_fd()).unwrap();
    assert_eq!((st.st_dev, st.st_ino, st.st_nlink), (a.key.0, a.key.1, 0));
    drop(open);
}

/// Threads using descriptors while others' reopens evict them: a descriptor in use is never
/// closed under its user, so its number can't be reused for another file meanwhile.
#[test]
fn concurrent_users_always_see_their_own_file() {
    let f = fixture(4);
    if skip_without_handles(&f) {
        return;
    }
    let inodes: Vec<_> = (0..64).map(|i| f.create(&format!("f{i}"))).collect();
    std::thread::scope(|s| {
        for t in 0..4 {
            let inodes = &inodes;
            s.spawn(move || {
                for n in 0..2000 {
                    let inode = &inodes[(n * 7 + t * 13) % inodes.len()];
                    let fd = inode.fd().unwrap();
                    // Other threads open and close descriptors meanwhile.
                    std::thread::yield_now();
                    assert_eq!(key_of(&fd), inode.key);
                    assert_eq!(read(&fd), format!("f{}", inode_name(inodes, inode)));
                }
            });
        }
    });
    assert!(f.table.fd_cache().held() <= 4);
}

fn inode_name(inodes: &[Arc<Inode>], inode: &Arc<Inode>) -> usize {
    inodes.iter().position(|i| Arc::ptr_eq(i, inode)).unwrap()
}
