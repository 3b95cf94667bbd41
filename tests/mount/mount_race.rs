//! Several processes rename the same files back and forth through the mount at once, each
//! also creating, renaming and removing a scratch file of its own: afterwards every file is
//! under exactly one of its two names with its content, no scratch file and no lock file is
//! left, and the index agrees with the files. A rename's or unlink's locks are released after
//! the mount's reply (`src/ops/tail.rs`): the next call on the same path, from any process,
//! waits for them rather than slipping past.

use crate::support::daemon;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use daemon::Mount;

const FILES: usize = 6;
const PROCS: usize = 4;
const ROUNDS: usize = 150;

fn content(k: usize) -> String {
    format!("# file {k}\n\nThe note about racer{k}walnut.\n")
}

/// A racer: `RACE_DIR` is the directory, `RACE_SEED` picks its sequence.
#[test]
fn child() {
    let (Ok(dir), Ok(seed)) = (std::env::var("RACE_DIR"), std::env::var("RACE_SEED")) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let seed: u64 = seed.parse().unwrap();
    let mut x = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    for _ in 0..ROUNDS {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let k = (x >> 33) as usize % FILES;
        let (a, b) = (dir.join(format!("a{k}.md")), dir.join(format!("b{k}.md")));
        // To its other name, whichever it has now. Another racer may have just moved it (the
        // name is gone: ENOENT) or hold its lock past the timeout (EBUSY): both are answers a
        // program gets, neither may lose the file.
        let r = std::fs::rename(&a, &b).or_else(|_| std::fs::rename(&b, &a));
        if let Err(e) = r {
            assert!(
                matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EBUSY)),
                "rename {k}: {e}"
            );
        }
        let (t, u) = (
            dir.join(format!("t{seed}.tmp")),
            dir.join(format!("u{seed}.tmp")),
        );
        std::fs::write(&t, b"scratch").unwrap();
        std::fs::rename(&t, &u).unwrap();
        std::fs::remove_file(&u).unwrap();
    }
}

#[test]
fn racing_renames_keep_every_file_once_and_leave_no_lock() {
    let m = Mount::new();
    let dir = m.res().join("race");
    std::fs::create_dir(&dir).unwrap();
    for k in 0..FILES {
        std::fs::write(dir.join(format!("a{k}.md")), content(k)).unwrap();
        if k == FILES / 2 - 1 {
            // Half of them indexed (their renames move records), half not yet.
            let out = m.cli(&["wait", "--timeout", "300"]).output().unwrap();
            assert!(out.status.success());
        }
    }
    let racers: Vec<_> = (0..PROCS)
        .map(|i| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "mount_race::child",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("RACE_DIR", &dir)
                .env("RACE_SEED", i.to_string())
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut r in racers {
        assert!(r.wait().unwrap().success(), "a racer failed");
    }
    for k in 0..FILES {
        let names: Vec<PathBuf> = ["a", "b"]
            .iter()
            .map(|p| dir.join(format!("{p}{k}.md")))
            .filter(|p| p.exists())
            .collect();
        assert_eq!(names.len(), 1, "file {k} under {names:?}");
        assert_eq!(std::fs::read_to_string(&names[0]).unwrap(), content(k));
    }
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "scratch left: {left:?}");
    // The racers are gone; their last locks are released right after the last replies.
    let backing = m.backing().join("race");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let locks: Vec<_> = std::fs::read_dir(&backing)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".ovlock"))
            .collect();
        if locks.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "locks left: {locks:?}");
        std::thread::yield_now();
    }
    m.check_index_agrees();
}
