//! Where the daemon logs and what it says there: the workspace's `.vikingfs/mount.log` by
//! default, `-o log=FILE` or `--log-file FILE` elsewhere, named by `status`; plain
//! colourless lines; and nothing at WARN or ERROR for ordinary work on a new workspace.

use crate::support::{self, daemon};

use daemon::{ok, Mount};

/// The lines of `log` at WARN or ERROR.
fn complaints(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect()
}

#[test]
fn ordinary_work_on_a_new_workspace_logs_no_warning() {
    let m = Mount::new();
    let r = m.res();
    // A real tree nobody here wrote, copied in, summarised, indexed and removed.
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    ok(&r, &format!("cp -r {} code && mkdir notes", src.display()));
    ok(
        &r,
        "for i in $(seq 1 20); do echo \"note $i\" > notes/n$i.md; done",
    );
    m.check_index_agrees();
    ok(&r, "rm -rf code && mv notes kept && rm -rf kept");
    m.check_index_agrees();
    m.unmount();
    let log = std::fs::read_to_string(m.ws.join(".vikingfs/mount.log")).unwrap();
    assert!(!log.contains('\u{1b}'), "colour codes in the log file");
    assert_eq!(complaints(&log), Vec::<&str>::new(), "{log}");
}

#[test]
fn the_log_goes_where_it_is_asked_and_status_names_it() {
    let home = tempfile::tempdir().unwrap();
    for (how, file) in [("-o", "opt.log"), ("--log-file", "flag.log")] {
        let log = home.path().join(file);
        let arg = match how {
            "-o" => format!("log={},debug", log.display()),
            _ => log.display().to_string(),
        };
        let m = Mount::with_options(&[]);
        m.unmount();
        let out = support::vikingfs(m.dir.path())
            .args(["mount", "--pid-file"])
            .arg(m.pid_file())
            .args([how, &arg])
            .arg(&m.ws)
            .arg(&m.mp)
            .output()
            .unwrap();
        support::assert_ok(&out, &["mount", how]);
        let st = m.cli(&["status", "--json"]).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
        assert_eq!(v["daemons"][0]["log"], log.display().to_string(), "{v}");
        let text = m.cli(&["status"]).output().unwrap();
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.contains(&format!("log {}", log.display())), "{text}");
        ok(&m.res(), "echo hi > a.md");
        m.unmount();
        let got = std::fs::read_to_string(&log).unwrap();
        if how == "-o" {
            assert!(
                got.contains(" DEBUG "),
                "-o debug logs at debug level: {got}"
            );
        }
        assert!(!got.contains('\u{1b}'), "colour codes in {file}");
    }
}

/// An ioctl the filesystem does not implement answers ENOTTY, as a local filesystem's does,
/// and logs nothing (fuser's default logged a warning per call: 2,814 in one fsstress run).
#[test]
fn unknown_ioctls_answer_enotty_quietly() {
    let m = Mount::new();
    ok(&m.res(), "echo hi > a.md");
    let script = format!(
        "import fcntl, os, errno\n\
         fd = os.open('{}', os.O_RDONLY)\n\
         for cmd in (0x80086601, 0x5401, 0x40086602):\n\
         \x20   try:\n\
         \x20       fcntl.ioctl(fd, cmd, bytes(8)); print('ok')\n\
         \x20   except OSError as e:\n\
         \x20       print(errno.errorcode[e.errno])\n",
        m.res().join("a.md").display()
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        said,
        "ENOTTY\nENOTTY\nENOTTY\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    m.unmount();
    let log = std::fs::read_to_string(m.ws.join(".vikingfs/mount.log")).unwrap();
    assert!(!log.contains("ioctl"), "{log}");
}
