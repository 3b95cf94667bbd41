//! `vikingfs mcp`: MCP on standard input and output, for agents that start their MCP servers as
//! processes (Claude Code, Codex, Cursor, ...). The tools are the daemon's ([`crate::server::mcp`]):
//! when a live daemon serves the workspace, each tool's request goes to it over the workspace's
//! socket (the stores, the model and the configuration in force are the daemon's); otherwise
//! this process opens a serving engine of its own (the daemon's, [`super::mount::serving_engine`],
//! without listeners) and sends them through the API's router in-process. Either way the caller
//! is the workspace's owner, as on the socket.

use clap::Args;

use super::Ctx;
use crate::server::mcp::{serve_stdio, Upstream};
use crate::workspace::INTERNAL_DIR;

#[derive(Args, Debug)]
pub struct McpArgs {}

pub fn run(ctx: &Ctx, _args: &McpArgs) -> anyhow::Result<i32> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("vikingfs-mcp")
        .enable_all()
        .build()?;
    let socket = ctx
        .workspace_path
        .join(INTERNAL_DIR)
        .join(crate::server::SOCKET_NAME);
    let live = runtime
        .block_on(tokio::net::UnixStream::connect(&socket))
        .is_ok();
    if live {
        tracing::info!(socket = %socket.display(), "MCP through the workspace's daemon");
        runtime.block_on(serve_stdio(Upstream::socket(socket)))?;
        return Ok(0);
    }
    let ws = ctx.workspace()?;
    tracing::info!(workspace = %ws.root().display(), "MCP with the engine in this process");
    let (ops, pool) = super::mount::serving_engine(&ws, &ctx.config)?;
    let api = crate::server::Api::new(ops.clone(), ctx.config.server.clone());
    let served = runtime.block_on(serve_stdio(Upstream::in_process(api, true)));
    // Requests are over: the runtime's blocking pool has nothing left of them.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    super::mount::stop_engine(&ops, pool);
    served?;
    Ok(0)
}
