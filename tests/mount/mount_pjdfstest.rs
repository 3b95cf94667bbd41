//! POSIX conformance: pjdfstest (`cargo install pjdfstest`) against a vikingfs mount with the
//! configuration in tests/pjdfstest.toml. Every failure must be one listed (with its reason)
//! in docs/pjdfstest.md; a new failure fails this test. Skipped, loudly, when the pjdfstest
//! binary is missing (CI installs it).

use crate::support::daemon;

use std::path::PathBuf;
use std::process::Command;

use daemon::Mount;

/// Known failures; docs/pjdfstest.md gives the reason for each. None at present: the
/// `*::enametoolong_path` cases pass since the lock engine and the operations name paths
/// relative to a descriptor of the data root.
const KNOWN_FAILURES: &[&str] = &[];

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
        crate::support::skip(
            "pjdfstest is not installed: POSIX conformance NOT TESTED (scripts/test-setup.sh \
             installs it: cargo install --locked --debug pjdfstest, with libacl1-dev)",
        );
        return;
    };
    // SAFETY: geteuid takes no arguments, cannot fail and touches no memory of ours.
    if unsafe { libc::geteuid() } != 0 {
        crate::support::skip("pjdfstest needs root: POSIX conformance NOT TESTED");
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
    // What pjdfstest made (FIFOs, sockets, devices, names at the limits, hard links) costs
    // the workers no dead job, and the index agrees with what is left.
    m.check_index_agrees();
    m.assert_no_dead_jobs();
}
