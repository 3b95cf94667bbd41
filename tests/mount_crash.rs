//! kill -9 of the daemon in the middle of a `cp -r` and of a writer that fsyncs each file:
//! after a remount every fsynced file is intact, once the queues are drained the index agrees
//! with the files (nothing the dead daemon half-did lingers), no lock of the dead daemon
//! blocks anything, and the partial copy can be removed.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ok, Mount};

#[test]
fn fsynced_files_survive_kill_9_during_cp_r() {
    let m = Mount::new();
    // A source tree big enough that cp -r is still running when the daemon dies.
    let src = m.dir.path().join("src");
    for d in 0..20 {
        let dir = src.join(format!("d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..50 {
            std::fs::write(dir.join(format!("f{f}.md")), vec![b'x'; 20_000]).unwrap();
        }
    }
    let log = m.dir.path().join("synced.log");
    let r = m.res();
    ok(&r, "mkdir w");
    // Each file is written, fsynced (sync FILE), and only then logged outside the mount.
    let writer = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "i=0; while [ $i -lt 100000 ]; do seq $i $((i+500)) > w/f$i && sync w/f$i \
             && echo $i >> {log} || exit 1; i=$((i+1)); done",
            log = log.display()
        ))
        .current_dir(&r)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let cp = Command::new("cp")
        .arg("-r")
        .arg(&src)
        .arg(r.join("copy"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Let both make progress, then kill the daemon.
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::fs::read_to_string(&log).map_or(0, |s| s.lines().count()) < 30 {
        assert!(Instant::now() < deadline, "writer made no progress");
        std::thread::sleep(Duration::from_millis(10));
    }
    m.kill9();
    let (mut writer, mut cp) = (writer, cp);
    writer.wait().unwrap();
    cp.wait().unwrap();
    m.mount();
    let synced = std::fs::read_to_string(&log).unwrap();
    let mut n = 0;
    for i in synced.lines() {
        let i: u64 = i.parse().unwrap();
        let want: String = (i..=i + 500).map(|k| format!("{k}\n")).collect();
        let got = std::fs::read_to_string(r.join(format!("w/f{i}"))).unwrap();
        assert_eq!(got, want, "fsynced file w/f{i} damaged");
        n += 1;
    }
    assert!(n >= 30);
    // The new daemon finished what the dead one started and drains its jobs.
    m.check_index_agrees();
    // The interrupted copy is an ordinary partial tree: it can be listed and removed.
    ok(&r, "find copy > /dev/null; rm -rf copy w");
    assert_eq!(common::ls_user(&r), "");
    m.check_index_agrees();
}
