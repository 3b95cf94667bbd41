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

/// Wait until `p` exists (the command under the lock started).
fn wait_for(p: &std::path::Path, child: &mut std::process::Child) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !p.exists() {
        assert!(child.try_wait().unwrap().is_none(), "vikingfs lock exited");
        assert!(
            std::time::Instant::now() < deadline,
            "the command never ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// `vikingfs lock URI -- true`'s exit code: 75 while URI is held.
fn try_lock(ws: &std::path::Path, uri: &str) -> Option<i32> {
    vfs(ws)
        .args(["lock", uri, "--", "true"])
        .status()
        .unwrap()
        .code()
}

#[test]
fn signals_reach_the_command_and_the_lock_lives_as_long_as_it_does() {
    let d = tempfile::tempdir().unwrap();
    let ws = d.path();
    let uri = "viking://resources/held.md";
    // SIGTERM to `vikingfs lock` goes to the command, which decides; the lock is held until
    // the command has exited, and released then.
    let ready = ws.join("ready");
    let got = ws.join("got");
    let script = format!(
        "trap 'echo term > {got}; exit 7' TERM; touch {ready}; while :; do sleep 0.05; done",
        got = got.display(),
        ready = ready.display()
    );
    let mut holder = vfs(ws)
        .args(["lock", uri, "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    wait_for(&ready, &mut holder);
    let pid = holder.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let st = holder.wait().unwrap();
    assert_eq!(st.code(), Some(7), "the command's own answer to SIGTERM");
    assert_eq!(std::fs::read_to_string(&got).unwrap(), "term\n");
    assert_eq!(
        try_lock(ws, uri),
        Some(0),
        "released once the command exited"
    );

    // SIGKILL of `vikingfs lock` cannot be passed on: the command runs on, and so does its
    // lock (as flock(1)'s, held by the command), until the command exits.
    let ready = ws.join("ready2");
    let mut holder = vfs(ws)
        .args(["lock", "--tree", "viking://resources/dir", "--", "sh", "-c"])
        .arg(format!("touch {}; read line", ready.display()))
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&ready, &mut holder);
    let mut stdin = holder.stdin.take().unwrap();
    holder.kill().unwrap();
    holder.wait().unwrap();
    let out = vfs(ws).arg("locks").output().unwrap();
    let table = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "a header and the lock: {table}");
    assert!(
        lines[0].starts_with("KIND") && lines[0].contains("OWNER"),
        "{table}"
    );
    assert!(
        lines[1].starts_with("tree") && lines[1].contains("(held)"),
        "{table}"
    );
    assert_eq!(
        try_lock(ws, "viking://resources/dir/inside.md"),
        Some(75),
        "the lock died with its holder while the command runs"
    );
    use std::io::Write;
    stdin.write_all(b"done\n").unwrap();
    drop(stdin);
    // The command exits (reaped by init): its lock is stale at once, taken by the next.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while try_lock(ws, "viking://resources/dir/inside.md") != Some(0) {
        assert!(
            std::time::Instant::now() < deadline,
            "a dead command's lock stays"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A command that forks and waits for its child holds the lock until both are done: busy to
/// others meanwhile, free after.
#[test]
fn a_forking_command_holds_the_lock_until_it_exits() {
    let d = tempfile::tempdir().unwrap();
    let ws = d.path();
    let (ready, done) = (ws.join("ready"), ws.join("done"));
    let script = format!(
        "(touch {r}; sleep 0.5; touch {d}) & wait",
        r = ready.display(),
        d = done.display()
    );
    let mut holder = vfs(ws)
        .args([
            "lock",
            "--tree",
            "viking://resources/f",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .spawn()
        .unwrap();
    wait_for(&ready, &mut holder);
    assert_eq!(try_lock(ws, "viking://resources/f/x.md"), Some(75));
    assert!(holder.wait().unwrap().success());
    assert!(
        done.exists(),
        "the lock went before the forked child was done"
    );
    assert_eq!(try_lock(ws, "viking://resources/f/x.md"), Some(0));
}

/// ^C at a terminal reaches the command once: the terminal signals the whole foreground
/// process group (the command with it), and `vikingfs lock` does not pass it on again.
#[test]
fn a_terminals_interrupt_reaches_the_command_once() {
    let d = tempfile::tempdir().unwrap();
    let ws = d.path();
    let (ready, seen) = (ws.join("ready"), ws.join("seen"));
    // Counts each SIGINT as it is delivered (a shell's trap may merge two that arrive
    // together).
    let command = format!(
        "import signal, time\nsignal.signal(signal.SIGINT, lambda *a: open('{s}', 'a').write('int\\n'))\nopen('{r}', 'w').close()\nfor _ in range(20): time.sleep(0.05)\n",
        s = seen.display(),
        r = ready.display()
    );
    // A real terminal: python's pty gives the command a controlling tty whose ^C the line
    // discipline turns into SIGINT for the foreground group.
    let script = r#"
import os, pty, sys, time
bin, ws, ready, cmd = sys.argv[1:5]
pid, fd = pty.fork()
if pid == 0:
    os.execv(bin, [bin, "--workspace", ws, "lock", "viking://resources/t", "--", "python3", "-c", cmd])
# The command writes `ready` after installing its handler: ^C from then on is counted.
while not os.path.exists(ready):
    time.sleep(0.01)
os.write(fd, b"\x03")
while True:
    try:
        if not os.read(fd, 1024):
            break
    except OSError:
        break
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"#;
    let out = Command::new("python3")
        .args(["-c", script, crate::support::BIN])
        .arg(ws)
        .arg(&ready)
        .arg(&command)
        .env("HOME", ws)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = std::fs::read_to_string(&seen).unwrap_or_default();
    assert_eq!(
        got,
        "int\n",
        "the command saw ^C {} times",
        got.lines().count()
    );
}

/// The command starts with no signal blocked (`vikingfs lock` blocks the ones it passes on;
/// a blocked mask would survive exec and deafen the command to them).
#[test]
fn the_command_starts_with_no_signal_blocked() {
    let d = tempfile::tempdir().unwrap();
    let out = vfs(d.path())
        .args([
            "lock",
            "viking://resources/m",
            "--",
            "grep",
            "SigBlk",
            "/proc/self/status",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        line.split_whitespace().nth(1),
        Some("0000000000000000"),
        "{line}"
    );
}
