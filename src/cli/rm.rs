//! `vikingfs rm [-r] URI|PATH...`: the file or tree leaves the namespace in one rename(2) (kept
//! in the history), then its index records are deleted ([`crate::ops`]'s rm order).

use anyhow::Context;
use clap::Args;

use super::ops::{done, open_locked, outcome};
use super::Ctx;

#[derive(Args, Debug)]
pub struct RmArgs {
    /// Remove directories and their contents.
    #[arg(short, long)]
    pub recursive: bool,
    /// The viking:// URIs to remove, or paths under a mount of the workspace.
    #[arg(required = true, value_name = "URI")]
    pub uris: Vec<String>,
}

pub fn rm(ctx: &Ctx, a: &RmArgs) -> anyhow::Result<i32> {
    // Every target read before anything is removed (or a workspace opened): a mistyped last
    // argument removes nothing.
    let targets = a
        .uris
        .iter()
        .map(|uri| ctx.target(uri).with_context(|| format!("rm {uri}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if let Some(d) = super::client::Daemon::find(ctx)? {
        return super::remote::rm(&d, a, &targets);
    }
    let ops = open_locked(ctx)?;
    for (uri, p) in a.uris.iter().zip(&targets) {
        let code = outcome(&format!("rm {uri}"), ops.rm(p, a.recursive).map(drop))?;
        if code != 0 {
            return done(ops, code);
        }
    }
    done(ops, 0)
}
