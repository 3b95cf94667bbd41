//! Tests through real mount points: a [`Mount`] fixture that mounts a fresh workspace with
//! the `vikingfs` binary and always unmounts (lazily if it must) on drop, shell command lines
//! run in it, and listings of what a tree holds with and without vikingfs's derived files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use super::{assert_fsck_clean, vikingfs, wait_gone};

/// `fsck --json` output naming an operation still running (an interrupted one whose owner is
/// alive).
fn finishing(fsck: &Output) -> bool {
    serde_json::from_slice::<serde_json::Value>(&fsck.stdout)
        .ok()
        .and_then(|v| v["problems"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .any(|p| p["kind"] == "interrupted" && p["owner_alive"] == true)
}

/// A vikingfs mount of a fresh workspace in its own temp dir.
pub struct Mount {
    pub dir: tempfile::TempDir,
    pub ws: PathBuf,
    pub mp: PathBuf,
    pub options: Vec<String>,
}

impl Mount {
    pub fn new() -> Mount {
        Self::with_options(&[])
    }

    pub fn with_options(options: &[&str]) -> Mount {
        let m = Self::unmounted(options);
        m.mount();
        m
    }

    /// A fresh mount whose daemon also gets `env` (set for it alone, not for this process,
    /// whose other threads may read the environment).
    pub fn with_env(env: &[(&str, &str)]) -> Mount {
        let m = Self::unmounted(&[]);
        m.mount_with_env(env);
        m
    }

    /// A fresh mount whose daemon runs under `wrapper` (a command line it ends, as
    /// `setpriv …`), with `env` set for it alone. A later [`Mount::mount`] runs it bare.
    pub fn wrapped(wrapper: &[&str], env: &[(&str, &str)]) -> Mount {
        let m = Self::unmounted(&[]);
        m.start(wrapper, env);
        m
    }

    fn unmounted(options: &[&str]) -> Mount {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().join("ws");
        let mp = dir.path().join("mnt");
        std::fs::create_dir_all(&mp).unwrap();
        Mount {
            dir,
            ws,
            mp,
            options: options.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Mount with `config` (JSON) as the user's `~/.vikingfs/config.json`.
    pub fn with_config(config: &str) -> Mount {
        let m = Self::configured(config, &[]);
        m.mount();
        m
    }

    /// A fresh mount (not mounted yet) with `config` (JSON) as the user's config file.
    fn configured(config: &str, options: &[&str]) -> Mount {
        let m = Self::unmounted(options);
        std::fs::create_dir_all(m.dir.path().join(".vikingfs")).unwrap();
        std::fs::write(m.dir.path().join(".vikingfs/config.json"), config).unwrap();
        m
    }

    /// A mount whose daemon also serves OpenViking's API (and MCP) on a loopback port the
    /// kernel picks, with `config` (JSON) as the user's config file and `env` set for the
    /// daemon alone; returns it with the API's address.
    pub fn with_api(config: &str, env: &[(&str, &str)]) -> (Mount, std::net::SocketAddr) {
        let m = Self::configured(config, &["api=127.0.0.1:0"]);
        m.mount_with_env(env);
        let addr = super::serve::wait_for_api(&m.ws, Path::new("/dev/null"));
        (m, addr)
    }

    /// `vikingfs --workspace WS ARGS` with this mount's HOME.
    pub fn cli(&self, args: &[&str]) -> Command {
        let mut c = vikingfs(self.dir.path());
        c.arg("--workspace").arg(&self.ws).args(args);
        c
    }

    /// `vikingfs wait` (the daemon's workers drain the queues), then `vikingfs fsck --json`:
    /// the index agrees with the files — no record without its file, no file or directory
    /// without its current records, no failed job, no unfinished operation.
    ///
    /// An operation the mount has answered may still be finishing its tail (closing its
    /// intent, queueing its parents' summaries: `src/fs/tail.rs`), which fsck reports as an
    /// interrupted operation whose owner is alive: that is waited out (then the jobs it queued),
    /// for at most a minute, after which it counts as a problem like any other.
    pub fn check_index_agrees(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = self.cli(&["wait", "--timeout", "300"]).output().unwrap();
            assert!(
                out.status.success(),
                "vikingfs wait: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let fsck = self.cli(&["fsck", "--json"]).output().unwrap();
            if Instant::now() < deadline && finishing(&fsck) {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            assert_fsck_clean(&fsck);
            return;
        }
    }

    /// `status --json` says no queue holds a dead job.
    pub fn assert_no_dead_jobs(&self) {
        let out = self.cli(&["status", "--json"]).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "status output: {e}: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        for (q, s) in v["queues"].as_object().unwrap() {
            assert_eq!(s["dead"], 0, "dead {q} jobs: {s}");
        }
    }

    pub fn pid_file(&self) -> PathBuf {
        self.dir.path().join("daemon.pid")
    }

    /// Start the daemon; returns once the mount is live.
    pub fn mount(&self) {
        self.mount_with_env(&[]);
    }

    /// [`Mount::mount`] with extra environment for the daemon (e.g. a crash point).
    pub fn mount_with_env(&self, env: &[(&str, &str)]) {
        self.start(&[], env);
    }

    /// `vikingfs mount` of this workspace, run by `wrapper` when it is not empty.
    fn start(&self, wrapper: &[&str], env: &[(&str, &str)]) {
        let bare = vikingfs(self.dir.path());
        let mut c = match wrapper.split_first() {
            None => bare,
            Some((prog, args)) => {
                let mut c = Command::new(prog);
                c.args(args).arg(bare.get_program());
                for (k, v) in bare.get_envs() {
                    match v {
                        Some(v) => c.env(k, v),
                        None => c.env_remove(k),
                    };
                }
                c
            }
        };
        c.envs(env.iter().copied());
        c.arg("mount").arg("--pid-file").arg(self.pid_file());
        for o in &self.options {
            c.arg("-o").arg(o);
        }
        let out = c
            .arg(&self.ws)
            .arg(&self.mp)
            .output()
            .expect("run vikingfs");
        assert!(
            out.status.success(),
            "vikingfs mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn pid(&self) -> i32 {
        std::fs::read_to_string(self.pid_file())
            .expect("pid file")
            .trim()
            .parse()
            .expect("pid")
    }

    /// `MOUNT/resources`: where user files go.
    pub fn res(&self) -> PathBuf {
        self.mp.join("resources")
    }

    /// The backing directory of `resources/`.
    pub fn backing(&self) -> PathBuf {
        self.ws.join("viking/default/resources")
    }

    /// kill -9 the daemon and wait until it is gone (the mount stays, answering ENOTCONN).
    pub fn kill9(&self) {
        let pid = self.pid();
        super::signal(pid, libc::SIGKILL);
        wait_gone(pid);
        // The leader turns zombie before its other threads have closed /dev/fuse: wait for
        // the kernel to see the connection gone.
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::fs::metadata(&self.mp)
            .err()
            .and_then(|e| e.raw_os_error())
            != Some(libc::ENOTCONN)
        {
            assert!(
                Instant::now() < deadline,
                "mount still answers after kill -9"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Unmount (lazily if it must) and wait for the daemon to exit.
    pub fn unmount(&self) {
        unmount(self.dir.path(), &self.mp, &self.pid_file());
    }
}

/// `vikingfs umount MP` with HOME at `home` (`umount -l` if that fails), then wait for the
/// daemon named by `pid_file` to exit.
pub fn unmount(home: &Path, mp: &Path, pid_file: &Path) {
    let pid = std::fs::read_to_string(pid_file)
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok());
    let out = vikingfs(home).arg("umount").arg(mp).output();
    if !out.map(|o| o.status.success()).unwrap_or(false) {
        let _ = Command::new("umount").arg("-l").arg(mp).status();
    }
    if let Some(pid) = pid {
        wait_gone(pid);
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        self.unmount();
    }
}

/// Whether anything is mounted at `mp` (the mount table, as the library reads it).
pub fn is_mounted(mp: &Path) -> bool {
    vikingfs::fuse::mount::is_mount_point(mp)
}

/// Run a shell command line in `dir`; returns its output.
pub fn sh(dir: &Path, script: &str) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .expect("run sh")
}

/// Run a shell command line in `dir` and insist it succeeds; returns stdout.
pub fn ok(dir: &Path, script: &str) -> String {
    let out = sh(dir, script);
    assert!(
        out.status.success(),
        "`{script}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Run a shell command line and insist it fails; returns stderr.
pub fn fails(dir: &Path, script: &str) -> String {
    let out = sh(dir, script);
    assert!(!out.status.success(), "`{script}` should have failed");
    String::from_utf8(out.stderr).unwrap()
}

/// Every path under `root` (relative, sorted) with its kind and, for files, content.
pub fn tree(root: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

/// Is `rel` (a path from [`tree`]) something vikingfs derives or keeps for itself: a
/// directory summary written by the background workers (`.abstract.md`, `.overview.md`), or
/// an internal file of the backing store (lock files, `.vikingfs.*` temp files)?
pub fn is_derived(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    vikingfs::uri::is_sidecar_name(name) || vikingfs::uri::is_internal_name(name)
}

/// [`tree`] of what users made: without derived files (see [`is_derived`]). For comparing a
/// mount (or its backing directory) with a plain directory, where summaries never appear.
/// Only regular files are dropped: a directory or symlink with such a name still differs.
pub fn user_tree(root: &Path) -> Vec<(String, String)> {
    tree(root)
        .into_iter()
        .filter(|(rel, kind)| !(kind.starts_with("file ") && is_derived(rel)))
        .collect()
}

/// `ls -A` of `dir` without derived files, one name a line.
pub fn ls_user(dir: &Path) -> String {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !is_derived(n))
        .collect();
    names.sort();
    names.iter().map(|n| format!("{n}\n")).collect()
}

/// A lock token an OpenViking process left behind long ago: a foreign owner, so judged by
/// its age, and far older than any lock_expire (stale, free to take over).
pub fn stale_token(kind: char) -> String {
    format!("3f6c0f52-openviking-owner:1000000000:{kind}")
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        let rel = p.strip_prefix(root).unwrap().display().to_string();
        let md = match std::fs::symlink_metadata(&p) {
            Ok(md) => md,
            // A lock or temp file of the backing store, gone since the listing.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && is_derived(&rel) => continue,
            Err(e) => panic!("{}: {e}", p.display()),
        };
        if md.is_dir() {
            out.push((rel, "dir".into()));
            walk(root, &p, out);
        } else if md.file_type().is_symlink() {
            out.push((
                rel,
                format!("-> {}", std::fs::read_link(&p).unwrap().display()),
            ));
        } else {
            let data = match std::fs::read(&p) {
                Ok(d) => d,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && is_derived(&rel) => continue,
                Err(e) => panic!("{}: {e}", p.display()),
            };
            out.push((rel, format!("file {}", String::from_utf8_lossy(&data))));
        }
    }
}
