//! `vikingfs lock` and `vikingfs locks` as a user runs them.

use std::process::{Command, Stdio};

use crate::support::BIN;

/// `vikingfs --workspace WS`, its HOME the workspace's directory.
fn vfs(ws: &std::path::Path) -> Command {
    let mut c = crate::support::vikingfs(ws);
    c.arg("--workspace").arg(ws);
    c
}

#[test]
fn busy_lock_exits_75_naming_the_holder() {
    let d = tempfile::tempdir().unwrap();
    let ws = d.path();
    // Inside the outer lock, try the same path (EXACT) and its parent (TREE); report both.
    let inner = format!(
        "{bin} --workspace {ws} lock viking://resources/a/b.md -- true; echo \"rc1=$?\"; \
         {bin} --workspace {ws} lock --tree viking://resources/a -- true; echo \"rc2=$?\"; \
         {bin} --workspace {ws} locks --json",
        bin = BIN,
        ws = ws.display()
    );
    let out = vfs(ws)
        .args([
            "lock",
            "viking://resources/a/b.md",
            "--",
            "sh",
            "-c",
            &inner,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stdout.contains("rc1=75"), "{stdout}");
    assert!(stdout.contains("rc2=75"), "{stdout}");
    let json_start = stdout.find('[').unwrap();
    let list: serde_json::Value = serde_json::from_str(&stdout[json_start..]).unwrap();
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["uri"], "viking://resources/a/b.md");
    assert_eq!(list[0]["kind"], "exact");
    assert_eq!(list[0]["stale"], false);
    let owner = list[0]["owner"].as_str().unwrap();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "one line per refusal: {stderr}");
    for l in lines {
        assert!(l.contains("busy"), "{l}");
        assert!(l.contains(owner), "{l} does not name {owner}");
    }
    // Released afterwards: nothing listed.
    let out = vfs(ws).args(["locks", "--json"]).output().unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), "[]");
}

#[test]
fn command_status_passes_through() {
    let d = tempfile::tempdir().unwrap();
    for code in [0, 3, 42] {
        let st = vfs(d.path())
            .args([
                "lock",
                "--tree",
                "--timeout",
                "5",
                "viking://agent/x",
                "--",
                "sh",
                "-c",
            ])
            .arg(format!("exit {code}"))
            .status()
            .unwrap();
        assert_eq!(st.code(), Some(code));
    }
    // A command that cannot run, and a bad URI: one line naming the problem.
    let out = vfs(d.path())
        .args(["lock", "viking://resources/../x", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let e = String::from_utf8(out.stderr).unwrap();
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains(".."), "{e}");
    let out = vfs(d.path())
        .args(["lock", "viking://resources/y", "--", "/nonexistent/cmd"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("/nonexistent/cmd"));
}
