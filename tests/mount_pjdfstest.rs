//! POSIX conformance: pjdfstest (`cargo install pjdfstest`) against a vikingfs mount with the
//! configuration in tests/pjdfstest.toml. Every failure must be one listed (with its reason)
//! in docs/pjdfstest.md; a new failure fails this test. Skipped, loudly, when the pjdfstest
//! binary is missing (CI installs it).

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::Mount;

/// Known failures; docs/pjdfstest.md gives the reason for each.
const KNOWN_FAILURES: &[&str] = &[
    // A path of PATH_MAX-1 bytes through the mount: its lock file cannot be named (see the doc).
    "chmod::enametoolong_path",
    "chown::enametoolong_path",
    "chown::lchown::enametoolong_path",
    "link::enametoolong_path",
    "mkdir::enametoolong_path",
    "mkfifo::enametoolong_path",
    "mknod::enametoolong_path",
    "mknod::privileged::enametoolong_path",
    "open::enametoolong_path",
    "rename::enametoolong_path",
    "rmdir::enametoolong_path",
    "symlink::enametoolong_path",
    "truncate::enametoolong_path",
    "unlink::enametoolong_path",
];

fn pjdfstest_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PJDFSTEST") {
        return Some(PathBuf::from(p));
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(h) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(h).join(".cargo/bin"));
    }
    dirs.into_iter()
        .map(|d| d.join("pjdfstest"))
        .find(|p| p.is_file())
}

#[test]
fn pjdfstest_has_no_unexpected_failures() {
    let Some(bin) = pjdfstest_bin() else {
        eprintln!();
        eprintln!("!!!!! pjdfstest is not installed: POSIX conformance NOT TESTED !!!!!");
        eprintln!("!!!!! install it with `cargo install pjdfstest` (needs libacl1-dev) !!!!!");
        eprintln!();
        return;
    };
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("!!!!! pjdfstest needs root: POSIX conformance NOT TESTED !!!!!");
        return;
    }
    let m = Mount::new();
    let dir = m.res().join("pjdfstest");
    std::fs::create_dir(&dir).unwrap();
    let config = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/pjdfstest.toml");
    let out = Command::new(bin)
        .arg("-c")
        .arg(&config)
        .arg("-p")
        .arg(&dir)
        .current_dir(&dir)
        .output()
        .expect("run pjdfstest");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let summary = text
        .lines()
        .find(|l| l.starts_with("Summary:"))
        .unwrap_or_else(|| panic!("pjdfstest printed no summary:\n{text}"));
    eprintln!("vikingfs {summary}");
    let failed: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_end().ends_with("FAILED"))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let unexpected: Vec<_> = failed
        .iter()
        .filter(|f| !KNOWN_FAILURES.contains(f))
        .collect();
    assert!(
        unexpected.is_empty(),
        "pjdfstest failures not in docs/pjdfstest.md: {unexpected:#?}\n{summary}"
    );
    assert!(
        summary.contains(" passed"),
        "no test passed at all: {summary}"
    );
}
