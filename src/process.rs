//! Which host and process this is, and whether another process still runs: what lock owner
//! names (`vfs-{host}-{pid}-{start}-…`, see [`crate::lock::codec`]) and the daemon registry
//! ([`crate::daemon`]) are both made of. A pid alone is not an identity (the kernel reuses
//! pids): it is paired with the process's start time, and the host with its boot.

use std::sync::OnceLock;

use sha1::{Digest, Sha1};

/// This host's identity: 12 hex digits of SHA-1 over the boot id and the PID namespace inode
/// (two containers on one kernel are two hosts: their pids are not comparable).
pub fn host_id() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        let pidns = std::fs::read_link("/proc/self/ns/pid")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut h = Sha1::new();
        h.update(boot.trim().as_bytes());
        h.update(b"\n");
        h.update(pidns.as_bytes());
        hex::encode(&h.finalize()[..6])
    })
}

/// What `/proc` says of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// It runs, started at this time (clock ticks since boot; field 22 of `/proc/PID/stat`).
    Running(u64),
    /// No such process, or one that has exited and waits to be reaped (a zombie, state `Z`,
    /// or `X` while being reaped): a daemon killed with SIGKILL stays a zombie until reaped,
    /// and its locks must be free at once.
    Gone,
    /// `/proc` would not say (hidden by `hidepid`, unreadable, not mounted): nothing may be
    /// taken from such a process on the strength of this answer.
    Unknown,
}

/// The state letter and start time of process `pid`, from `/proc/PID/stat`; `None` when
/// there is no such process.
fn state_and_start(pid: u32) -> std::io::Result<Option<(String, u64)>> {
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s,
        // ESRCH: the process went between the open and the read.
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(libc::ESRCH) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "unexpected /proc/PID/stat");
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let mut fields = stat[stat.rfind(')').ok_or_else(bad)? + 1..].split_whitespace();
    let state = fields.next().ok_or_else(bad)?.to_string();
    // Field 22 overall: the 19th after the state.
    let start = fields
        .nth(18)
        .and_then(|f| f.parse().ok())
        .ok_or_else(bad)?;
    Ok(Some((state, start)))
}

/// Whether process `pid` runs, and since when.
pub fn seen(pid: u32) -> Seen {
    match state_and_start(pid) {
        Ok(Some((state, _))) if matches!(state.as_str(), "Z" | "X" | "x") => Seen::Gone,
        Ok(Some((_, start))) => Seen::Running(start),
        Ok(None) => Seen::Gone,
        Err(_) => Seen::Unknown,
    }
}

/// Start time of a process in clock ticks since boot (field 22 of `/proc/PID/stat`), zombies
/// included.
pub fn process_start(pid: u32) -> Option<u64> {
    state_and_start(pid).ok().flatten().map(|(_, start)| start)
}

/// [`process_start`] of a process that still runs ([`Seen::Running`]).
pub fn running_process_start(pid: u32) -> Option<u64> {
    match seen(pid) {
        Seen::Running(start) => Some(start),
        Seen::Gone | Seen::Unknown => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_runs_and_a_reaped_pid_does_not() {
        let me = std::process::id();
        assert!(process_start(me).is_some());
        assert_eq!(running_process_start(me), process_start(me));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(running_process_start(pid), None);
        assert_eq!(seen(pid), Seen::Gone);
        assert_eq!(seen(me), Seen::Running(process_start(me).unwrap()));
        assert_eq!(host_id().len(), 12);
    }
}

thread_local! {
    /// The process a face is serving on this thread (a FUSE request's pid).
    static REQUESTER: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
}

/// Run `f` on behalf of process `pid` ([`requester`] says so meanwhile): who asked, for the
/// history's entries.
pub fn on_behalf_of<T>(pid: u32, f: impl FnOnce() -> T) -> T {
    let before = REQUESTER.with(|r| r.replace(Some(pid)));
    let out = f();
    REQUESTER.with(|r| r.set(before));
    out
}

/// The process this thread serves: a face's requester, else this process.
pub fn requester() -> u32 {
    REQUESTER.with(|r| r.get()).unwrap_or_else(std::process::id)
}

thread_local! {
    /// Who a remote request on this thread is for (an HTTP API caller), as the history names
    /// it in place of a command line.
    static CALLER: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Run `f` for the remote `caller` ([`caller`] says so meanwhile).
pub fn for_caller<T>(caller: Option<String>, f: impl FnOnce() -> T) -> T {
    let before = CALLER.with(|c| c.replace(caller));
    let out = f();
    CALLER.with(|c| *c.borrow_mut() = before);
    out
}

/// The remote caller this thread serves, if any.
pub fn caller() -> Option<String> {
    CALLER.with(|c| c.borrow().clone())
}

/// The process the history's entries name as the one that asked: [`requester`], but `None`
/// for a remote caller (an API request, an MCP tool call), which [`caller`] names instead —
/// the daemon's pid, shared by every such caller, would make all of them one command.
pub fn requester_pid() -> Option<u32> {
    match caller() {
        Some(_) => None,
        None => Some(requester()),
    }
}
