//! The shipped systemd unit passes `systemd-analyze verify` with the freshly built binary.

use std::process::Command;

#[test]
fn unit_verifies() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        crate::support::skip(
            "systemd-analyze is not installed (scripts/test-setup.sh installs systemd)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/systemd/vikingfs@.service"
    ))
    .unwrap();
    assert!(
        unit.contains("Type=notify"),
        "the unit must wait for READY=1"
    );
    let unit = unit.replace("/usr/local/bin/vikingfs", crate::support::BIN);
    // An instance file, so that %i and %f expand as they would for /mnt/viking.
    let path = dir.path().join("vikingfs@mnt-viking.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Warnings about the host (no running systemd in a container) are not the unit's fault;
    // anything naming our unit file is.
    let ours: Vec<&str> = stderr.lines().filter(|l| l.contains("vikingfs@")).collect();
    assert!(ours.is_empty(), "systemd-analyze verify: {stderr}");
}
