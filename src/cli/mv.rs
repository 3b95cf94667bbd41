//! `vikingfs mv SRC DST`: rename(2) and the records with it, crash-safe.

use anyhow::Context;
use clap::Args;

use super::ops::{done, open_locked, outcome};
use super::Ctx;

#[derive(Args, Debug)]
pub struct MvArgs {
    /// Source viking:// URI (or a path under a mount of the workspace).
    pub src: String,
    /// Destination viking:// URI (or a path under a mount); an existing directory receives
    /// SRC under its own name.
    pub dst: String,
}

pub fn mv(ctx: &Ctx, a: &MvArgs) -> anyhow::Result<i32> {
    let what = format!("mv {} {}", a.src, a.dst);
    let src = ctx.target(&a.src).with_context(|| what.clone())?;
    let dst = ctx.target(&a.dst).with_context(|| what.clone())?;
    if let Some(d) = super::client::Daemon::find(ctx)? {
        return super::remote::mv(&d, &what, &src, &dst);
    }
    let ops = open_locked(ctx)?;
    let dst = ops.mv_target(&src, &dst).with_context(|| what.clone())?;
    let code = outcome(&what, ops.mv(&src, &dst))?;
    done(ops, code)
}
