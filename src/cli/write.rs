//! `vikingfs write URI|PATH`: a file's whole content from standard input, as the mount writes on
//! close (EXACT lock, jobs queued, atomic replace).

use std::io::Read;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use super::ops::{done, open_locked, outcome};
use super::Ctx;

#[derive(Args, Debug)]
pub struct WriteArgs {
    /// The viking:// URI of the file to write, or its path under a mount of the workspace
    /// (its directory must exist).
    pub uri: String,
    /// Read the content from this file instead of standard input.
    #[arg(long, value_name = "PATH")]
    pub from: Option<PathBuf>,
}

pub fn write(ctx: &Ctx, a: &WriteArgs) -> anyhow::Result<i32> {
    let what = format!("write {}", a.uri);
    let p = ctx.target(&a.uri).with_context(|| what.clone())?;
    if let Some(d) = super::client::Daemon::find(ctx)? {
        return super::remote::write(&d, a, &p);
    }
    let ops = open_locked(ctx)?;
    let bytes = match &a.from {
        Some(f) => std::fs::read(f).with_context(|| format!("{what}: {}", f.display()))?,
        None => {
            let mut v = Vec::new();
            std::io::stdin()
                .read_to_end(&mut v)
                .context("reading standard input")?;
            v
        }
    };
    let code = outcome(&what, ops.write_file(&p, &bytes))?;
    done(ops, code)
}
