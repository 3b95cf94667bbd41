//! The process's own state and its dealings with other processes: who it runs as, its umask,
//! its descriptor limit, a thread's priority, signals, pipes and sessions for children, and
//! whether another process lives.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};
use std::process::Command;

use rustix::fs::FileType;
use rustix::io::{Errno, FdFlags};
use rustix::process::{Pid, Resource, Rlimit};

pub use nix::sys::signal::Signal;

/// The real user id.
pub fn uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// The real group id.
pub fn gid() -> u32 {
    rustix::process::getgid().as_raw()
}

/// The effective user id.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The effective group id.
pub fn egid() -> u32 {
    rustix::process::getegid().as_raw()
}

/// Whether the process runs as root (effective uid 0).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Whether the process may mount a filesystem: CAP_SYS_ADMIN in its effective set (root has
/// it; a user namespace's root has it there). vikingfs mounts with mount(2) itself, not through
/// the setuid fusermount3. True when /proc does not say, so the mount's own error decides.
pub fn can_mount() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_none_or(|caps| caps & (1 << CAP_SYS_ADMIN) != 0)
}

/// The process's umask, read from /proc (umask(2) cannot be read without being set, which
/// races with other threads creating files); 0o022 when /proc does not say.
pub fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

/// The soft limit of open descriptors (RLIMIT_NOFILE); `u64::MAX` when unlimited.
pub fn nofile_limit() -> u64 {
    rustix::process::getrlimit(Resource::Nofile)
        .current
        .unwrap_or(u64::MAX)
}

/// Raise the soft limit of open descriptors to the hard limit (best effort).
pub fn raise_nofile_limit() {
    let Rlimit { maximum, .. } = rustix::process::getrlimit(Resource::Nofile);
    let raised = Rlimit {
        current: maximum,
        maximum,
    };
    let _ = rustix::process::setrlimit(Resource::Nofile, raised);
}

/// Set the calling thread's nice value (on Linux, setpriority(2) of a thread id is per
/// thread).
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    let tid = rustix::thread::gettid();
    Ok(rustix::process::setpriority_process(Some(tid), nice)?)
}

/// Whether process `pid` exists (signal 0; a process we may not signal exists too). A number
/// that names no single process (0 or below) is not judged: true.
pub fn pid_alive(pid: i32) -> bool {
    let Some(pid) = Pid::from_raw(pid) else {
        return true;
    };
    !matches!(rustix::process::test_kill_process(pid), Err(Errno::SRCH))
}

/// Send `sig` to this process.
pub fn signal_self(sig: Signal) -> io::Result<()> {
    Ok(nix::sys::signal::kill(nix::unistd::Pid::this(), sig)?)
}

/// Make `f` this process's stdout and stderr (dup2 onto 1 and 2): a daemon's log file.
pub fn redirect_stdio(f: impl AsFd) -> io::Result<()> {
    nix::unistd::dup2_stdout(&f)?;
    Ok(nix::unistd::dup2_stderr(&f)?)
}

/// Die of SIGPIPE on a write to a closed pipe, as command-line tools do (`vikingfs find x |
/// head`), rather than fail the write with EPIPE (Rust's start-up ignores the signal).
pub fn default_sigpipe() {
    use nix::sys::signal::{signal, SigHandler};
    // SAFETY: installing SIG_DFL runs no code of ours in signal context; called before any
    // thread of ours starts.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}

/// Send `sig` to process `pid`.
pub fn signal_process(pid: u32, sig: Signal) -> io::Result<()> {
    let pid = i32::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    Ok(nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        sig,
    )?)
}

/// Signals blocked in the calling thread and in every thread it spawns afterwards, so that
/// only [`BlockedSignals::wait`] takes them.
pub struct BlockedSignals(nix::sys::signal::SigSet);

impl BlockedSignals {
    pub fn block(signals: &[Signal]) -> io::Result<Self> {
        let mut set = nix::sys::signal::SigSet::empty();
        for &s in signals {
            set.add(s);
        }
        set.thread_block()?;
        Ok(BlockedSignals(set))
    }

    /// Have the child `cmd` spawns start with these signals unblocked (a blocked mask is
    /// inherited across exec, and std does not reset it).
    pub fn unblocked_in(&self, cmd: &mut Command) {
        use std::os::unix::process::CommandExt;
        let set = self.0;
        // SAFETY: the hook runs in the forked child between fork and exec: it makes one
        // async-signal-safe system call (sigprocmask) on a set copied in, and allocates
        // nothing.
        unsafe {
            cmd.pre_exec(move || {
                use nix::sys::signal::{sigprocmask, SigmaskHow};
                let _ = sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&set), None);
                Ok(())
            });
        }
    }

    /// Wait for one of the signals (sigwait).
    pub fn wait(&self) -> io::Result<Signal> {
        Ok(self.0.wait()?)
    }

    /// Wait for one of the signals (sigwaitinfo), and whether the kernel sent it (a
    /// terminal's ^C, ^\ or hangup, which reaches the whole foreground process group) rather
    /// than a process (kill(2)).
    pub fn wait_info(&self) -> io::Result<(Signal, bool)> {
        loop {
            // SAFETY: siginfo_t is plain data, valid all zero.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: the set is a valid sigset_t and `info` a siginfo_t the call fills in,
            // both outliving the call.
            let n = unsafe { libc::sigwaitinfo(self.0.as_ref(), &mut info) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let sig = Signal::try_from(n).map_err(io::Error::from)?;
            return Ok((sig, info.si_code == libc::SI_KERNEL));
        }
    }
}

/// A pipe: (read end, write end), both inherited by children (no close-on-exec).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(nix::unistd::pipe()?)
}

/// Whether children spawned from now on inherit `fd` (clear or set close-on-exec).
pub fn set_inherited(fd: impl AsFd, inherited: bool) -> io::Result<()> {
    let mut flags = rustix::io::fcntl_getfd(&fd)?;
    flags.set(FdFlags::CLOEXEC, !inherited);
    Ok(rustix::io::fcntl_setfd(&fd, flags)?)
}

/// Run the child `cmd` spawns in a session of its own (setsid between fork and exec): no
/// terminal, and signals to our process group pass it by.
pub fn new_session(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook runs in the forked child between fork and exec, where only
    // async-signal-safe calls are sound: it makes one system call, setsid, and allocates
    // nothing.
    unsafe {
        cmd.pre_exec(|| {
            let _ = rustix::process::setsid();
            Ok(())
        });
    }
}

/// Take over the inherited pipe whose number is `fd`, when it is one (a number that names
/// something else, or nothing, gives `None`).
///
/// # Safety
///
/// Nothing else in the process may own, use or close descriptor `fd` (it is closed when the
/// returned file drops), and no other thread may open or close descriptors meanwhile.
pub unsafe fn adopt_fifo(fd: RawFd) -> Option<File> {
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is not -1, and it stays as it is while borrowed (the caller guarantees that
    // nothing else closes or opens descriptors); one that is not open fails the fstat.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let st = rustix::fs::fstat(borrowed).ok()?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Fifo {
        return None;
    }
    // SAFETY: `fd` is open (fstat said so) and the caller hands it over: nothing else owns it.
    Some(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}
