//! Shared by the commands of the locked operations (`rm`, `mv`, `write`, `add-resource`,
//! `fsck`, `wait`): opening the engine, the busy exit status, progress bars, and a quick exit.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use super::{Ctx, EXIT_BUSY};
use crate::error::Chain;
use crate::ops::{Locked, Ops, OpsError};

/// The whole engine (the derivers too: a command that works the queue, checks or searches),
/// as the workspace was built: this command's configuration never re-derives it
/// ([`Ops::open_as_built`]).
pub(crate) fn open(ctx: &Ctx) -> anyhow::Result<Arc<Ops>> {
    open_in(ctx, &ctx.workspace()?)
}

/// [`open`] for a command that only reads: a missing workspace is refused, not created.
pub(crate) fn open_existing(ctx: &Ctx) -> anyhow::Result<Arc<Ops>> {
    open_in(ctx, &ctx.existing_workspace()?)
}

fn open_in(ctx: &Ctx, ws: &crate::workspace::Workspace) -> anyhow::Result<Arc<Ops>> {
    with_rebuild_bar(|progress| Ops::open_as_built(ws, &ctx.config, progress))
}

/// The locked operations alone (rm, mv, write, add-resource): no model loaded, no vectors
/// touched by this process's configuration ([`Ops::open_locked`]).
pub(crate) fn open_locked(ctx: &Ctx) -> anyhow::Result<Arc<Locked>> {
    let ws = ctx.workspace()?;
    with_rebuild_bar(|progress| Ops::open_locked(&ws, &ctx.config, progress))
}

/// `open` with a progress bar for a rebuild of the index (an older format, or a lost one);
/// the bar appears only if one runs.
fn with_rebuild_bar<T>(
    open: impl FnOnce(&mut dyn FnMut(u64, u64)) -> Result<T, OpsError>,
) -> anyhow::Result<T> {
    let mut b: Option<ProgressBar> = None;
    let opened = open(&mut |d, t| {
        let b = b.get_or_insert_with(|| bar(t, "reindex"));
        b.set_length(t);
        b.set_position(d);
    })?;
    if let Some(b) = b {
        b.finish_and_clear();
    }
    Ok(opened)
}

/// End of a one-shot command: the engine closes (its connections leave the WALs to the next
/// process, see [`crate::db::one_shot_process`]).
pub(crate) fn done<T>(ops: Arc<T>, code: i32) -> anyhow::Result<i32> {
    drop(ops);
    Ok(code)
}

/// Busy: one line, exit 75; anything else: the usual error path.
pub(crate) fn outcome(what: &str, r: Result<(), OpsError>) -> anyhow::Result<i32> {
    match r {
        Ok(()) => Ok(0),
        Err(e) if e.is_busy() => {
            eprintln!("vikingfs: {what}: {}", Chain(&e));
            Ok(EXIT_BUSY)
        }
        Err(e) => Err(anyhow::Error::new(e).context(what.to_string())),
    }
}

pub(crate) fn bar(len: u64, msg: &'static str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(len);
    b.set_style(
        ProgressStyle::with_template("{msg:>10} [{bar:30}] {pos}/{len} {elapsed}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    b.set_message(msg);
    b
}

/// `vikingfs wait`: work the queues in this process with the real handlers until they are
/// drained (alongside a daemon, if one runs: any process may work the queue), after finishing
/// operations a dead process left half-done. Exit 124 on --timeout, as `timeout(1)`.
pub fn wait(ctx: &Ctx, a: &super::wait::WaitArgs) -> anyhow::Result<i32> {
    if let Some(d) = super::client::Daemon::find(ctx)? {
        return super::remote::wait(&d, a);
    }
    let ops = open_existing(ctx)?;
    // Sessions: finish commits a crash interrupted, and work their phase 2 in the same pool.
    let extra = super::session::wait_hook(ctx, &ops)?;
    let timeout = a.timeout.unwrap_or(Duration::from_secs(100 * 365 * 86400));
    // A daemon rebuilding a lost index: its files first (the jobs it queues at the end are
    // drained below).
    let rebuilt = bar(0, "index rebuild, files");
    let in_time = ops.wait_rebuilt(std::time::Instant::now() + timeout, &mut |done, total| {
        rebuilt.set_length(total);
        rebuilt.set_position(done);
    });
    rebuilt.finish_and_clear();
    if !in_time {
        eprintln!(
            "vikingfs: wait: timed out after {}s with the index still being rebuilt from the files",
            timeout.as_secs_f64()
        );
        return done(ops, super::wait::EXIT_TIMEOUT);
    }
    let work = bar(0, "jobs");
    let drained = ops.drain_with_extra(&ctx.config.workers, extra, timeout, |p| {
        work.set_length(p.completed + p.outstanding);
        work.set_position(p.completed);
    })?;
    work.finish_and_clear();
    if !drained {
        let left = ops.queue().outstanding(None)?;
        eprintln!(
            "vikingfs: wait: timed out after {}s with {left} job(s) outstanding",
            timeout.as_secs_f64()
        );
        return done(ops, super::wait::EXIT_TIMEOUT);
    }
    let dead: u64 = ops.queue().stats()?.iter().map(|s| s.dead).sum();
    if dead > 0 {
        eprintln!("vikingfs: wait: queues drained; {dead} job(s) are dead (see `vikingfs status`)");
    }
    done(ops, 0)
}

/// Every job handler of this process (the mount daemon's worker pool and `vikingfs wait`).
pub fn handlers(ops: &Arc<Ops>, config: &crate::config::Config) -> Vec<crate::queue::HandlerSpec> {
    let mut specs = crate::ops::jobs::handlers(ops, &config.workers);
    // Sessions' phase 2 (`session_commit`).
    match crate::session::handler_spec(ops.clone(), config) {
        Ok(h) => specs.push(h),
        Err(e) => tracing::warn!(
            "session_commit handler: {}; session memories wait",
            Chain(&e)
        ),
    }
    specs
}
