//! The `vikingfs` command line: one file per command group; every command calls down into
//! the library and prints one line naming the problem when it fails. [`Ctx`] is what every
//! command starts from: the configuration, the workspace it acts on (named, or found from the
//! mount it runs in: [`discover`]) and [`Ctx::target`], the one reading of a target argument
//! (a `viking://` URI or a path under a mount).

pub mod add;
pub mod client;
pub mod debug;
pub mod discover;
pub mod find;
pub mod fsck;
pub mod generate;
pub mod history;
pub mod key;
pub mod mcp;
pub mod migrate;
pub mod mv;
pub mod ops;
pub mod reindex;
pub mod remote;
pub mod rm;
pub mod serve;
pub mod status;
pub mod wait;
pub mod write;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};

pub mod lock;
pub mod mount;
pub mod session;

use crate::config::Config;
use crate::uri::VPath;
use crate::workspace::Workspace;

/// Exit status of a usage error: an unknown command or option (clap's own), or a bad argument.
pub const EXIT_USAGE: i32 = 2;

/// A bad argument that clap's parsers cannot judge alone (a value out of range): `main`
/// prints it as any error, one line, and exits [`EXIT_USAGE`], as the exit-status table says.
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// `Err` of a [`Usage`] error saying `msg`.
pub fn usage<T>(msg: impl Into<String>) -> anyhow::Result<T> {
    Err(Usage(msg.into()).into())
}

/// Exit status when a lock stays busy (sysexits EX_TEMPFAIL, as flock(1) -E default users expect).
pub const EXIT_BUSY: i32 = 75;

/// The exit statuses every command keeps to (docs/cli.md "Exit status" is the same table).
pub const EXIT_CODES: &str = "\
Exit status:
  0    success
  1    an error (one line on stderr names it and the remedy); find: no result (like grep)
  2    usage: an unknown command or option, a bad argument
  75   a lock is busy (EX_TEMPFAIL, as flock(1) -E); lock: the command's own status otherwise
  124  --wait/--timeout ran out (wait, session commit --wait, add-resource --wait), as timeout(1)
  fsck: 0 clean, 1 problems found and repaired (--repair), 4 found and left (as fsck(8))

The daemon (mount, serve) logs to WORKSPACE/.vikingfs/mount.log when it runs in the
background, else to stderr; RUST_LOG=debug says more.";

#[derive(Parser, Debug)]
#[command(
    name = "vikingfs",
    version,
    about = "OpenViking's context namespace as a Linux filesystem",
    after_help = EXIT_CODES
)]
pub struct Cli {
    /// Configuration file (default: $VIKINGFS_CONFIG, then ~/.vikingfs/config.json).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Workspace directory (default: the workspace of the vikingfs mount the current
    /// directory or a path argument lies in, then storage.workspace, then
    /// ~/.vikingfs/workspace). Commands that change it create it with defaults when missing;
    /// read-only ones refuse a missing one.
    #[arg(long, global = true, env = "VIKINGFS_WORKSPACE")]
    pub workspace: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Mount a workspace (returns once the mount is live).
    Mount(mount::MountArgs),
    /// Unmount a vikingfs mount.
    // Only the mount point matters: the global --config and --workspace are not shown.
    #[command(
        override_usage = "vikingfs umount MOUNTPOINT",
        help_template = "{about-with-newline}\n{usage-heading} {usage}\n\nArguments:\n{positionals}\n\nReturns once the mount's daemon has exited (up to 60 s).\n"
    )]
    Umount(mount::UmountArgs),
    /// Show the effective configuration.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Run COMMAND while holding a path lock (like flock(1)); exits 75 when the lock is busy.
    Lock(lock::LockArgs),
    /// List every lock file in the workspace.
    Locks(lock::LocksArgs),
    /// Search the index; never names a file that is gone.
    Find(find::FindArgs),
    /// Remove a file, or with -r a directory tree (the path first, then its index records).
    Rm(rm::RmArgs),
    /// Move a file or directory (rename(2), then its index records; crash-safe).
    Mv(mv::MvArgs),
    /// What removals, overwrites, in-place writes and renames kept (newest first, with each
    /// version's SHA-256), restorable with undo; browse them read-only at MNT/.history/@T/.
    History(history::HistoryArgs),
    /// Put back a file or tree as it was before its last change (removed, overwritten,
    /// renamed), or rewind everything --since T, with its index (a locked operation;
    /// undoable itself).
    Undo(history::UndoArgs),
    /// Write a file's whole content from standard input (as the mount does on close).
    Write(write::WriteArgs),
    /// Add a local file or directory as a resource (or update an existing one).
    AddResource(add::AddArgs),
    /// Check what is derived (index, summaries, jobs, locks) against the files.
    Fsck(fsck::FsckArgs),
    /// Rebuild the index's records from the files now (summaries and vectors are queued).
    Reindex(reindex::ReindexArgs),
    /// Move the queue, the journal and the index to the other storage backend (`--to
    /// postgres --dsn DSN`, `--to sqlite`) and switch the configuration to it.
    Migrate(migrate::MigrateArgs),
    /// Developer tools.
    #[command(subcommand, hide = true)]
    Debug(debug::DebugCmd),
    /// Man pages and shell completions, for packagers (`scripts/install.sh` runs it).
    #[command(subcommand, hide = true)]
    Generate(generate::GenerateCmd),
    /// Wait until the job queues are drained (exit 124 on --timeout).
    Wait(wait::WaitArgs),
    /// Show daemons and mounts, job queues, dead jobs, locks and the index size.
    Status(status::StatusArgs),
    /// Sessions: add messages, list, show, commit into archives and memories.
    Session(session::SessionArgs),
    /// Serve the workspace without a mount, in the foreground: OpenViking's HTTP API and MCP
    /// (server.host:server.port, default 127.0.0.1:1933) and the worker pool.
    Serve(serve::ServeArgs),
    /// The HTTP API's user keys: add (printed once, kept hashed), list, rm.
    Key(key::KeyArgs),
    /// Speak MCP on standard input and output (OpenViking's tools), through the workspace's
    /// daemon when one serves it, else with the engine opened in this process.
    Mcp(mcp::McpArgs),
}

#[derive(Subcommand, Debug)]
pub enum ConfigCmd {
    /// Print the effective configuration and where each value came from.
    Show {
        #[arg(long)]
        json: bool,
    },
}

impl Command {
    /// The arguments naming a place in the namespace (a `viking://` URI or a path under a
    /// mount): a path among them that lies under a vikingfs mount names the workspace.
    fn targets(&self) -> Vec<&str> {
        match self {
            Command::Lock(a) => vec![a.uri.as_str()],
            Command::Find(a) => a.under.iter().map(String::as_str).collect(),
            Command::Rm(a) => a.uris.iter().map(String::as_str).collect(),
            Command::Mv(a) => vec![a.src.as_str(), a.dst.as_str()],
            Command::History(a) => a.uri.iter().map(String::as_str).collect(),
            Command::Undo(a) => a.uri.iter().map(String::as_str).collect(),
            Command::Write(a) => vec![a.uri.as_str()],
            Command::AddResource(a) => a.to.iter().map(String::as_str).collect(),
            Command::Reindex(a) => a.under.iter().map(String::as_str).collect(),
            Command::Session(a) => session::targets(a),
            _ => Vec::new(),
        }
    }
}

/// Where the workspace a command acts on was named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// `--workspace`.
    Flag,
    /// `VIKINGFS_WORKSPACE`.
    Env,
    /// The vikingfs mount (its mount point) the current directory or a path argument lies in.
    Mount(PathBuf),
    /// `storage.workspace` in the configuration file.
    Config,
    /// Nobody: `~/.vikingfs/workspace`.
    Default,
}

/// What every command needs: the configuration, the workspace it acts on and the vikingfs
/// mounts of this host.
pub struct Ctx {
    pub config: Config,
    pub workspace_path: PathBuf,
    pub origin: Origin,
    mounts: Vec<discover::Mount>,
}

impl Ctx {
    /// The configuration and the workspace: `--workspace` (or `VIKINGFS_WORKSPACE`), else the
    /// workspace of the mount a path argument, then the current directory, lies in (so a
    /// command run in a mount acts on what the mount shows, whatever the configuration file
    /// names), else `storage.workspace`, else `~/.vikingfs/workspace`.
    pub fn new(cli: &Cli) -> anyhow::Result<Ctx> {
        let mut config = Config::load(cli.config.as_deref())?;
        let mounts = discover::mounts();
        let origin = if let Some(w) = &cli.workspace {
            let origin =
                if std::env::var_os("VIKINGFS_WORKSPACE").is_some_and(|v| v == w.as_os_str()) {
                    Origin::Env
                } else {
                    Origin::Flag
                };
            config.workspace = Some(w.clone());
            origin
        } else if let Some(m) = Self::mount_of(&mounts, &cli.command.targets()) {
            config.workspace = Some(m.workspace.clone());
            Origin::Mount(m.mountpoint.clone())
        } else if config.workspace.is_some() {
            Origin::Config
        } else {
            Origin::Default
        };
        match &origin {
            Origin::Flag => config.set_origin("storage.workspace", "flag --workspace"),
            Origin::Env => config.set_origin("storage.workspace", "env VIKINGFS_WORKSPACE"),
            Origin::Mount(mp) => {
                config.set_origin("storage.workspace", format!("mount {}", mp.display()))
            }
            Origin::Config | Origin::Default => {}
        }
        let workspace_path = config.workspace.clone().unwrap_or_else(default_workspace);
        Ok(Ctx {
            config,
            workspace_path,
            origin,
            mounts,
        })
    }

    /// The mount the first path argument under one lies in, else the current directory's.
    fn mount_of<'a>(
        mounts: &'a [discover::Mount],
        targets: &[&str],
    ) -> Option<&'a discover::Mount> {
        let from_args = targets
            .iter()
            .filter(|t| !discover::is_uri(t))
            .find_map(|t| discover::locate(mounts, t).ok()?.1);
        from_args.or_else(|| {
            let cwd = std::env::current_dir().ok()?;
            discover::containing(mounts, &cwd)
        })
    }

    /// Whether the workspace was named (flag, environment, a mount it runs in) rather than
    /// taken from the configuration or the default.
    pub fn named(&self) -> bool {
        matches!(self.origin, Origin::Flag | Origin::Env | Origin::Mount(_))
    }

    /// Every vikingfs mount of this host.
    pub fn mounts(&self) -> &[discover::Mount] {
        &self.mounts
    }

    /// The mounts of this command's workspace, in the mount table's order.
    pub fn workspace_mounts(&self) -> Vec<&discover::Mount> {
        let Ok(root) = self.workspace_path.canonicalize() else {
            return Vec::new();
        };
        self.mounts.iter().filter(|m| m.workspace == root).collect()
    }

    /// The mount of this workspace the current directory lies in.
    pub fn cwd_mount(&self) -> Option<&discover::Mount> {
        let cwd = std::env::current_dir().ok()?;
        let m = discover::containing(&self.mounts, &cwd)?;
        self.workspace_mounts().contains(&m).then_some(m)
    }

    /// The namespace path a target argument names: a `viking://` URI, or a path (relative to
    /// the current directory or absolute) under a mount of this workspace, which names
    /// `viking://` followed by its path below the mount point. Anything else is one line
    /// naming it and what to give instead.
    pub fn target(&self, arg: &str) -> anyhow::Result<VPath> {
        if discover::is_uri(arg) {
            return Ok(VPath::parse_uri(arg, &self.config.user)?);
        }
        let (abs, found) = discover::locate(&self.mounts, arg)
            .with_context(|| format!("{arg}: cannot resolve the path"))?;
        let ours = self.workspace_mounts();
        match found {
            Some(m) if ours.contains(&m) => Ok(m.vpath(&abs)?),
            Some(m) => {
                let remedy = match self.origin {
                    Origin::Flag | Origin::Env => {
                        "leave out --workspace (and VIKINGFS_WORKSPACE) to act on that one"
                    }
                    _ => "a command acts on one workspace",
                };
                bail!(
                    "{} is under the vikingfs mount {} of workspace {}, not of workspace {} \
                     ({remedy})",
                    abs.display(),
                    m.mountpoint.display(),
                    m.workspace.display(),
                    self.workspace_path.display()
                )
            }
            None => {
                let remedy = match ours.first() {
                    Some(m) => format!("it is mounted at {}", m.mountpoint.display()),
                    None => format!(
                        "it is not mounted: vikingfs mount {} MOUNTPOINT",
                        self.workspace_path.display()
                    ),
                };
                bail!(
                    "{} is neither a viking:// URI nor a path under a mount of workspace {} \
                     ({remedy}; or give a viking:// URI)",
                    abs.display(),
                    self.workspace_path.display()
                )
            }
        }
    }

    /// Open (creating when missing) the workspace. A workspace to create on a postgres
    /// backend is created only once the server answered: a bad DSN leaves nothing behind.
    pub fn workspace(&self) -> anyhow::Result<Workspace> {
        if let crate::config::Backend::Postgres { dsn } = &self.config.backend {
            if !self.workspace_path.join(".vikingfs").exists() {
                crate::pg::Pg::connect(dsn).context("storage.backend postgres")?;
            }
        }
        Workspace::open(
            &self.workspace_path,
            &self.config.account,
            &self.config.user,
        )
        .with_context(|| format!("workspace {}", self.workspace_path.display()))
    }

    /// Open the workspace for a command that only reads: one that is not there (no
    /// vikingfs or OpenViking layout at the path) is one line with the remedy, and nothing is
    /// created.
    pub fn existing_workspace(&self) -> anyhow::Result<Workspace> {
        if !crate::workspace::is_workspace(&self.workspace_path) {
            bail!("{}", no_workspace(&self.workspace_path));
        }
        self.workspace()
    }
}

/// What a read-only command says of a workspace that does not exist.
fn no_workspace(path: &Path) -> String {
    format!(
        "no workspace at {} (vikingfs mount {} MOUNTPOINT creates one)",
        path.display(),
        path.display()
    )
}

/// `~/.vikingfs/workspace`, or `/var/lib/vikingfs` when there is no home.
pub fn default_workspace() -> PathBuf {
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".vikingfs/workspace"),
        None => PathBuf::from("/var/lib/vikingfs"),
    }
}

/// Parse the arguments, run the command, and return the process exit status.
pub fn main() -> i32 {
    let cli = Cli::parse_from(mount_helper_args(std::env::args_os().collect()));
    // A one-shot command whose reader went away (`| head`) ends quietly, as ls(1) does; a
    // daemon (mount, serve, mcp) keeps EPIPE as an error on the one connection it concerns.
    if !matches!(
        cli.command,
        Command::Mount(_) | Command::Serve(_) | Command::Mcp(_) | Command::Lock(_)
    ) {
        crate::sys::default_sigpipe();
    }
    let debug = match &cli.command {
        Command::Mount(a) => match mount::open_log(a) {
            Ok(debug) => debug,
            Err(e) => {
                eprintln!("vikingfs: {}", crate::error::Chain(&*e));
                return 1;
            }
        },
        _ => false,
    };
    init_logging(debug);
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            // The whole chain on one line: `find: index /x/index.db: database disk image
            // is malformed`.
            eprintln!("vikingfs: {}", crate::error::Chain(&*e));
            if e.downcast_ref::<Usage>().is_some() {
                EXIT_USAGE
            } else {
                1
            }
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<i32> {
    // Needs no configuration or workspace.
    if let Command::Generate(c) = &cli.command {
        return generate::run(c);
    }
    let ctx = Ctx::new(&cli)?;
    // Every command but the mount daemon is a one-shot process.
    if !matches!(
        cli.command,
        Command::Mount(_) | Command::Serve(_) | Command::Mcp(_)
    ) {
        crate::db::one_shot_process();
    }
    match &cli.command {
        Command::Config(ConfigCmd::Show { json }) => {
            let rows = ctx.config.settings();
            if *json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                match &ctx.config.source {
                    Some(p) => println!("# config file: {}", p.display()),
                    None => println!("# config file: none (defaults)"),
                }
                // Reading the configuration needs no workspace: a missing one is named, not
                // refused (what it shows is where the first mount would create it).
                let missing = !crate::workspace::is_workspace(&ctx.workspace_path);
                println!(
                    "# workspace: {}{}",
                    ctx.workspace_path.display(),
                    if missing { " (does not exist yet)" } else { "" }
                );
                for r in rows {
                    println!("{} = {}    # {}", r.key, r.value, r.origin);
                }
            }
            Ok(0)
        }
        Command::Lock(a) => lock::lock(&ctx, a),
        Command::Locks(a) => lock::locks(&ctx, a),
        Command::Find(args) => find::run(&ctx, args),
        Command::Rm(a) => rm::rm(&ctx, a),
        Command::Mv(a) => mv::mv(&ctx, a),
        Command::History(a) => history::history(&ctx, a),
        Command::Undo(a) => history::undo(&ctx, a),
        Command::Write(a) => write::write(&ctx, a),
        Command::AddResource(a) => add::add(&ctx, a),
        Command::Fsck(a) => fsck::fsck(&ctx, a),
        Command::Reindex(a) => reindex::run(&ctx, a),
        Command::Migrate(a) => migrate::run(&ctx, a),
        Command::Debug(c) => debug::run(c),
        Command::Generate(c) => generate::run(c),
        Command::Wait(args) if args.watch => wait::run(&ctx, args),
        Command::Wait(args) => ops::wait(&ctx, args),
        Command::Status(args) => status::run(&ctx, args),
        Command::Session(args) => session::run(&ctx, args),
        Command::Mount(args) => mount::mount(&ctx, cli.config.as_deref(), args),
        Command::Umount(args) => mount::umount(args),
        Command::Serve(args) => serve::run(&ctx, args),
        Command::Key(args) => key::run(&ctx, args),
        Command::Mcp(args) => mcp::run(&ctx, args),
    }
}

/// Logs go to stderr (the journal under systemd), filtered by `RUST_LOG` (default `warn`).
/// Log to stderr at `warn` (`debug`: `debug`), unless `RUST_LOG` says otherwise.
fn init_logging(debug: bool) {
    use tracing_subscriber::EnvFilter;
    let level = if debug { "debug" } else { "warn" };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only for a person: the daemon's stderr is its log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        // A log line that cannot be written (a full disk under the daemon's log file) is
        // dropped: reporting the failure on stderr again would panic and kill the daemon.
        .log_internal_errors(false)
        .with_target(false)
        .try_init();
}

/// mount(8) runs `mount.fuse.vikingfs SOURCE MOUNTPOINT -o OPTS` and mount.fuse3 runs
/// `vikingfs SOURCE MOUNTPOINT -o OPTS`: both mean `vikingfs mount SOURCE MOUNTPOINT -o OPTS`.
/// A first word that is neither a command nor a path (no `/`, nothing there by that name) is a
/// mistyped command, not a workspace: clap refuses it and suggests the command meant
/// (`vikingfs fnd x` used to create a workspace `fnd` and mount it on `x`).
pub fn mount_helper_args(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    use clap::CommandFactory;
    let argv0_is_helper = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .is_some_and(|n| n.to_string_lossy().starts_with("mount.fuse"));
    let first = args.get(1).map(|a| a.to_string_lossy().into_owned());
    let is_subcommand = |s: &str| {
        Cli::command()
            .get_subcommands()
            .any(|c| c.get_name() == s || c.get_all_aliases().any(|a| a == s))
            || s == "help"
    };
    let implicit = match &first {
        Some(f) => {
            let a_path = f.contains('/') || std::path::Path::new(f).exists();
            argv0_is_helper
                || (!f.starts_with('-') && !is_subcommand(f) && a_path && args.len() >= 3)
        }
        None => false,
    };
    if implicit {
        args.insert(1, "mount".into());
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        mount_helper_args(v.iter().map(Into::into).collect())
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect()
    }

    #[test]
    fn mount_helper_forms_become_mount() {
        assert_eq!(
            args(&["/sbin/mount.fuse.vikingfs", "/ws", "/mnt", "-o", "rw,dev"]),
            [
                "/sbin/mount.fuse.vikingfs",
                "mount",
                "/ws",
                "/mnt",
                "-o",
                "rw,dev"
            ]
        );
        assert_eq!(
            args(&["vikingfs", "/ws", "/mnt", "-o", "rw"]),
            ["vikingfs", "mount", "/ws", "/mnt", "-o", "rw"]
        );
        assert_eq!(
            args(&["vikingfs", "config", "show"]),
            ["vikingfs", "config", "show"]
        );
        assert_eq!(args(&["vikingfs", "--help"]), ["vikingfs", "--help"]);
        // A mistyped command is left to clap, which refuses it.
        assert_eq!(args(&["vikingfs", "fnd", "x"]), ["vikingfs", "fnd", "x"]);
        assert_eq!(
            args(&["vikingfs", "./ws", "/mnt"]),
            ["vikingfs", "mount", "./ws", "/mnt"]
        );
        assert!(Cli::try_parse_from(args(&["vikingfs", "fnd", "x"])).is_err());
    }
}
