//! `vikingfs reindex [--under URI] [--json]`: rebuild the index's records from the files now,
//! with a progress bar (terms written before it returns; summaries and vectors queued).

use anyhow::Context;
use clap::Args;

use super::ops::{bar, done};
use super::Ctx;
use crate::ops::Ops;

#[derive(Args, Debug)]
pub struct ReindexArgs {
    /// Only this viking:// URI (or path under a mount of the workspace) and what lies below
    /// it (default: everything).
    #[arg(long, value_name = "URI")]
    pub under: Option<String>,
    /// Print a JSON object {files, removed, queued}.
    #[arg(long)]
    pub json: bool,
}

pub fn run(ctx: &Ctx, a: &ReindexArgs) -> anyhow::Result<i32> {
    let under = match &a.under {
        Some(u) => ctx.target(u).context("reindex: --under")?,
        None => crate::uri::VPath::root(),
    };
    if let Some(d) = super::client::Daemon::find(ctx)? {
        return super::remote::reindex(&d, a, &under);
    }
    let ws = ctx.workspace()?;
    let b = bar(0, "reindex");
    let mut progress = |d: u64, t: u64| {
        b.set_length(t);
        b.set_position(d);
    };
    let ops = Ops::open_with_progress(&ws, &ctx.config, &mut progress)?;
    let rep = ops.reindex(&under, &mut progress).context("reindex")?;
    b.finish_and_clear();
    print(
        &serde_json::json!({"under": under.uri(), "files": rep.files, "removed": rep.removed,
                            "queued": rep.queued}),
        a.json,
    );
    done(ops, 0)
}

/// What `reindex` prints of its report `{under, files, removed, queued}` (made here or by
/// the daemon).
pub(super) fn print(rep: &serde_json::Value, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::json!({"files": rep["files"], "removed": rep["removed"],
                               "queued": rep["queued"]})
        );
    } else {
        println!(
            "reindexed {} file(s) under {}; removed {} stale record(s); queued {} job(s) \
             (summaries and vectors: `vikingfs wait` or the daemon finishes them)",
            rep["files"],
            rep["under"].as_str().unwrap_or_default(),
            rep["removed"],
            rep["queued"]
        );
    }
}
