//! Mounting and unmounting: mount options, stale mounts, the live session.

use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use std::os::fd::{AsRawFd, OwnedFd};

use fuser::{Config, SessionACL};
use thiserror::Error;

use crate::error::Chain;
use crate::fs::VikingFs;
use crate::fuse::{FuseFs, FuseOptions};
use crate::sys::{self, MountFlags, UnmountFlags};

#[derive(Debug, Error)]
pub enum MountError {
    #[error("unknown mount option {0:?}")]
    UnknownOption(String),
    #[error("mount option {option:?}: want {want}")]
    BadValue { option: String, want: &'static str },
    #[error("{0} is already mounted (vikingfs umount {0} first)")]
    AlreadyMounted(String),
    #[error("{path}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("{0} is busy (a file is open on it); close it or use umount -l")]
    Busy(String),
    #[error("{0} is not a mount point")]
    NotMounted(String),
    /// Not allowed to mount: the remedy is to be root (vikingfs calls mount(2) itself).
    #[error("{0}: {NOT_ALLOWED_REMEDY}")]
    NotAllowed(String),
    #[error("{0}: the kernel has no FUSE (modprobe fuse; in a container, pass --device /dev/fuse), or use `vikingfs serve` / `vikingfs mcp`, which need none")]
    NoFuse(String),
    /// `/dev/fuse` refused this process: the remedy is access to it.
    #[error("{0}: this user may not open /dev/fuse: run it as root (sudo), or in a container pass --device /dev/fuse; without FUSE use `vikingfs serve` or `vikingfs mcp`")]
    DeviceDenied(String),
}

/// What to do when mounting is not allowed: one line, the same from every place that finds out.
pub const NOT_ALLOWED_REMEDY: &str = "mounting needs root (vikingfs mounts with mount(2), \
    not fusermount3): run it with sudo, or without a mount use `vikingfs serve` (HTTP API) or \
    `vikingfs mcp`";

fn io_err(path: &Path, source: io::Error) -> MountError {
    MountError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Threads reading /dev/fuse.
const SESSION_THREADS: usize = 2;

/// What `-o` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountOptions {
    pub read_only: bool,
    /// `nopassthrough` turns FUSE passthrough off (benchmarks, old kernels).
    pub passthrough: bool,
    /// `cache_timeout=SECS`: how long the kernel may cache names and attributes.
    pub cache_timeout: std::time::Duration,
    /// `show_summaries`: list `.abstract.md` and `.overview.md` in directories (the core's
    /// [`crate::fs::FsConfig::show_summaries`]).
    pub show_summaries: bool,
    /// `remount` (with `ro` or `rw`): change a live mount's read-only flag ([`remount`]).
    pub remount: bool,
    /// `metrics=ADDR:PORT`: serve Prometheus metrics there ([`crate::metrics`]).
    pub metrics: Option<std::net::SocketAddr>,
    /// `api=ADDR:PORT`: serve OpenViking's HTTP API (and MCP) there (`crate::server`).
    pub api: Option<std::net::SocketAddr>,
    /// `log=FILE` (or `vikingfs mount --log-file FILE`): where the daemon logs (default
    /// `WORKSPACE/.vikingfs/mount.log` for a daemonised mount, stderr in the foreground).
    pub log: Option<std::path::PathBuf>,
    /// `debug`: log at debug level (`RUST_LOG` overrides).
    pub debug: bool,
    /// `dev`: device nodes on the mount may be opened (default `nodev`, as FUSE mounts are).
    pub dev: bool,
    /// `nonempty` (or `vikingfs mount --allow-non-empty`): mount over a directory that holds
    /// entries, hiding them while mounted; refused otherwise, as rclone and old fusermount do.
    pub nonempty: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            read_only: false,
            passthrough: true,
            cache_timeout: crate::fuse::DEFAULT_TTL,
            show_summaries: false,
            remount: false,
            metrics: None,
            api: None,
            log: None,
            debug: false,
            dev: false,
            nonempty: false,
        }
    }
}

/// Options mount.fuse3 and fstab pass that change nothing for vikingfs: access checks are
/// always the kernel's (default_permissions) and every user may use the mount (allow_other).
const IGNORED: &[&str] = &[
    "rw",
    "suid",
    "nosuid",
    "exec",
    "noexec",
    "atime",
    "noatime",
    "relatime",
    "norelatime",
    "strictatime",
    "nodiratime",
    "diratime",
    "lazytime",
    "nolazytime",
    "_netdev",
    "nofail",
    "defaults",
    "auto",
    "noauto",
    "user",
    "nouser",
    "users",
    "allow_other",
    "allow_root",
    "default_permissions",
    "async",
    "passthrough",
];

/// The FUSE kernel options (`NAME=VALUE`) the mount table shows and mount(8) passes back.
const KERNEL_OWN: &[&str] = &[
    "user_id", "group_id", "fd", "rootmode", "blksize", "max_read",
];

/// The seconds of `name=SECS` (a decimal from 0 to a day).
fn parse_seconds(opt: &str) -> Option<std::time::Duration> {
    let secs: f64 = opt.split_once('=')?.1.parse().ok()?;
    (secs.is_finite() && (0.0..=86_400.0).contains(&secs))
        .then(|| std::time::Duration::from_secs_f64(secs))
}

/// Parse `-o` values (each comma separated).
pub fn parse_options<S: AsRef<str>>(values: &[S]) -> Result<MountOptions, MountError> {
    let mut o = MountOptions::default();
    for v in values {
        for opt in v.as_ref().split(',').filter(|s| !s.is_empty()) {
            match opt {
                "ro" => o.read_only = true,
                "rw" => o.read_only = false,
                "remount" => o.remount = true,
                "nopassthrough" => o.passthrough = false,
                "show_summaries" => o.show_summaries = true,
                "debug" => o.debug = true,
                "dev" => o.dev = true,
                "nodev" => o.dev = false,
                "nonempty" => o.nonempty = true,
                x if x.starts_with("log=") && x.len() > "log=".len() => {
                    o.log = Some(x["log=".len()..].into())
                }
                x if x.starts_with("cache_timeout=") => {
                    o.cache_timeout = parse_seconds(x).ok_or_else(|| MountError::BadValue {
                        option: x.to_string(),
                        want: "seconds from 0 to 86400",
                    })?
                }
                x if x.starts_with("metrics=") => {
                    o.metrics =
                        Some(
                            x["metrics=".len()..]
                                .parse()
                                .map_err(|_| MountError::BadValue {
                                    option: x.to_string(),
                                    want: "an address and port, such as 127.0.0.1:9464",
                                })?,
                        )
                }
                x if x.starts_with("api=") => {
                    o.api = Some(
                        x["api=".len()..]
                            .parse()
                            .map_err(|_| MountError::BadValue {
                                option: x.to_string(),
                                want: "an address and port, such as 127.0.0.1:1933",
                            })?,
                    )
                }
                x if IGNORED.contains(&x) => {}
                // The kernel's own options, which mount(8) passes back from the mount table
                // on `mount -o remount,ro MNT`: vikingfs sets them itself.
                x if KERNEL_OWN
                    .iter()
                    .any(|k| x.strip_prefix(k).is_some_and(|v| v.starts_with('='))) => {}
                x if x.starts_with("x-") || x.starts_with("comment=") => {}
                x => return Err(MountError::UnknownOption(x.to_string())),
            }
        }
    }
    Ok(o)
}

/// `mount -o remount,ro|rw MOUNTPOINT`: the kernel flips the live mount's read-only flag;
/// the daemon goes on serving (writes then answer EROFS from the kernel, or work again).
pub fn remount(mp: &Path, read_only: bool) -> Result<(), MountError> {
    if mounted_fs_type(mp).as_deref() != Some("fuse.vikingfs") {
        return Err(MountError::NotMounted(mp.display().to_string()));
    }
    // The flags the mount was made with (mount_fuse) stay: nosuid, and nodev unless it was
    // mounted with `dev` (as the kernel reports it).
    let mut flags = MountFlags::NOSUID;
    if sys::is_nodev(mp).unwrap_or(true) {
        flags |= MountFlags::NODEV;
    }
    if read_only {
        flags |= MountFlags::RDONLY;
    }
    sys::remount(mp, flags).map_err(|e| io_err(mp, e))
}

/// Clear a mount left by a killed daemon (it answers ENOTCONN, or ECONNABORTED while the
/// kernel is still tearing the connection down) with a lazy unmount.
/// Refuses a live mount.
pub fn clear_stale(mp: &Path) -> Result<(), MountError> {
    match std::fs::metadata(mp) {
        Ok(_) => {
            if is_mount_point(mp) && mounted_fs_type(mp).as_deref() == Some("fuse.vikingfs") {
                return Err(MountError::AlreadyMounted(mp.display().to_string()));
            }
            Ok(())
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED)) => {
            tracing::info!(mountpoint = %mp.display(), "clearing a stale mount");
            detach(mp).map_err(|e| io_err(mp, e))
        }
        Err(e) => Err(io_err(mp, e)),
    }
}

/// Lazy unmount (MNT_DETACH).
pub fn detach(mp: &Path) -> io::Result<()> {
    sys::unmount(mp, UnmountFlags::DETACH)
}

/// Unmount `mp` now; EBUSY when a file is open on it.
pub fn unmount(mp: &Path) -> Result<(), MountError> {
    let Err(e) = sys::unmount(mp, UnmountFlags::empty()) else {
        return Ok(());
    };
    Err(match e.raw_os_error() {
        Some(libc::EBUSY) => MountError::Busy(mp.display().to_string()),
        Some(libc::EINVAL) => MountError::NotMounted(mp.display().to_string()),
        _ => io_err(mp, e),
    })
}

/// One line of the mount table (`/proc/self/mountinfo`), its escapes undone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    pub mountpoint: PathBuf,
    /// `fuse.vikingfs` for ours.
    pub fstype: String,
    /// What was mounted: for vikingfs, the workspace's root.
    pub source: String,
}

/// The filesystem type vikingfs mounts with (`mount_fuse`).
pub const FSTYPE: &str = "fuse.vikingfs";

/// This process's mount table, in the kernel's order (a later entry lies over an earlier one
/// on the same mount point); empty when it cannot be read.
pub fn mount_table() -> Vec<MountEntry> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default()
}

/// The vikingfs mounts of the table, as (mount point, workspace).
pub fn vikingfs_mounts() -> Vec<(PathBuf, PathBuf)> {
    mount_table()
        .into_iter()
        .filter(|e| e.fstype == FSTYPE)
        .map(|e| (e.mountpoint, PathBuf::from(e.source)))
        .collect()
}

/// `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS`
/// (proc(5)); the source and mount point with `\ooo` escapes for space, tab, newline, `\\`.
fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let mountpoint = f.nth(4)?;
            let mut rest = f.skip_while(|x| *x != "-").skip(1);
            let (fstype, source) = (rest.next()?, rest.next()?);
            Some(MountEntry {
                mountpoint: PathBuf::from(unescape(mountpoint)),
                fstype: unescape(fstype),
                source: unescape(source),
            })
        })
        .collect()
}

/// Undo the kernel's octal escapes (`\040` is a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match oct {
            Some(d) if b[i] == b'\\' => {
                out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    use std::os::unix::ffi::OsStringExt;
    std::ffi::OsString::from_vec(out)
        .to_string_lossy()
        .into_owned()
}

fn mount_entry(mp: &Path) -> Option<(String, String)> {
    let want = mp.canonicalize().unwrap_or_else(|_| mp.to_path_buf());
    mount_table()
        .into_iter()
        .rev()
        .find(|e| e.mountpoint == want)
        .map(|e| (e.source, e.fstype))
}

/// Whether something is mounted exactly at `mp`.
pub fn is_mount_point(mp: &Path) -> bool {
    mount_entry(mp).is_some()
}

/// The source the mount table shows for the mount at `mp` (for vikingfs: the workspace).
pub fn mounted_source(mp: &Path) -> Option<PathBuf> {
    mount_entry(mp).map(|(s, _)| PathBuf::from(s))
}

/// The type the mount table shows for the mount at `mp`.
pub fn mounted_fs_type(mp: &Path) -> Option<String> {
    mount_entry(mp).map(|(_, t)| t)
}

/// The kernel's FUSE device.
const FUSE_DEVICE: &str = "/dev/fuse";

/// Open the FUSE device for a session; its errors with what to do (no device, no access).
fn open_fuse_device() -> Result<OwnedFd, MountError> {
    let dev = Path::new(FUSE_DEVICE);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dev)
        .map_err(|e| {
            let what = format!("{}: {e}", dev.display());
            match e.raw_os_error() {
                Some(libc::EACCES | libc::EPERM) => MountError::DeviceDenied(what),
                Some(libc::ENOENT | libc::ENODEV | libc::ENXIO) => MountError::NoFuse(what),
                _ => io_err(dev, e),
            }
        })?;
    Ok(f.into())
}

/// Whether this process may open the FUSE device: checked by `vikingfs mount` before it
/// creates anything, so a user without access learns it first, with the remedy.
pub fn check_fuse_device() -> Result<(), MountError> {
    open_fuse_device().map(drop)
}

/// Open /dev/fuse and mount it at `mp` ourselves (fuser would name the type plain "fuse"):
/// type `fuse.vikingfs`, the workspace as source, the kernel checking permissions, every
/// user allowed in.
fn mount_fuse(source: &Path, mp: &Path, opts: &MountOptions) -> Result<OwnedFd, MountError> {
    let fd = open_fuse_device()?;
    let data = format!(
        "fd={},rootmode=40000,user_id={},group_id={},default_permissions,allow_other",
        fd.as_raw_fd(),
        sys::uid(),
        sys::gid()
    );
    let mut flags = MountFlags::NOSUID;
    if !opts.dev {
        flags |= MountFlags::NODEV;
    }
    if opts.read_only {
        flags |= MountFlags::RDONLY;
    }
    let data = CString::new(data).expect("no NUL");
    sys::mount(source, mp, c"fuse.vikingfs", flags, &data).map_err(|e| match e.raw_os_error() {
        Some(libc::EPERM) => MountError::NotAllowed(format!("mount {}: {e}", mp.display())),
        _ => io_err(mp, e),
    })?;
    Ok(fd)
}

/// A live vikingfs mount served by a background thread.
pub struct Mounted {
    pub mountpoint: PathBuf,
    thread: JoinHandle<io::Result<()>>,
    core: Arc<VikingFs>,
    notifier: Arc<std::sync::OnceLock<fuser::Notifier>>,
}

impl Mounted {
    /// Mount `core` at `mountpoint`; returns once the kernel has completed the handshake (the
    /// mount is live).
    pub fn start(
        core: Arc<VikingFs>,
        source: &Path,
        mountpoint: &Path,
        opts: &MountOptions,
        on_exit: impl FnOnce() + Send + 'static,
    ) -> Result<Mounted, MountError> {
        let fuse_fd = mount_fuse(source, mountpoint, opts)?;
        let mut config = Config::default();
        config.acl = SessionACL::All;
        // Several session threads, each with its own /dev/fuse clone, for the calls answered
        // inline; everything that may wait goes to the worker pool anyway.
        config.n_threads = Some(SESSION_THREADS);
        config.clone_fd = true;
        let fs = FuseFs::new(
            core.clone(),
            FuseOptions {
                passthrough: opts.passthrough,
                ttl: opts.cache_timeout,
                ..FuseOptions::default()
            },
        );
        let notifier = fs.notifier_slot();
        // On any failure from here on the kernel mount must go again.
        let session = fuser::Session::from_fd(fs, fuse_fd, SessionACL::All, config)
            .inspect_err(|_| {
                let _ = detach(mountpoint);
            })
            .map_err(|e| io_err(mountpoint, e))?;
        let _ = notifier.set(session.notifier());
        let thread = std::thread::Builder::new()
            .name("vikingfs-fuse".into())
            .spawn(move || {
                let r = session.run();
                on_exit();
                r
            })
            .map_err(|e| io_err(mountpoint, e))?;
        Ok(Mounted {
            mountpoint: mountpoint.to_path_buf(),
            thread,
            core,
            notifier,
        })
    }

    /// What drops the kernel's cached entry and attributes of a path changed behind the
    /// mount (not through it). Never to be called while a request through the mount may wait
    /// for something the caller holds: the kernel takes the directory's lock to invalidate.
    pub fn forgetter(&self) -> impl Fn(&crate::uri::VPath) + Send + Sync + 'static {
        let (core, notifier) = (self.core.clone(), self.notifier.clone());
        move |p| {
            let Some(n) = notifier.get() else { return };
            if let Some(ino) = core.known_ino(p) {
                let _ = n.inval_inode(fuser::INodeNo(ino), 0, 0);
            }
            let parent = p.parent().unwrap_or_else(crate::uri::VPath::root);
            if let Some(dir) = core.known_ino(&parent) {
                let _ = n.inval_entry(fuser::INodeNo(dir), std::ffi::OsStr::new(p.name()));
            }
        }
    }

    /// Unmount (lazily when files are still open: in-flight requests finish and the session
    /// ends when the last one closes) and wait for the session to end.
    pub fn stop(self) -> io::Result<()> {
        match unmount(&self.mountpoint) {
            Ok(()) | Err(MountError::NotMounted(_)) => {}
            Err(MountError::Busy(_)) => detach(&self.mountpoint)?,
            Err(e) => tracing::warn!(error = %Chain(&e), "unmount failed"),
        }
        self.join()
    }

    /// Wait until the session ends (someone unmounted it).
    pub fn join(self) -> io::Result<()> {
        self.thread
            .join()
            .map_err(|_| io::Error::other("FUSE session thread panicked"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generic_options_are_accepted_and_unknown_refused() {
        let o = parse_options(&["rw,nosuid,nodev,relatime,allow_other", "_netdev"]).unwrap();
        assert_eq!(o, MountOptions::default());
        assert!(parse_options(&["ro,nopassthrough"]).unwrap().read_only);
        assert!(!parse_options(&["nopassthrough"]).unwrap().passthrough);
        assert!(!o.show_summaries);
        let o = parse_options(&["rw,show_summaries", "_netdev"]).unwrap();
        assert!(o.show_summaries && !o.read_only);
        let o = parse_options(&["rw,cache_timeout=10"]).unwrap();
        assert_eq!(o.cache_timeout, std::time::Duration::from_secs(10));
        let o = parse_options(&["metrics=127.0.0.1:9464"]).unwrap();
        assert_eq!(o.metrics, Some("127.0.0.1:9464".parse().unwrap()));
        assert!(parse_options(&["metrics=localhost"]).is_err());
        // What mount(8) passes back on `mount -o remount,ro MNT`.
        let o = parse_options(&["remount,ro,nosuid,nodev,relatime,user_id=0,group_id=0,default_permissions,allow_other,fd=3,rootmode=40000"]).unwrap();
        assert!(o.remount && o.read_only);
        assert!(parse_options(&["user_idx=0"]).is_err());
        let o = parse_options(&["cache_timeout=0.25"]).unwrap();
        assert_eq!(o.cache_timeout, std::time::Duration::from_millis(250));
        for bad in [
            "cache_timeout=",
            "cache_timeout=-1",
            "cache_timeout=nan",
            "cache_timeout=1e9",
        ] {
            let e = parse_options(&[bad]).unwrap_err().to_string();
            assert!(e.contains(bad) && e.contains("seconds"), "{bad}: {e}");
        }
        let e = parse_options(&["rw,bogus=1"]).unwrap_err();
        assert_eq!(e.to_string(), "unknown mount option \"bogus=1\"");
    }

    #[test]
    fn mountinfo_lines_with_escapes_and_optional_fields() {
        let t = "22 27 0:21 / /proc rw,relatime - proc proc rw\n\
                 90 27 0:50 / /tmp/a\\040b/mnt rw,nosuid shared:7 master:1 - fuse.vikingfs \
                 /tmp/a\\040b/ws\\134x rw,user_id=0\n\
                 garbage\n";
        let e = parse_mountinfo(t);
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!(e[1].mountpoint, Path::new("/tmp/a b/mnt"));
        assert_eq!(e[1].fstype, FSTYPE);
        assert_eq!(e[1].source, "/tmp/a b/ws\\x");
        assert_eq!(unescape("\\04x\\"), "\\04x\\");
    }
}
