//! `vikingfs serve`: the daemon without a mount, in the foreground (for containers and
//! sandboxes that cannot mount FUSE): the worker pool, OpenViking's HTTP API and MCP on
//! `server.host:server.port` (default 127.0.0.1:1933), and the workspace's socket for the CLI.
//! It is the mount's daemon ([`super::mount::run_daemon`]) with no mount point.

use clap::Args;

use super::Ctx;
use crate::fuse::mount::MountOptions;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on (server.host; default 127.0.0.1). Beyond loopback a key is required.
    #[arg(long)]
    pub host: Option<String>,
    /// Port (server.port; default 1933, OpenViking's).
    #[arg(long)]
    pub port: Option<u16>,
    /// Write the daemon's pid to this file.
    #[arg(long)]
    pub pid_file: Option<std::path::PathBuf>,
}

pub fn run(ctx: &Ctx, args: &ServeArgs) -> anyhow::Result<i32> {
    let mut config = ctx.config.clone();
    if let Some(h) = &args.host {
        config.server.host = h.clone();
        config.set_origin("server.host", "flag --host");
    }
    if let Some(p) = args.port {
        config.server.port = p;
        config.set_origin("server.port", "flag --port");
    }
    config.server.addr().map_err(anyhow::Error::msg)?;
    let ws = ctx.workspace()?;
    super::mount::refuse_second_daemon(&ws)?;
    super::mount::run_daemon(
        ws,
        &config,
        None,
        &MountOptions::default(),
        args.pid_file.as_deref(),
    )
}
