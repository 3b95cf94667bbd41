//! The daemon serves more files than its descriptor budget (`VIKINGFS_FD_BUDGET`): inodes
//! the kernel keeps are reopened from file handles, and its open descriptors stay bounded.

use crate::support::daemon;

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use daemon::Mount;

const BUDGET: usize = 200;
/// The daemon's own descriptors besides the inodes': /dev/fuse, SQLite, lock files, handles.
const MARGIN: usize = 100;

/// A mount whose daemon keeps at most BUDGET inode descriptors.
fn small_budget_mount() -> Mount {
    Mount::with_env(&[("VIKINGFS_FD_BUDGET", &BUDGET.to_string())])
}

fn daemon_fds(m: &Mount) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", m.pid()))
        .unwrap()
        .count()
}

fn assert_bounded(m: &Mount) {
    let n = daemon_fds(m);
    assert!(n < BUDGET + MARGIN, "the daemon holds {n} descriptors");
}

#[test]
fn thousands_of_files_with_a_small_budget() {
    let m = small_budget_mount();
    let r = m.res();
    // Directories too: lookups under a directory whose descriptor was closed reopen it.
    for d in 0..20 {
        std::fs::create_dir(r.join(format!("d{d}"))).unwrap();
    }
    let path = |i: usize| r.join(format!("d{}/f{i}", i % 20));
    for i in 0..2000 {
        std::fs::write(path(i), format!("file {i}\n")).unwrap();
    }
    assert_bounded(&m);
    let mut inos = std::collections::HashSet::new();
    for i in 0..2000 {
        let st = std::fs::metadata(path(i)).unwrap();
        assert_eq!(st.len(), format!("file {i}\n").len() as u64);
        // st_ino is the backing number, as the listing's d_ino.
        let backing = std::fs::metadata(m.backing().join(format!("d{}/f{i}", i % 20))).unwrap();
        assert_eq!(st.ino(), backing.ino());
        inos.insert(st.ino());
    }
    assert_eq!(inos.len(), 2000);
    let mut listed = 0;
    for d in 0..20 {
        for e in std::fs::read_dir(r.join(format!("d{d}"))).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            if let Some(i) = name.strip_prefix('f') {
                let i: usize = i.parse().unwrap();
                assert_eq!(
                    std::fs::read_to_string(path(i)).unwrap(),
                    format!("file {i}\n")
                );
                listed += 1;
            }
        }
    }
    assert_eq!(listed, 2000);
    assert_bounded(&m);
    // Renames and hard links of files whose descriptors are long closed.
    for i in (0..2000).step_by(100) {
        std::fs::rename(path(i), r.join(format!("d{}/moved{i}", (i + 1) % 20))).unwrap();
    }
    std::fs::hard_link(path(1), r.join("link1")).unwrap();
    assert_eq!(
        std::fs::metadata(r.join("link1")).unwrap().ino(),
        std::fs::metadata(path(1)).unwrap().ino()
    );
    assert_eq!(std::fs::metadata(path(1)).unwrap().nlink(), 2);
    for i in (0..2000).step_by(100) {
        let p = r.join(format!("d{}/moved{i}", (i + 1) % 20));
        assert_eq!(std::fs::read_to_string(&p).unwrap(), format!("file {i}\n"));
        std::fs::remove_file(p).unwrap();
    }
    assert_bounded(&m);
}

/// A file unlinked while open, its inode's descriptor closed meanwhile: the open file still
/// reads, writes and stats.
#[test]
fn an_unlinked_open_file_outlives_its_descriptor() {
    let m = small_budget_mount();
    let r = m.res();
    let mut f = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(r.join("tmp"))
        .unwrap();
    f.write_all(b"before ").unwrap();
    std::fs::remove_file(r.join("tmp")).unwrap();
    write_many(&r, 3 * BUDGET);
    f.write_all(b"after").unwrap();
    f.flush().unwrap();
    assert_eq!(f.metadata().unwrap().len(), 12);
    assert_eq!(f.metadata().unwrap().nlink(), 0);
    f.rewind().unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "before after");
    assert_bounded(&m);
}

fn write_many(dir: &Path, n: usize) {
    std::fs::create_dir(dir.join("many")).unwrap();
    for i in 0..n {
        std::fs::write(dir.join(format!("many/{i}")), "x").unwrap();
    }
}

/// A directory the kernel knows moves behind the mount (OpenViking sharing the workspace),
/// and a new directory takes its old name: a removal through the kernel's cached entry of the
/// old one removes the file in the directory that moved, never the namesake's.
#[test]
fn a_directory_moved_behind_the_mount_is_found_where_it_went() {
    let m = Mount::new();
    let r = m.res();
    std::fs::create_dir(r.join("d")).unwrap();
    std::fs::write(r.join("d/x"), "moved").unwrap();
    std::fs::write(r.join("d/y"), "moved").unwrap();
    // Held open: the kernel keeps its inode, whatever the entry cache's timeout.
    let held = File::open(r.join("d")).unwrap();
    std::fs::rename(m.backing().join("d"), m.backing().join("e")).unwrap();
    std::fs::create_dir(m.backing().join("d")).unwrap();
    std::fs::write(m.backing().join("d/x"), "namesake").unwrap();
    std::fs::write(m.backing().join("d/y"), "namesake").unwrap();
    // Relative to the held descriptor: the kernel's inode of the directory that moved.
    let at = |name: &str| {
        let c = std::ffi::CString::new(name).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: a valid directory descriptor and a NUL-terminated name.
        let rc = unsafe { libc::unlinkat(held.as_raw_fd(), c.as_ptr(), 0) };
        assert_eq!(
            rc,
            0,
            "unlinkat {name}: {}",
            std::io::Error::last_os_error()
        );
    };
    at("x");
    assert!(
        !m.backing().join("e/x").exists(),
        "removed where the directory went"
    );
    assert!(
        m.backing().join("d/x").exists(),
        "the namesake's file is left alone"
    );
    // Twice: the second removal finds the directory where the first did.
    at("y");
    assert!(!m.backing().join("e/y").exists());
    assert_eq!(
        std::fs::read_to_string(m.backing().join("d/y")).unwrap(),
        "namesake"
    );
}

/// Another process (OpenViking sharing the workspace) deletes a file the kernel still knows,
/// and the backing filesystem gives its number to a new file: the new file is a new inode,
/// and the old name no longer opens.
#[test]
fn a_number_reused_behind_the_mount_is_a_new_file() {
    let m = small_budget_mount();
    let r = m.res();
    std::fs::write(r.join("old"), "old").unwrap();
    let old_ino = std::fs::metadata(r.join("old")).unwrap().ino();
    // The daemon's descriptor of `old` is closed: nothing pins its backing inode any more.
    write_many(&r, 2 * BUDGET);
    std::fs::remove_file(m.backing().join("old")).unwrap();
    let reused = (0..200).find_map(|i| {
        let name = format!("new{i}");
        std::fs::write(m.backing().join(&name), "new").unwrap();
        let ino = std::fs::metadata(m.backing().join(&name)).unwrap().ino();
        (ino == old_ino).then_some(name)
    });
    let Some(name) = reused else {
        eprintln!("skipped: the backing filesystem did not reuse {old_ino}");
        return;
    };
    let st = std::fs::metadata(r.join(&name)).unwrap();
    assert_ne!(
        st.ino(),
        old_ino,
        "the kernel still knows {old_ino} as the old file"
    );
    assert_eq!(std::fs::read_to_string(r.join(&name)).unwrap(), "new");
    // The kernel's cached `old` leads to a stale inode: ESTALE makes it look the name up
    // again, and it is gone.
    let e = File::open(r.join("old")).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
    assert_bounded(&m);
}
