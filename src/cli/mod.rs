//! The `vikingfs` command line: one file per command group; every command calls down into
//! the library and prints one line naming the problem when it fails.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

pub mod mount;

use crate::config::Config;
use crate::workspace::Workspace;

/// Exit status when a lock stays busy (sysexits EX_TEMPFAIL, as flock(1) -E default users expect).
pub const EXIT_BUSY: i32 = 75;

#[derive(Parser, Debug)]
#[command(
    name = "vikingfs",
    version,
    about = "OpenViking's context namespace as a Linux filesystem"
)]
pub struct Cli {
    /// Configuration file (default: $VIKINGFS_CONFIG, then ~/.vikingfs/config.json).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Workspace directory (created with defaults when missing).
    #[arg(long, global = true, env = "VIKINGFS_WORKSPACE")]
    pub workspace: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Show the effective configuration.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Mount a workspace (returns once the mount is live).
    Mount(mount::MountArgs),
    /// Unmount a vikingfs mount.
    Umount(mount::UmountArgs),
}

#[derive(Subcommand, Debug)]
pub enum ConfigCmd {
    /// Print the effective configuration.
    Show,
}

/// What every command needs: the configuration and the opened workspace.
pub struct Ctx {
    pub config: Config,
    pub workspace_path: PathBuf,
}

impl Ctx {
    pub fn new(cli: &Cli) -> anyhow::Result<Ctx> {
        let config = Config::load(cli.config.as_deref())?;
        let workspace_path = cli
            .workspace
            .clone()
            .or_else(|| config.workspace.clone())
            .unwrap_or_else(default_workspace);
        Ok(Ctx {
            config,
            workspace_path,
        })
    }

    /// Open (creating when missing) the workspace.
    pub fn workspace(&self) -> anyhow::Result<Workspace> {
        Workspace::open(
            &self.workspace_path,
            &self.config.account,
            &self.config.user,
        )
        .map_err(|e| anyhow::anyhow!("workspace {}: {e}", self.workspace_path.display()))
    }
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
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("vikingfs: {e:#}");
            1
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<i32> {
    let ctx = Ctx::new(&cli)?;
    match &cli.command {
        Command::Config(ConfigCmd::Show) => {
            println!("{:#?}", ctx.config);
            Ok(0)
        }
        Command::Mount(args) => mount::mount(&ctx, cli.config.as_deref(), args),
        Command::Umount(args) => mount::umount(args),
    }
}
