//! Differential test: random sequences of file operations run on a vikingfs mount and on a
//! plain directory must give the same results (errno included) and the same final tree.
//! Seeded, so a failure names the seed and step that reproduce it.

use crate::support::daemon;

use std::ffi::CString;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use daemon::{tree, user_tree, Mount};

const NAMES: [&str; 3] = ["a", "b", "c"];

#[derive(Debug, Clone)]
enum Op {
    Write(String, Vec<u8>),
    Append(String, Vec<u8>),
    Read(String),
    Mkdir(String),
    Rmdir(String),
    Unlink(String),
    Rename(String, String),
    RenameNoReplace(String, String),
    Exchange(String, String),
    Link(String, String),
    Symlink(String, String),
    Truncate(String, u64),
    Stat(String),
    List(String),
    Chmod(String, u32),
}

fn path(rng: &mut StdRng) -> String {
    let depth = rng.random_range(1..=3);
    (0..depth)
        .map(|_| NAMES[rng.random_range(0..NAMES.len())])
        .collect::<Vec<_>>()
        .join("/")
}

fn op(rng: &mut StdRng) -> Op {
    let p = path(rng);
    let data: Vec<u8> = (0..rng.random_range(0..64))
        .map(|_| rng.random_range(b'a'..=b'z'))
        .collect();
    match rng.random_range(0..15) {
        0 => Op::Write(p, data),
        1 => Op::Append(p, data),
        2 => Op::Read(p),
        3 => Op::Mkdir(p),
        4 => Op::Rmdir(p),
        5 => Op::Unlink(p),
        6 => Op::Rename(p, path(rng)),
        7 => Op::RenameNoReplace(p, path(rng)),
        8 => Op::Exchange(p, path(rng)),
        9 => Op::Link(p, path(rng)),
        10 => Op::Symlink(path(rng), p),
        11 => Op::Truncate(p, rng.random_range(0..100)),
        12 => Op::Stat(p),
        13 => Op::List(p),
        _ => Op::Chmod(p, [0o644, 0o600, 0o755][rng.random_range(0..3)]),
    }
}

type Outcome = Result<String, i32>;

fn errno(e: std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(-1)
}

fn renameat2(a: &Path, b: &Path, flags: u32) -> Outcome {
    let (ca, cb) = (
        CString::new(a.as_os_str().as_bytes()).unwrap(),
        CString::new(b.as_os_str().as_bytes()).unwrap(),
    );
    // SAFETY: `ca` and `cb` are NUL-terminated CStrings alive for the call; renameat2 only
    // reads them.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            flags,
        )
    };
    if r == 0 {
        Ok(String::new())
    } else {
        Err(errno(std::io::Error::last_os_error()))
    }
}

fn apply(root: &Path, op: &Op) -> Outcome {
    let j = |p: &String| -> PathBuf { root.join(p) };
    let unit = |r: std::io::Result<()>| r.map(|_| String::new()).map_err(errno);
    match op {
        Op::Write(p, d) => unit(fs::write(j(p), d)),
        Op::Append(p, d) => unit(
            OpenOptions::new()
                .append(true)
                .open(j(p))
                .and_then(|mut f| f.write_all(d)),
        ),
        Op::Read(p) => fs::read(j(p))
            .map(|d| String::from_utf8_lossy(&d).into_owned())
            .map_err(errno),
        Op::Mkdir(p) => unit(fs::create_dir(j(p))),
        Op::Rmdir(p) => unit(fs::remove_dir(j(p))),
        Op::Unlink(p) => unit(fs::remove_file(j(p))),
        Op::Rename(a, b) => unit(fs::rename(j(a), j(b))),
        Op::RenameNoReplace(a, b) => renameat2(&j(a), &j(b), libc::RENAME_NOREPLACE),
        Op::Exchange(a, b) => renameat2(&j(a), &j(b), libc::RENAME_EXCHANGE),
        Op::Link(a, b) => unit(fs::hard_link(j(a), j(b))),
        Op::Symlink(t, p) => unit(std::os::unix::fs::symlink(t, j(p))),
        Op::Truncate(p, n) => unit(
            OpenOptions::new()
                .write(true)
                .open(j(p))
                .and_then(|f| f.set_len(*n)),
        ),
        Op::Stat(p) => fs::symlink_metadata(j(p))
            .map(|m| {
                format!(
                    "{:?} size={} nlink={} mode={:o}",
                    m.file_type(),
                    if m.is_dir() { 0 } else { m.len() },
                    if m.is_dir() { 0 } else { m.nlink() },
                    m.mode() & 0o7777
                )
            })
            .map_err(errno),
        Op::List(p) => fs::read_dir(j(p))
            .and_then(|rd| {
                let mut v: Vec<String> = rd
                    .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                    // The mount lists no summary the workers wrote: no filter here.
                    .collect::<Result<Vec<_>, _>>()?;
                v.sort();
                Ok(v.join(","))
            })
            .map_err(errno),
        Op::Chmod(p, m) => unit(fs::set_permissions(j(p), fs::Permissions::from_mode(*m))),
    }
}

/// RENAME_EXCHANGE: vikingfs refuses to swap two existing names (EINVAL: the index records of
/// two trees have no crash-safe swap), so the plain directory is left as it is then. Any other
/// outcome must match the plain directory's: the kernel's own errors (a missing name), and
/// the kernel's no-op for two names of one file (then nothing may have moved).
fn exchange(a: &Path, b: &Path, x: &str, y: &str, o: &Op) -> (Outcome, Outcome) {
    let both = fs::symlink_metadata(b.join(x)).is_ok() && fs::symlink_metadata(b.join(y)).is_ok();
    let ra = apply(a, o);
    match &ra {
        Err(e) if both && *e == libc::EINVAL => (ra.clone(), ra),
        Ok(_) => {
            let same = |p: &Path| {
                let (m, n) = (
                    fs::symlink_metadata(p.join(x)).unwrap(),
                    fs::symlink_metadata(p.join(y)).unwrap(),
                );
                (m.dev(), m.ino()) == (n.dev(), n.ino())
            };
            assert!(
                same(b),
                "RENAME_EXCHANGE of {x} and {y} succeeded on vikingfs"
            );
            (ra, apply(b, o))
        }
        Err(_) => (ra, apply(b, o)),
    }
}

#[test]
fn random_operation_sequences_match_a_plain_directory() {
    run(&Mount::new());
}

/// The same without FUSE passthrough: data through the daemon's read/write.
#[test]
fn random_operation_sequences_match_without_passthrough() {
    run(&Mount::with_options(&["nopassthrough"]));
}

fn run(m: &Mount) {
    let plain = tempfile::tempdir().unwrap();
    let seeds: u64 = std::env::var("VIKINGFS_DIFF_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let only: Option<u64> = std::env::var("VIKINGFS_DIFF_SEED")
        .ok()
        .and_then(|s| s.parse().ok());
    for seed in (0..seeds).filter(|s| only.is_none_or(|o| o == *s)) {
        let a = m.res().join(format!("s{seed}"));
        let b = plain.path().join(format!("s{seed}"));
        fs::create_dir(&a).unwrap();
        fs::create_dir(&b).unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        for step in 0..200 {
            let o = op(&mut rng);
            let (ra, rb) = match &o {
                Op::Exchange(x, y) => exchange(&a, &b, x, y, &o),
                _ => (apply(&a, &o), apply(&b, &o)),
            };
            if only.is_some() {
                eprintln!("{step}: {o:?} -> {rb:?}");
            }
            assert_eq!(
                ra, rb,
                "seed {seed} step {step}: {o:?} differs (left: vikingfs, right: plain)"
            );
        }
        // The workers may have summarised the mount's directories meanwhile, but the mount
        // does not list summaries: it shows exactly the plain directory's tree.
        assert_eq!(tree(&a), tree(&b), "seed {seed}: final trees differ");
        // What the mount shows is what is on disk (summaries, lock and temp files aside).
        assert_eq!(
            tree(&a),
            user_tree(&m.backing().join(format!("s{seed}"))),
            "seed {seed}: the mount and its backing directory differ"
        );
    }
}
