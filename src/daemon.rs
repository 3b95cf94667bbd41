//! Registry of running vikingfs daemons: one JSON record per daemon under
//! `WORKSPACE/.vikingfs/daemons/{host}-{pid}.json`, so `vikingfs status` can show who serves a workspace and
//! where, and `--wait` commands know whether a worker pool is already draining the queues.
//!
//! A record names its process by pid and start time, like a lock owner: a record whose process
//! is gone (a daemon killed with SIGKILL) is ignored and removed by the next reader.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::process::{host_id, process_start, running_process_start, seen, Seen};
use crate::workspace::Workspace;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DaemonRecord {
    pub pid: u32,
    /// Process start time (clock ticks since boot), so a reused pid is not taken for us.
    pub start: u64,
    pub host: String,
    pub mountpoint: Option<PathBuf>,
    /// Unix time the daemon started.
    pub started_at: u64,
    pub version: String,
    /// True when this daemon runs the worker pool.
    pub workers: bool,
    /// Where it serves Prometheus metrics (`-o metrics=`), if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
    /// Where it serves OpenViking's HTTP API (`-o api=`, `vikingfs serve`), if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    /// The file it logs to, when it is not a terminal's stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<PathBuf>,
}

/// Removes the record when the daemon stops (also on panic).
#[derive(Debug)]
pub struct Registration {
    path: PathBuf,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One daemon of a workspace per host, held from before the daemon opens anything until it
/// exits: an exclusive `flock` on `daemons/{host}.lock`. The registry's records are written
/// once a daemon serves, so two daemons started in the same instant would both find none;
/// the lock lets exactly one through. The kernel releases it when the process dies, so a
/// killed daemon never holds back the next; the file name carries the host, so daemons of
/// other hosts sharing the workspace take their own.
pub struct HostLease {
    _file: std::fs::File,
}

/// Take this host's lease on `ws` if no other daemon of this host holds it (`None`).
pub fn try_host_lease(ws: &Workspace) -> io::Result<Option<HostLease>> {
    use std::os::unix::fs::OpenOptionsExt;
    let d = dir(ws);
    std::fs::create_dir_all(&d)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o644)
        .open(d.join(format!("{}.lock", host_id())))?;
    match crate::sys::flock(&file, crate::sys::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(HostLease { _file: file })),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

fn dir(ws: &Workspace) -> PathBuf {
    ws.internal_dir().join("daemons")
}

/// The record file of daemon `pid` of host `host`: pids alone collide across hosts (and PID
/// namespaces) sharing one workspace, and a daemon would overwrite, then remove, another's.
fn record_name(host: &str, pid: u32) -> String {
    format!("{host}-{pid}.json")
}

/// Record this process as a daemon of `ws`.
pub fn register(
    ws: &Workspace,
    mountpoint: Option<&Path>,
    workers: bool,
    metrics: Option<String>,
    api: Option<String>,
    log: Option<PathBuf>,
) -> io::Result<Registration> {
    let pid = std::process::id();
    let rec = DaemonRecord {
        pid,
        start: process_start(pid).unwrap_or(0),
        host: host_id().to_string(),
        mountpoint: mountpoint.map(Path::to_path_buf),
        started_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        version: env!("CARGO_PKG_VERSION").to_string(),
        workers,
        metrics,
        api,
        log,
    };
    let d = dir(ws);
    std::fs::create_dir_all(&d)?;
    let path = d.join(record_name(&rec.host, pid));
    let text = serde_json::to_vec_pretty(&rec)?;
    crate::fsx::replace(&path, &text, 0o644, crate::fsx::Durable::Content)?;
    Ok(Registration { path })
}

/// The running daemon that serves the mount at `mp`, from the records of the workspace whose
/// root is `ws_root` (what the mount table names as the mount's source).
pub fn serving(ws_root: &Path, mp: &Path) -> Option<DaemonRecord> {
    let dir = ws_root.join(crate::workspace::INTERNAL_DIR).join("daemons");
    let want = mp.canonicalize().unwrap_or_else(|_| mp.to_path_buf());
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice::<DaemonRecord>(&b).ok())
        .find(|r| {
            r.mountpoint.as_deref() == Some(want.as_path())
                && r.host == host_id()
                && running_process_start(r.pid) == Some(r.start)
        })
}

impl DaemonRecord {
    /// Whether the process of this record still runs.
    pub fn is_running(&self) -> bool {
        running_process_start(self.pid) == Some(self.start)
    }
}

/// Daemons of `ws` that are running now; records of dead ones are removed.
pub fn running(ws: &Workspace) -> io::Result<Vec<DaemonRecord>> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(dir(ws)) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for e in entries {
        let path = e?.path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let Ok(text) = std::fs::read(&path) else {
            continue;
        };
        let Ok(rec) = serde_json::from_slice::<DaemonRecord>(&text) else {
            continue;
        };
        if rec.host != host_id() {
            // Another host or PID namespace: we cannot check it, so show it as it is.
            out.push(rec);
            continue;
        }
        // A killed daemon waiting to be reaped (a zombie) serves nothing any more; one that
        // /proc does not show us (hidepid, a failed read) is not taken for dead.
        match seen(rec.pid) {
            Seen::Running(start) if start == rec.start => out.push(rec),
            Seen::Unknown => out.push(rec),
            Seen::Running(_) | Seen::Gone => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    out.sort_by_key(|r| r.pid);
    Ok(out)
}

/// Is a daemon with a worker pool serving this workspace?
pub fn workers_running(ws: &Workspace) -> bool {
    running(ws).is_ok_and(|v| v.iter().any(|r| r.workers && r.host == host_id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_list_and_forget_dead() {
        let d = tempfile::tempdir().unwrap();
        let ws = Workspace::open(d.path(), "default", "default").unwrap();
        assert!(running(&ws).unwrap().is_empty());
        let reg = register(&ws, Some(Path::new("/mnt/x")), true, None, None, None).unwrap();
        let list = running(&ws).unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].pid, std::process::id());
        assert!(workers_running(&ws));
        // A record of a process that is gone is dropped by the next reader.
        let mut dead = list[0].clone();
        dead.pid = u32::MAX - 1;
        std::fs::write(
            dir(&ws).join(record_name(&dead.host, dead.pid)),
            serde_json::to_vec(&dead).unwrap(),
        )
        .unwrap();
        assert_eq!(running(&ws).unwrap().len(), 1);
        assert!(!dir(&ws).join(record_name(&dead.host, dead.pid)).exists());
        drop(reg);
        assert!(running(&ws).unwrap().is_empty());
    }
}
