//! `vikingfs mount` and `vikingfs umount`.
//!
//! `mount` re-executes itself with `--foreground` in a new session and waits on a readiness
//! pipe, so it returns exactly when the mount is live (or prints the daemon's one-line error).
//! The daemon blocks SIGTERM/SIGINT/SIGHUP in every thread and waits for them in its main
//! thread; on one it unmounts (lazily if files are open), lets in-flight requests finish and
//! exits.
//!
//! Before a workspace is created or a daemon started, `mount` refuses in one line what a first
//! hour gets wrong: a user who may not mount (vikingfs calls mount(2) itself), the arguments
//! swapped, a mount point that holds entries (unless `nonempty`), and a second daemon for a
//! workspace one of this host's already serves (named, with where it serves).

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::Args;

use crate::cli::Ctx;
use crate::config::Config;
use crate::daemon::{self, Registration};
use crate::error::Chain;
use crate::fs::{FsConfig, VikingFs};
use crate::fuse::mount::{self, Mounted};
use crate::ops::{LockedMutations, Ops};
use crate::queue::WorkerPool;
use crate::sys::{self, BlockedSignals, Signal};
use crate::workspace::Workspace;

/// Environment variable naming the readiness pipe's write end in the daemon.
const READY_FD: &str = "VIKINGFS_READY_FD";

#[derive(Args, Debug)]
pub struct MountArgs {
    /// Stay in the foreground (don't daemonise).
    #[arg(long, short = 'f')]
    pub foreground: bool,
    /// Mount options, comma separated: ro, nopassthrough, cache_timeout=SECS (how long the
    /// kernel caches names and attributes, default 1), show_summaries (list the directory
    /// summaries .abstract.md and .overview.md, which are otherwise readable by name only),
    /// remount with ro or rw (change a live mount's read-only flag), metrics=ADDR:PORT
    /// (Prometheus metrics), api=ADDR:PORT (OpenViking's HTTP API and MCP; also the config's
    /// server.host/server.port), log=FILE (as --log-file), debug (log at debug level), dev
    /// (device nodes on the mount may be opened; nodev by default), nonempty (mount over a
    /// directory that holds entries, as --allow-non-empty); generic ones like nosuid,_netdev
    /// are accepted.
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// mount(8)'s helper flags (-s sloppy, -n no mtab, -v verbose): accepted, no effect.
    #[arg(short = 's', short_aliases = ['n', 'v'], hide = true, action = clap::ArgAction::Count)]
    pub helper_flags: u8,
    /// Write the daemon's pid to this file.
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    /// Mount over a directory that holds entries (also `-o nonempty`): they are hidden while
    /// mounted. Refused otherwise.
    #[arg(long)]
    pub allow_non_empty: bool,
    /// Log to this file, appending (also `-o log=FILE`; default: the workspace's
    /// .vikingfs/mount.log for a daemon, stderr with --foreground). `-o debug` logs more.
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
    /// The workspace directory.
    pub workspace_dir: PathBuf,
    /// Where to mount it.
    pub mountpoint: PathBuf,
}

#[derive(Args, Debug)]
pub struct UmountArgs {
    /// The mount point of a vikingfs mount.
    pub mountpoint: PathBuf,
}

/// How long `vikingfs umount` waits for the daemon to finish (in-flight jobs handed back,
/// databases closed) once the kernel let the mount go.
const UMOUNT_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

pub fn umount(args: &UmountArgs) -> anyhow::Result<i32> {
    let daemon = mount::mounted_source(&args.mountpoint)
        .and_then(|ws| crate::daemon::serving(&ws, &args.mountpoint));
    mount::unmount(&args.mountpoint)?;
    // Return once the daemon has exited, so that a script can move, copy or open the
    // workspace's databases right after.
    if let Some(d) = daemon {
        let deadline = std::time::Instant::now() + UMOUNT_WAIT;
        while d.is_running() {
            if std::time::Instant::now() >= deadline {
                let log = d.log.as_ref().map_or_else(
                    || "the workspace's .vikingfs/mount.log".to_string(),
                    |l| l.display().to_string(),
                );
                eprintln!(
                    "vikingfs: umount: the mount is gone, but its daemon (pid {}) is still \
                     finishing after {}s; see its log in {log}",
                    d.pid,
                    UMOUNT_WAIT.as_secs()
                );
                return Ok(1);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    Ok(0)
}

/// The `-o` options, with the log file asked for (`--log-file`, else `-o log=`) absolute.
fn options(args: &MountArgs) -> anyhow::Result<mount::MountOptions> {
    let mut opts = mount::parse_options(&args.options)?;
    opts.nonempty |= args.allow_non_empty;
    if let Some(f) = &args.log_file {
        opts.log = Some(f.clone());
    }
    opts.log = opts.log.map(|f| std::path::absolute(&f)).transpose()?;
    Ok(opts)
}

/// Before logging starts: a foreground daemon with a log file writes its stdout and stderr
/// there (a daemonised one gets the file from `daemonise`, which passes `--log-file`).
/// Whether `-o debug` asks for debug logging. Bad options are `mount`'s to refuse.
pub fn open_log(args: &MountArgs) -> anyhow::Result<bool> {
    let Ok(opts) = options(args) else {
        return Ok(false);
    };
    if let Some(path) = opts.log.as_ref().filter(|_| args.foreground) {
        let f = append_log(path)?;
        sys::redirect_stdio(&f).with_context(|| format!("log file {}", path.display()))?;
    }
    Ok(opts.debug)
}

fn append_log(path: &Path) -> anyhow::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("log file {}", path.display()))
}

pub fn mount(ctx: &Ctx, config_path: Option<&Path>, args: &MountArgs) -> anyhow::Result<i32> {
    // `vikingfs --workspace A mount B MNT`: two workspaces named; which one was meant is
    // not for the daemon to guess.
    if ctx.origin == super::Origin::Flag {
        let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => std::path::absolute(a).ok() == std::path::absolute(b).ok(),
        };
        if !same(&ctx.workspace_path, &args.workspace_dir) {
            bail!(
                "--workspace {} and the workspace argument {} differ: give the workspace once \
                 (vikingfs mount WORKSPACE MOUNTPOINT)",
                ctx.workspace_path.display(),
                args.workspace_dir.display()
            );
        }
    }
    let opts = options(args)?;
    if opts.remount {
        // `mount -o remount,ro|rw` (mount(8) runs the helper with the options): no daemon.
        mount::remount(&args.mountpoint, opts.read_only)?;
        return Ok(0);
    }
    // Before anything is created: a user who may not mount learns it now, with the remedy,
    // not from the daemon after a workspace was made.
    if !sys::can_mount() {
        bail!(
            "cannot mount {}: {}",
            args.mountpoint.display(),
            mount::NOT_ALLOWED_REMEDY
        );
    }
    mount::check_fuse_device()?;
    let mp = args
        .mountpoint
        .canonicalize()
        .or_else(|e| {
            // A stale mount point answers ENOTCONN: clear it, then resolve again.
            if matches!(e.raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED)) {
                mount::detach(&args.mountpoint)?;
                args.mountpoint.canonicalize()
            } else {
                Err(e)
            }
        })
        .with_context(|| format!("mount point {}", args.mountpoint.display()))?;
    mount::clear_stale(&mp)?;
    if !mp.is_dir() {
        bail!("mount point {} is not a directory", mp.display());
    }
    check_arguments(&args.workspace_dir, &mp, opts.nonempty)?;
    let ws = Workspace::open(&args.workspace_dir, &ctx.config.account, &ctx.config.user)
        .with_context(|| format!("workspace {}", args.workspace_dir.display()))?;
    if !mount::is_mount_point(&mp) {
        wait_for_previous(&ws, &mp)?;
    }
    refuse_second_daemon(&ws)?;
    if args.foreground {
        return run_daemon(ws, &ctx.config, Some(&mp), &opts, args.pid_file.as_deref());
    }
    daemonise(&ws, &mp, config_path, args, &opts)
}

/// The mistakes of a first mount, refused before a workspace is created: the two arguments
/// swapped (the mount point is a workspace or the workspace a live mount), and a mount point
/// that holds entries, which the mount would hide (unless `nonempty`).
fn check_arguments(ws_arg: &Path, mp: &Path, nonempty: bool) -> anyhow::Result<()> {
    let usage = "vikingfs mount WORKSPACE MOUNTPOINT";
    if let Some(src) = mount::mounted_source(ws_arg)
        .filter(|_| mount::mounted_fs_type(ws_arg).as_deref() == Some(mount::FSTYPE))
    {
        bail!(
            "{} is a vikingfs mount (of the workspace {}), not a workspace: the arguments look \
             swapped ({usage})",
            ws_arg.display(),
            src.display()
        );
    }
    if crate::workspace::is_workspace(mp) && !crate::workspace::is_workspace(ws_arg) {
        bail!(
            "the mount point {} is a workspace and {} is not: the arguments look swapped \
             ({usage}: vikingfs mount {} {})",
            mp.display(),
            ws_arg.display(),
            mp.display(),
            ws_arg.display()
        );
    }
    if !nonempty {
        let first = std::fs::read_dir(mp)
            .with_context(|| format!("mount point {}", mp.display()))?
            .flatten()
            .next();
        if let Some(e) = first {
            bail!(
                "mount point {} is not empty (it holds {:?}); the mount would hide what is \
                 there: mount on an empty directory, or pass -o nonempty (--allow-non-empty)",
                mp.display(),
                e.file_name()
            );
        }
    }
    Ok(())
}

/// Set only by the tests of two daemons on one workspace of one host (their locks against
/// each other, as two hosts' daemons meet): a second daemon is refused otherwise.
const ALLOW_SECOND_DAEMON: &str = "VIKINGFS_ALLOW_SECOND_DAEMON";

/// This host's lease on `ws` (`daemon::try_host_lease`); none under [`ALLOW_SECOND_DAEMON`].
/// Held by a daemon that serves already: refused at once, naming it; by one starting or on
/// its way out: waited for, as long as a previous daemon is.
fn host_lease(ws: &Workspace) -> anyhow::Result<Option<daemon::HostLease>> {
    if std::env::var_os(ALLOW_SECOND_DAEMON).is_some() {
        return Ok(None);
    }
    let deadline = std::time::Instant::now() + PREVIOUS_WAIT;
    loop {
        if let Some(lease) = daemon::try_host_lease(ws).context("daemon lease")? {
            return Ok(Some(lease));
        }
        refuse_second_daemon(ws)?;
        if std::time::Instant::now() >= deadline {
            bail!(
                "another vikingfs daemon of this host holds the workspace {} (starting or \
                 stopping): one daemon serves a workspace; see vikingfs status, and stop it first",
                ws.root().display()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// One daemon serves a workspace on a host: a second would take over the workspace's socket
/// (the CLI would ask either) and drain the same queues beside the first. Refused, naming the
/// first and where it serves. Daemons of other hosts sharing the workspace are no concern.
pub fn refuse_second_daemon(ws: &Workspace) -> anyhow::Result<()> {
    if std::env::var_os(ALLOW_SECOND_DAEMON).is_some() {
        return Ok(());
    }
    let me = std::process::id();
    let deadline = std::time::Instant::now() + PREVIOUS_WAIT;
    let d = loop {
        let first = daemon::running(ws)
            .context("daemon registry")?
            .into_iter()
            .find(|d| d.host == crate::process::host_id() && d.pid != me && d.is_running());
        let Some(d) = first else {
            return Ok(());
        };
        // A daemon whose mount a plain umount let go is on its way out: wait for it (as
        // `wait_for_previous` does), a bounded time.
        let stopping = d
            .mountpoint
            .as_deref()
            .is_some_and(|m| !mount::is_mount_point(m));
        if !stopping || std::time::Instant::now() >= deadline {
            break d;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    match &d.mountpoint {
        Some(m) => bail!(
            "the workspace {} is already mounted at {} (daemon pid {}): one daemon serves a \
             workspace; use that mount, or vikingfs umount {} first",
            ws.root().display(),
            m.display(),
            d.pid,
            m.display()
        ),
        None => bail!(
            "the workspace {} is already served by vikingfs serve (pid {}{}): one daemon serves \
             a workspace; stop it first (kill {})",
            ws.root().display(),
            d.pid,
            d.api
                .as_deref()
                .map(|a| format!(", API at http://{a}"))
                .unwrap_or_default(),
            d.pid
        ),
    }
}

/// How long a mount waits for the daemon of the previous mount of its mount point, which an
/// umount let go but which is still finishing (jobs handed back, databases closed).
const PREVIOUS_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// `umount MP && mount WS MP` at once: the old daemon may still be stopping. Wait for it a
/// bounded time rather than start beside it (it would keep the workspace's socket, and the
/// CLI would ask a daemon on its way out).
fn wait_for_previous(ws: &Workspace, mp: &Path) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + PREVIOUS_WAIT;
    while let Some(d) = crate::daemon::serving(ws.root(), mp) {
        if std::time::Instant::now() >= deadline {
            let log = d.log.as_ref().map_or_else(
                || ws.internal_dir().join("mount.log"),
                std::path::PathBuf::clone,
            );
            bail!(
                "the daemon (pid {}) of the previous mount of {} is still stopping after {}s; \
                 wait for it to exit (see {}) or stop it with kill {}",
                d.pid,
                mp.display(),
                PREVIOUS_WAIT.as_secs(),
                log.display(),
                d.pid
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}

fn daemonise(
    ws: &Workspace,
    mp: &Path,
    config_path: Option<&Path>,
    args: &MountArgs,
    opts: &mount::MountOptions,
) -> anyhow::Result<i32> {
    let (rd, wr) = sys::pipe().context("pipe")?;
    // The daemon must inherit the write end.
    sys::set_inherited(&wr, true).context("pipe")?;
    let log_path = opts
        .log
        .clone()
        .unwrap_or_else(|| ws.internal_dir().join("mount.log"));
    let log = append_log(&log_path)?;
    let mut cmd = Command::new(std::env::current_exe().context("current_exe")?);
    if let Some(c) = config_path {
        cmd.arg("--config").arg(c.canonicalize()?);
    }
    cmd.arg("mount").arg("--foreground");
    if args.allow_non_empty {
        cmd.arg("--allow-non-empty");
    }
    for o in &args.options {
        cmd.arg("-o").arg(o);
    }
    if let Some(p) = &args.pid_file {
        let abs = std::path::absolute(p)?;
        cmd.arg("--pid-file").arg(abs);
    }
    cmd.arg("--log-file").arg(&log_path);
    cmd.arg(ws.root()).arg(mp);
    cmd.env(READY_FD, wr.as_raw_fd().to_string())
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    sys::new_session(&mut cmd);
    let child = cmd.spawn().context("start the mount daemon")?;
    drop(wr);
    let mut msg = String::new();
    std::fs::File::from(rd).read_to_string(&mut msg)?;
    match msg.strip_prefix("ok") {
        Some(_) => {
            // A person at a terminal learns where the daemon's log is; a script, nothing.
            if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
                eprintln!(
                    "vikingfs: mounted {} on {} (log: {})",
                    ws.root().display(),
                    mp.display(),
                    log_path.display()
                );
            }
            Ok(0)
        }
        None if msg.is_empty() => bail!(
            "the mount daemon (pid {}) exited before the mount was live; see {}",
            child.id(),
            log_path.display()
        ),
        None => bail!("{}", msg.trim()),
    }
}

/// Tell the waiting `vikingfs mount` how it went (no-op in a plain foreground run).
/// The readiness pipe `daemonise` passed (its write end's number in READY_FD), taken over once
/// and the variable removed — before the daemon starts any thread, since changing the
/// environment while another thread may read it is undefined behaviour in libc. A number
/// that does not name a pipe (the variable exported by hand) is ignored.
fn take_ready_pipe() -> Option<std::fs::File> {
    let fd = std::env::var(READY_FD).ok()?.parse::<i32>().ok()?;
    // SAFETY: no other thread runs yet (see above): nothing reads the environment meanwhile.
    unsafe { std::env::remove_var(READY_FD) };
    // SAFETY: READY_FD names the pipe's write end that `daemonise` cleared close-on-exec on
    // and passed to this process: nothing else here owns or closes it, and no other thread
    // opens or closes descriptors yet. The variable is removed, so the descriptor is taken
    // over at most once.
    unsafe { sys::adopt_fifo(fd) }
}

fn report_ready(pipe: Option<std::fs::File>, result: Result<(), String>) {
    let Some(mut f) = pipe else {
        return;
    };
    let _ = match result {
        Ok(()) => f.write_all(b"ok\n"),
        Err(e) => f.write_all(e.as_bytes()),
    };
}

/// The signals the daemon stops on (SIGUSR1: the session ended by an external unmount).
const STOP_SIGNALS: [Signal; 4] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGUSR1,
];

/// A serving engine, as the daemon and `vikingfs mcp` without a daemon run it: the workspace's
/// operations opened for serving (finishing what a crashed process left half-done), the
/// vectors a crash or a move left unqueued, the queue's spool (no request waits for a SQLite
/// commit), the sessions' phase-1 recovery, and the worker pool that drains the queues
/// (summaries, embeddings, session memories). Stopped by [`stop_engine`].
pub fn serving_engine(ws: &Workspace, config: &Config) -> anyhow::Result<(Arc<Ops>, WorkerPool)> {
    let ops = Ops::open_serving(ws, config).context("open the workspace's stores")?;
    ops.backfill_vectors()
        .context("queue the index's missing vectors")?;
    ops.queue()
        .start_spool()
        .context("start the queue's spool")?;
    crate::cli::session::recover_at_start(&ops);
    let pool = WorkerPool::start(
        ops.queue().clone(),
        crate::cli::ops::handlers(&ops, config),
        crate::queue::PoolOptions {
            foreground: Some(ops.foreground().clone()),
            ..crate::ops::jobs::pool_options()
        },
    );
    Ok((ops, pool))
}

/// How long a stopping daemon waits for the jobs in flight. A job still running then dies
/// with the process, as in a crash (jobs are idempotent): the next daemon ends the claims of
/// an exited process at its start and runs them again. One that never returns must not keep
/// `umount`, SIGTERM or the next mount waiting.
const JOBS_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Stop what [`serving_engine`] started, once no request runs any more: the jobs in flight
/// finish (for [`JOBS_GRACE`] at most), then what requests spooled goes into the database.
pub fn stop_engine(ops: &Ops, pool: WorkerPool) {
    // Removals answered but not settled yet (their records, intents and locks).
    if let Err(e) = ops.locked().drain_settling() {
        tracing::warn!(error = %crate::error::Chain(&e), "settling removals");
    }
    pool.stop_within(JOBS_GRACE);
    // A job left running holds the stores, whose drop would have written this.
    ops.locked().stores().flush_entries();
    ops.queue().stop_spool();
}

/// The daemon: open the engine, start its workers and servers, mount (when `mp` is given),
/// report readiness, wait for a signal (or an external unmount), then stop in order. Without a
/// mount point it is `vikingfs serve`: the same daemon serving only the API and its socket.
pub fn run_daemon(
    ws: Workspace,
    config: &Config,
    mp: Option<&Path>,
    opts: &mount::MountOptions,
    pid_file: Option<&Path>,
) -> anyhow::Result<i32> {
    let ready = take_ready_pipe();
    // The daemon keeps the umask it was started with: what it makes for itself (the
    // history, spools, uploads, files written over the API) gets the modes any program's
    // would. What a caller makes through the mount arrives with the caller's umask applied
    // by the kernel (no FUSE_DONT_MASK): `DirectMutations` puts back what this one takes off.
    sys::raise_nofile_limit();
    // Every thread spawned from here on inherits the mask; only sigwait below sees them.
    let set = BlockedSignals::block(&STOP_SIGNALS).context("block signals")?;

    type Started = (
        Option<Mounted>,
        WorkerPool,
        Registration,
        Arc<Ops>,
        Option<crate::metrics::Server>,
        crate::server::Server,
        Option<daemon::HostLease>,
    );
    let started = (|| -> anyhow::Result<Started> {
        // Before anything is opened: two daemons started in the same instant both pass the
        // registry's check (`refuse_second_daemon`), and exactly one takes the lease.
        let lease = host_lease(&ws)?;
        // The pool starts before the mount's write probe is set: nothing is open for writing
        // until the mount below is live.
        // Hosts share a workspace through PostgreSQL: its files must be on a filesystem where
        // lock files hold between hosts (crate::sharedfs), checked before anything is opened.
        if matches!(config.backend, crate::config::Backend::Postgres { .. }) {
            crate::sharedfs::check(ws.root(), &ws.internal_dir())?;
        }
        let (ops, pool) = serving_engine(&ws, config)?;
        let core = match mp {
            Some(_) => {
                let seam = LockedMutations::new(ops.locked().clone());
                let past = crate::ops::PastView::new(ops.locked().clone());
                let core = VikingFs::new(&ws, Arc::new(seam)).context("open the namespace")?;
                let core = Arc::new(
                    core.with_config(FsConfig {
                        show_summaries: opts.show_summaries,
                    })
                    .with_past(Arc::new(past)),
                );
                let weak = Arc::downgrade(&core);
                ops.set_write_probe(Box::new(move |p| {
                    weak.upgrade().is_some_and(|c| c.is_open_for_write(p))
                }));
                Some(core)
            }
            None => None,
        };
        // Metrics only when asked for (`-o metrics=` wins over `vikingfs.metrics`); before
        // the mount, so that an address in use fails the start with nothing mounted.
        let metrics = match opts.metrics.or(config.metrics) {
            Some(addr) => Some(
                crate::metrics::serve(addr, ops.clone())
                    .context("start the metrics endpoint (-o metrics=ADDR:PORT)")?,
            ),
            None => None,
        };
        // The API (when asked for: `-o api=`, then the config's server section) and the
        // workspace's socket, which the CLI's commands talk to; before the mount, so that an
        // address in use fails the start with nothing mounted.
        let tcp = match opts.api {
            Some(a) => Some(a),
            None if config.server.configured || mp.is_none() => {
                Some(config.server.addr().map_err(anyhow::Error::msg)?)
            }
            None => None,
        };
        let listen = crate::server::Listen {
            tcp,
            unix: Some(ws.internal_dir().join(crate::server::SOCKET_NAME)),
        };
        let api = crate::server::Api::new(ops.clone(), config.server.clone());
        let server = crate::server::Server::start(api, &listen)
            .context("start the API server (-o api=ADDR:PORT, server.host/server.port)")?;
        let pid = std::process::id();
        let mounted = match (core, mp) {
            (Some(core), Some(mp)) => Some(Mounted::start(core, ws.root(), mp, opts, || {
                // An external unmount ended the session: wake the main thread (every thread
                // blocks SIGUSR1, so its sigwait takes it).
                let _ = sys::signal_self(Signal::SIGUSR1);
            })?),
            _ => None,
        };
        if let Some(m) = &mounted {
            ops.locked().on_changed_behind(Box::new(m.forgetter()));
        }
        if let Some(p) = pid_file {
            std::fs::write(p, format!("{pid}\n"))
                .with_context(|| format!("pid file {}", p.display()))?;
        }
        let listening = metrics.as_ref().map(|m| m.addr().to_string());
        let reg = daemon::register(
            &ws,
            mp,
            true,
            listening,
            server.tcp_addr().map(|a| a.to_string()),
            opts.log.clone(),
        )
        .context("daemon registry")?;
        Ok((mounted, pool, reg, ops, metrics, server, lease))
    })();
    let (mounted, pool, _reg, ops, _metrics, server, _lease) = match started {
        Ok(m) => {
            report_ready(ready, Ok(()));
            // systemd (Type=notify): the unit is active once the mount is live.
            let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
            match mp {
                Some(mp) => tracing::info!(
                    mountpoint = %mp.display(), workspace = %ws.root().display(), "mounted"
                ),
                None => tracing::info!(workspace = %ws.root().display(), "serving"),
            }
            m
        }
        Err(e) => {
            report_ready(ready, Err(Chain(&*e).to_string()));
            return Err(e);
        }
    };
    let sig = set.wait().context("sigwait")?;
    tracing::info!(signal = ?sig, "stopping");
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    // Stop claiming new jobs now; the ones in flight finish while the mount goes away.
    pool.begin_stop();
    let unmounted = match mounted {
        Some(m) => m.stop().context("unmount"),
        None => Ok(()),
    };
    // The API's requests in flight finish; new connections are refused.
    server.stop();
    stop_engine(&ops, pool);
    unmounted?;
    if let Some(p) = pid_file {
        let _ = std::fs::remove_file(p);
    }
    Ok(0)
}
