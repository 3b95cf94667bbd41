//! `vikingfs rm [-r] URI...`: index records first, then the file or tree.

use anyhow::Context;
use clap::Args;

use super::ops::{done, open_locked, outcome};
use super::Ctx;

#[derive(Args, Debug)]
pub struct RmArgs {
    /// Remove directories and their contents.
    #[arg(short, long)]
    pub recursive: bool,
    /// The viking:// URIs to remove.
    #[arg(required = true, value_name = "URI")]
    pub uris: Vec<String>,
}

pub fn rm(ctx: &Ctx, a: &RmArgs) -> anyhow::Result<i32> {
    if let Some(d) = super::client::Daemon::find(ctx)? {
        return super::remote::rm(&d, a);
    }
    let ops = open_locked(ctx)?;
    for uri in &a.uris {
        let p = ops.parse(uri).with_context(|| format!("rm {uri}"))?;
        let code = outcome(&format!("rm {uri}"), ops.rm(&p, a.recursive).map(drop))?;
        if code != 0 {
            return done(ops, code);
        }
    }
    done(ops, 0)
}
