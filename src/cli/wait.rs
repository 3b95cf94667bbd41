//! `vikingfs wait [--timeout SECS]`: block until the job queues are drained, with a progress bar
//! when stderr is a terminal. [`run`] watches while another process (the daemon) works the
//! queues; [`run_draining`] works them in this process with the handlers it is given, for when
//! no daemon runs.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use super::Ctx;
use crate::queue::{self, HandlerSpec, Progress, Queue, QueueError};

/// Exit status when the timeout passes first (as timeout(1)).
pub const EXIT_TIMEOUT: i32 = 124;

/// How often a watcher re-reads the queue database (other processes cannot wake it).
const WATCH_INTERVAL: Duration = Duration::from_millis(200);

#[derive(clap::Args, Debug)]
pub struct WaitArgs {
    /// Give up after this many seconds (exit status 124). Default: wait as long as it takes.
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    pub timeout: Option<Duration>,
    /// Only watch: leave the work to the process that works the queues (the daemon). Without
    /// it, this process works the queues too, with the real handlers.
    #[arg(long)]
    pub watch: bool,
}

fn parse_secs(s: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .and_then(|v| Duration::try_from_secs_f64(v).ok())
        .ok_or_else(|| format!("{s:?} is not a number of seconds >= 0"))
}

/// Watch until every queue is drained by whoever works it.
pub fn run(ctx: &Ctx, args: &WaitArgs) -> anyhow::Result<i32> {
    let ws = ctx.existing_workspace()?;
    if let Some(d) = super::client::Daemon::find(ctx)? {
        return super::remote::wait(&d, args);
    }
    crate::ops::check_backend(&ws, &ctx.config.backend)?;
    let queue = crate::ops::open_queue_of(&ws, &ctx.config.backend)?;
    let mut bar = Bar::new();
    // A daemon rebuilding a lost index from the files: its files left count as outstanding.
    let index = crate::ops::index_home(&ws, &ctx.config.backend)
        .ok()
        .and_then(|home| crate::index::Index::open_lexical_in(home.store()).ok());
    let rebuild_left = || {
        let p = crate::ops::rebuild::recorded(index.as_ref()?)?;
        Some(p.map_or(1, |(done, total)| total.saturating_sub(done).max(1)))
    };
    let drained = watch_with(
        &queue,
        timeout(args),
        || rebuild_left().unwrap_or(0),
        |p| bar.update(p),
    )?;
    finish(&queue, args, drained, bar)
}

/// Drain the handlers' queues in this process (no daemon is running).
pub fn run_draining(ctx: &Ctx, args: &WaitArgs, handlers: Vec<HandlerSpec>) -> anyhow::Result<i32> {
    let queue = crate::ops::open_queue_of(&ctx.existing_workspace()?, &ctx.config.backend)?;
    let mut bar = Bar::new();
    let drained = queue::drain(&queue, handlers, timeout(args), |p| bar.update(p))?;
    finish(&queue, args, drained, bar)
}

fn timeout(args: &WaitArgs) -> Duration {
    // A century stands in for "no limit" without overflowing Instant arithmetic.
    args.timeout
        .unwrap_or(Duration::from_secs(100 * 365 * 86400))
}

/// Poll until no job is pending or claimed in any queue, or `timeout` passes (`Ok(false)`).
/// `completed` in the progress counts jobs seen to disappear.
pub fn watch(
    queue: &Queue,
    timeout: Duration,
    progress: impl FnMut(&Progress),
) -> Result<bool, QueueError> {
    watch_with(queue, timeout, || 0, progress)
}

/// [`watch`], with `more` outstanding work beside the queues' (a rebuild's files left).
fn watch_with(
    queue: &Queue,
    timeout: Duration,
    more: impl Fn() -> u64,
    mut progress: impl FnMut(&Progress),
) -> Result<bool, QueueError> {
    let start = Instant::now();
    let mut last = None;
    let mut completed = 0;
    loop {
        let outstanding = queue.outstanding(None)? + more();
        completed += last.map_or(0, |l: u64| l.saturating_sub(outstanding));
        last = Some(outstanding);
        let elapsed = start.elapsed();
        progress(&Progress {
            outstanding,
            completed,
            failed: 0,
            elapsed,
        });
        if outstanding == 0 {
            return Ok(true);
        }
        if elapsed >= timeout {
            return Ok(false);
        }
        std::thread::sleep(WATCH_INTERVAL.min(timeout - elapsed));
    }
}

fn finish(queue: &Queue, args: &WaitArgs, drained: bool, bar: Bar) -> anyhow::Result<i32> {
    bar.done();
    let outstanding = queue.outstanding(None)?;
    let dead: u64 = queue.stats()?.iter().map(|s| s.dead).sum();
    if !drained {
        let secs = args.timeout.unwrap_or_default().as_secs_f64();
        eprintln!("vikingfs: wait: timed out after {secs}s with {outstanding} job(s) outstanding");
        return Ok(EXIT_TIMEOUT);
    }
    if dead > 0 {
        eprintln!("vikingfs: wait: queues drained; {dead} job(s) are dead (see `vikingfs status`)");
    }
    Ok(0)
}

/// An indicatif bar on a terminal; nothing otherwise (logs and pipes stay clean).
pub(super) struct Bar(Option<ProgressBar>);

impl Bar {
    /// The queue's jobs done of all, updated from a drain's [`Progress`].
    pub(super) fn new() -> Bar {
        if !std::io::stderr().is_terminal() {
            return Bar(None);
        }
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("{spinner} jobs {pos}/{len} [{bar:30}] {elapsed} {msg}")
                .expect("static template")
                .progress_chars("=> "),
        );
        Bar(Some(bar))
    }

    /// A spinner for work another process does, whose progress only its outcome shows.
    pub(super) fn waiting_for(what: &str) -> Bar {
        if !std::io::stderr().is_terminal() {
            return Bar(None);
        }
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} waiting for {msg} {elapsed}")
                .expect("static template"),
        );
        bar.set_message(what.to_string());
        Bar(Some(bar))
    }

    pub(super) fn tick(&self) {
        if let Some(bar) = &self.0 {
            bar.tick();
        }
    }

    pub(super) fn update(&mut self, p: &Progress) {
        if let Some(bar) = &self.0 {
            bar.set_length(p.completed + p.outstanding);
            bar.set_position(p.completed);
            if p.failed > 0 {
                bar.set_message(format!("{} failure(s)", p.failed));
            }
        }
    }

    pub(super) fn done(self) {
        if let Some(bar) = self.0 {
            bar.finish_and_clear();
        }
    }
}
