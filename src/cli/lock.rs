//! `vikingfs lock` (run a command holding a path lock, like flock(1)) and `vikingfs locks`
//! (list every lock file of the workspace).
//!
//! The lock lives as long as the command: once it runs, the lock file names the command's
//! process (so SIGKILL of `vikingfs lock` leaves it held), the usual stop signals are passed
//! on to it, and the lock is released only after it has exited.

use std::process::Command as Proc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use super::{Ctx, EXIT_BUSY};
use crate::error::Chain;
use crate::lock::{codec, LockError, LockKind, LockManager};
use crate::sys::{self, BlockedSignals, Signal};

/// What `lock` passes on to its command, as timeout(1) does, rather than die and leave the
/// command running with the lock gone: the command decides, and the lock lives until it exits.
const FORWARDED: [Signal; 6] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

#[derive(Args, Debug)]
pub struct LockArgs {
    /// Take a TREE lock (the whole subtree) instead of an EXACT one.
    #[arg(long)]
    pub tree: bool,
    /// Seconds to wait for a busy lock (default: the configured lock_timeout, 0 = fail at once).
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,
    /// The viking:// URI to lock, or a path under a mount of the workspace.
    pub uri: String,
    /// The command to run while holding the lock.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct LocksArgs {
    /// Print a JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn lock(ctx: &Ctx, a: &LockArgs) -> anyhow::Result<i32> {
    let path = ctx
        .target(&a.uri)
        .with_context(|| format!("lock {}", a.uri))?;
    let ws = ctx.workspace()?;
    let timeout = match a.timeout {
        Some(s) if !(s.is_finite() && s >= 0.0) => {
            return super::usage(format!("--timeout {s}: must be a number of seconds >= 0"))
        }
        Some(s) => Duration::from_secs_f64(s),
        None => ctx.config.lock.timeout,
    };
    let kind = if a.tree {
        LockKind::Tree
    } else {
        LockKind::Exact
    };
    // Blocked before any thread starts (the lock's own inherit the mask), taken only by the
    // forwarder below; unblocked again in the command.
    let signals = BlockedSignals::block(&FORWARDED).context("block signals")?;
    let mgr = LockManager::new(&ws, ctx.config.lock.clone())?;
    let guard = match mgr.acquire(&[(path, kind)], timeout) {
        Ok(g) => g,
        Err(e @ LockError::Busy { .. }) => {
            eprintln!("vikingfs: lock {}: {}", a.uri, Chain(&e));
            return Ok(EXIT_BUSY);
        }
        Err(e) => return Err(e).with_context(|| format!("lock {}", a.uri)),
    };
    let mut cmd = Proc::new(&a.command[0]);
    cmd.args(&a.command[1..]);
    signals.unblocked_in(&mut cmd);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot run {:?}", a.command[0]))?;
    let pid = child.id();
    // The lock is the command's from now on: killed with SIGKILL, this process leaves it held
    // for as long as the command runs (its liveness is the command's), as flock(1)'s is.
    let mut handed = false;
    if let Some(owner) = codec::owner_of_process(pid) {
        match guard.hand_over(&owner) {
            Ok(()) => handed = true,
            Err(e) => tracing::warn!(error = %Chain(&e), "the lock stays this process's"),
        }
    }
    std::thread::spawn(move || {
        // One the terminal sent reached the command already (same foreground process
        // group): passing it on would deliver a second ^C.
        while let Ok((sig, from_terminal)) = signals.wait_info() {
            if !from_terminal {
                let _ = sys::signal_process(pid, sig);
            }
        }
    });
    let status = child.wait().context("wait for the command")?;
    match guard.release() {
        // Held by the command, the lock was free to take the moment it exited (a process
        // that has exited owns nothing); by then its work was done.
        Err(LockError::Lost { .. }) if handed => {}
        r => r?,
    }
    use std::os::unix::process::ExitStatusExt;
    Ok(status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1))
}

pub fn locks(ctx: &Ctx, a: &LocksArgs) -> anyhow::Result<i32> {
    let ws = ctx.existing_workspace()?;
    let mgr = LockManager::new(&ws, ctx.config.lock.clone())?;
    let list = mgr.list()?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(0);
    }
    if list.is_empty() {
        println!("no locks in {}", ws.data_root().display());
        return Ok(0);
    }
    println!("{:<5} {:>9}  URI  OWNER  (STATE)", "KIND", "AGE");
    for l in &list {
        let state = match &l.stale_reason {
            Some(r) if l.stale => format!("stale: {r}"),
            Some(r) => format!("error: {r}"),
            None => "held".to_string(),
        };
        println!(
            "{:<5} {:>8.1}s  {}  {}  ({state})",
            l.kind.as_str(),
            l.age_secs,
            l.uri,
            if l.owner.is_empty() { "-" } else { &l.owner },
        );
    }
    Ok(0)
}
