//! `vikingfs add-resource LOCAL_PATH [--to URI] [--wait]`, with progress bars on a terminal.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use super::ops::{bar, done, open, open_locked, outcome};
use super::Ctx;
use crate::ops::AddOptions;

#[derive(Args, Debug)]
pub struct AddArgs {
    /// Local file or directory to add.
    pub local_path: PathBuf,
    /// Target viking:// URI or path under a mount of the workspace (default
    /// viking://resources/NAME, then NAME_1, NAME_2, ...). An existing target is updated
    /// incrementally.
    #[arg(long, value_name = "URI")]
    pub to: Option<String>,
    /// Wait until every summary and embedding of it is done (works the queue in this process).
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 600.0)]
    pub timeout: f64,
}

pub fn add(ctx: &Ctx, a: &AddArgs) -> anyhow::Result<i32> {
    if !(a.timeout.is_finite() && a.timeout >= 0.0) {
        return super::usage(format!(
            "--timeout {}: must be a number of seconds >= 0",
            a.timeout
        ));
    }
    let what = format!("add-resource {}", a.local_path.display());
    let to = match &a.to {
        Some(u) => Some(ctx.target(u).with_context(|| what.clone())?),
        None => None,
    };
    if let Some(d) = super::client::Daemon::find(ctx)? {
        return super::remote::add(&d, a, to.as_ref());
    }
    // Working the queue (--wait) needs the derivers; adding alone only the locked operations.
    let engine = if a.wait { Some(open(ctx)?) } else { None };
    let ops = match &engine {
        Some(e) => e.locked().clone(),
        None => open_locked(ctx)?,
    };
    let copy = bar(0, "copying");
    let res = ops.add_resource(
        &a.local_path,
        &AddOptions {
            to,
            ..AddOptions::default()
        },
        &mut |done, total| {
            copy.set_length(total);
            copy.set_position(done);
        },
    );
    copy.finish_and_clear();
    let report = match res {
        Ok(r) => r,
        Err(e) => {
            let code = outcome(&what, Err(e))?;
            return done(ops, code);
        }
    };
    if let Some(w) = report.warning() {
        eprintln!("vikingfs: add-resource: {w}");
    }
    println!("{}", report.target.uri());
    let Some(engine) = engine else {
        return done(ops, 0);
    };
    drop(ops);
    let work = bar(report.jobs as u64, "processing");
    let drained = engine.drain(
        &ctx.config.workers,
        Duration::from_secs_f64(a.timeout),
        |p| {
            work.set_length(p.completed + p.outstanding);
            work.set_position(p.completed);
        },
    )?;
    work.finish_and_clear();
    if !drained {
        // The resource is added; only the waiting ran out: 124, as `wait` and timeout(1).
        eprintln!(
            "vikingfs: {what}: jobs still outstanding after {}s (added; `vikingfs wait` finishes them)",
            a.timeout
        );
        return done(engine, super::wait::EXIT_TIMEOUT);
    }
    done(engine, 0)
}
