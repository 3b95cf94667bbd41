//! A GlusterFS server of one test: `glusterd` in a network namespace of the test's [`Lab`]
//! (a host of the lab that runs nothing else), in a PID namespace of its own (so that the
//! bricks it starts die with it, whatever kills the test: `unshare --kill-child`) and a mount
//! namespace of its own, where a directory of the test is bind-mounted over each place
//! glusterd keeps state (`/var/lib/glusterd`, `/run`, `/var/log/glusterfs`): nothing of it is
//! left on the machine and two tests' servers never meet. Its bricks are directories of the
//! test; clients mount its volumes with `mount -t glusterfs` (the fstab path) or `glusterfs`
//! itself, from a host's network namespace.
//!
//! Without GlusterFS (`glusterd`, `mount.glusterfs`) installed the test fails saying so:
//! `.ci/run` installs it.
//!
//! [`Lab`]: super::netns::Lab

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The volume options that make every client coherent: no performance translator that
/// caches or defers (docs/several-hosts.md).
pub const COHERENT: &[&str] = &[
    "performance.quick-read",
    "performance.io-cache",
    "performance.open-behind",
    "performance.write-behind",
    "performance.stat-prefetch",
    "performance.read-ahead",
    "performance.readdir-ahead",
];

/// The client options of docs/several-hosts.md's fstab line.
pub const FSTAB_OPTIONS: &str =
    "attribute-timeout=0,entry-timeout=0,negative-timeout=0,direct-io-mode=enable";

/// The same, as `glusterfs`'s own flags (the systemd unit of docs/several-hosts.md).
pub const CLIENT_FLAGS: &[&str] = &[
    "--attribute-timeout=0",
    "--entry-timeout=0",
    "--negative-timeout=0",
    "--fopen-keep-cache=off",
];

pub struct Gluster {
    /// The server's address (in its network namespace).
    pub addr: String,
    netns: String,
    state: PathBuf,
    server: Child,
    /// What clients mounted, unmounted on drop.
    mounts: Vec<PathBuf>,
}

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

fn run_ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// glusterd's mount namespace: the test's private state over its default places; first every
/// FUSE mount copied in from the test's namespace goes (a copy would keep another test's
/// daemon's session open until this server stops).
const PRIVATE_STATE: &str = r#"
findmnt -rn -t fuse,fuse.vikingfs,fuse.glusterfs -o TARGET | while read -r m; do umount -l "$m"; done
mount --bind "$STATE/lib" /var/lib/glusterd
mount --bind "$STATE/run" /run
mount --bind "$STATE/log" /var/log/glusterfs
exec glusterd -N -L WARNING
"#;

impl Gluster {
    /// Whether GlusterFS's server and client are installed.
    pub fn installed() -> bool {
        [
            "/usr/sbin/glusterd",
            "/usr/sbin/mount.glusterfs",
            "/usr/sbin/gluster",
        ]
        .iter()
        .all(|p| Path::new(p).exists())
    }

    /// glusterd in network namespace `netns`, where it listens on `addr`; its state under
    /// `state` (made here).
    pub fn start(netns: &str, addr: &str, state: &Path) -> Gluster {
        assert!(
            Self::installed(),
            "GlusterFS is not installed: apt-get install glusterfs-server glusterfs-client \
             (.ci/run installs them)"
        );
        for d in ["lib", "run/gluster", "log", "bricks"] {
            std::fs::create_dir_all(state.join(d)).unwrap();
        }
        let log = std::fs::File::create(state.join("glusterd.out")).unwrap();
        let server = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{netns}"))
            .args([
                "--",
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--pid",
                "--fork",
                "--kill-child",
                "--",
                "sh",
                "-c",
                PRIVATE_STATE,
            ])
            .env("STATE", state)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start glusterd");
        let mut g = Gluster {
            addr: addr.to_string(),
            netns: netns.to_string(),
            state: state.to_path_buf(),
            server,
            mounts: Vec::new(),
        };
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let out = run(&mut g.cli(&["volume", "list"]));
            if out.status.success() {
                break;
            }
            if let Some(st) = g.server.try_wait().unwrap() {
                panic!("glusterd exited ({st}): {}", g.logs());
            }
            assert!(
                Instant::now() < until,
                "glusterd never answered: {}",
                g.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        g
    }

    /// `gluster --mode=script ARGS`, through the server's own socket.
    fn cli(&self, args: &[&str]) -> Command {
        let mut c = Command::new("gluster");
        c.arg("--mode=script")
            .arg(format!(
                "--glusterd-sock={}",
                self.state.join("run/glusterd.socket").display()
            ))
            .args(args);
        c
    }

    /// What glusterd said and logged.
    pub fn logs(&self) -> String {
        let mut out = std::fs::read_to_string(self.state.join("glusterd.out")).unwrap_or_default();
        out += &std::fs::read_to_string(self.state.join("log/glusterd.log")).unwrap_or_default();
        out
    }

    /// Create and start volume `name` of one brick; with `coherent`, every option of
    /// [`COHERENT`] off, else GlusterFS's defaults.
    pub fn volume(&self, name: &str, coherent: bool) {
        let brick = self.state.join("bricks").join(name);
        std::fs::create_dir(&brick).unwrap();
        let at = format!("{}:{}", self.addr, brick.display());
        // `force`: the brick is on the root filesystem (as a test's directory is).
        run_ok(&mut self.cli(&["volume", "create", name, &at, "force"]));
        if coherent {
            for o in COHERENT {
                run_ok(&mut self.cli(&["volume", "set", name, o, "off"]));
            }
        }
        run_ok(&mut self.cli(&["volume", "start", name]));
    }

    /// `mount -t glusterfs -o OPTIONS ADDR:/VOLUME MP` from network namespace `netns`: the
    /// mount helper, as fstab's line runs it.
    pub fn mount(&mut self, netns: &str, volume: &str, mp: &Path, options: &str) {
        std::fs::create_dir_all(mp).unwrap();
        let log = self.client_log(mp);
        let opts = if options.is_empty() {
            format!("log-file={log}")
        } else {
            format!("{options},log-file={log}")
        };
        run_ok(
            Command::new("nsenter")
                .arg(format!("--net=/run/netns/{netns}"))
                .args(["--", "mount", "-t", "glusterfs", "-o", &opts])
                .arg(format!("{}:/{volume}", self.addr))
                .arg(mp),
        );
        self.mounts.push(mp.to_path_buf());
    }

    /// `glusterfs FLAGS --volfile-server=ADDR --volfile-id=/VOLUME MP` from network namespace
    /// `netns` (what the systemd unit runs: the mount helper cannot turn fopen-keep-cache off).
    pub fn mount_direct(&mut self, netns: &str, volume: &str, mp: &Path, flags: &[&str]) {
        std::fs::create_dir_all(mp).unwrap();
        let log = self.client_log(mp);
        run_ok(
            Command::new("nsenter")
                .arg(format!("--net=/run/netns/{netns}"))
                .args(["--", "glusterfs"])
                .args(flags)
                .arg(format!("--log-file={log}"))
                .arg(format!("--volfile-server={}", self.addr))
                .arg(format!("--volfile-id=/{volume}"))
                .arg(mp),
        );
        self.mounts.push(mp.to_path_buf());
        // glusterfs returns before its mount is live.
        let until = Instant::now() + Duration::from_secs(30);
        while !std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .any(|l| l.contains(" - fuse.glusterfs ") && l.contains(&format!(" {} ", mp.display())))
        {
            assert!(
                Instant::now() < until,
                "glusterfs never mounted {}",
                mp.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn client_log(&self, mp: &Path) -> String {
        let name = mp.to_string_lossy().replace('/', "-");
        self.state
            .join("log")
            .join(format!("client{name}.log"))
            .display()
            .to_string()
    }
}

impl Drop for Gluster {
    fn drop(&mut self) {
        // Clients first (each exits once its mount is gone), then the server: SIGKILL to
        // unshare takes glusterd (PID 1 of its namespace) and with it every brick.
        for mp in self.mounts.iter().rev() {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(mp)
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}
