//! `vikingfs session add|list|show|commit`: the session face of the CLI. Everything is done by
//! [`crate::session`]; this file parses, prints, and maps a busy lock to exit status 75.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};

use super::{Ctx, EXIT_BUSY};
use crate::error::Chain;
use crate::ops::Ops;
use crate::queue;
use crate::session::layout::{self, SessionPath};
use crate::session::messages::new_message;
use crate::session::{self, SessionError, Sessions};

#[derive(Subcommand, Debug)]
pub enum SessionCmd {
    /// Append one message to the session's messages.jsonl (creating the session).
    Add {
        /// Session id, viking://session/SID, viking://user/UID/sessions/SID or the session's
        /// directory under a mount (a path with a `/`, or `.`).
        session: String,
        /// user, assistant, system, tool...
        role: String,
        /// The message text.
        text: String,
    },
    /// List the sessions of the configured user.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Show a session's live messages and its archives.
    Show {
        session: String,
        #[arg(long)]
        json: bool,
    },
    /// Archive the live messages (phase 1) and queue memory extraction (phase 2).
    Commit(CommitArgs),
    /// Finish commits a crash interrupted (phase 1 from .meta.json, phase 2 from the queue).
    Recover(RecoverArgs),
    /// Take out exactly the memory facts the session's commits wrote (all of them, or
    /// archive N's): each changed memory file's previous version stays in the history
    /// (`vikingfs undo` puts it back), a file left without facts is removed.
    Rollback {
        session: String,
        /// Only this commit (its archive number, as `session show` lists them).
        #[arg(long, value_name = "N")]
        archive: Option<u32>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
pub struct CommitArgs {
    /// Session id, viking://session/SID, viking://user/UID/sessions/SID or the session's
    /// directory under a mount (a path with a `/`, or `.`).
    pub session: String,
    /// Leave the N most recent messages in the live file (OpenViking's keep_recent_count).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub keep: usize,
    /// Also wait for this commit's own work before returning: phase 2 (its memories) and the
    /// text records of what it wrote, not the rest of the queue (vectors and summaries come
    /// with a daemon or `vikingfs wait`).
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up after this many seconds (exit 124; the commit is kept).
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct RecoverArgs {
    /// Only this session (default: every session of the configured user).
    pub session: Option<String>,
    /// Also queue phase 2 again for every archive without .done, and retry every dead
    /// session_commit job (after fixing what made them fail: a dead job is not retried by
    /// itself).
    #[arg(long)]
    pub requeue: bool,
    /// Also run the queued phase 2 jobs before returning.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up after this many seconds (exit 124).
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
}

#[derive(Args, Debug)]
pub struct SessionArgs {
    #[command(subcommand)]
    pub cmd: SessionCmd,
}

/// The operations engine (index, embedder, queue) and sessions on it, for commands that index.
fn open_ops(ctx: &Ctx) -> anyhow::Result<(Arc<Ops>, Sessions)> {
    let ops = super::ops::open(ctx)?;
    let sessions = Sessions::from_ops(&ops);
    Ok((ops, sessions))
}

/// Sessions alone (locks and queue), for the commands that only append or read; `existing`:
/// for the ones that only read, which refuse a missing workspace instead of creating it.
fn open(ctx: &Ctx, existing: bool) -> anyhow::Result<Sessions> {
    let ws = if existing {
        ctx.existing_workspace()?
    } else {
        ctx.workspace()?
    };
    let light = crate::ops::Light::open(&ws, &ctx.config).context("locks and queue")?;
    Ok(Sessions::new(ws, light))
}

/// Whether a SESSION argument is a filesystem path (a session's directory under a mount)
/// rather than a session id or a URI: an id is one name, never `.` or `..`.
fn is_path(arg: &str) -> bool {
    !super::discover::is_uri(arg) && (arg.contains('/') || arg == "." || arg == "..")
}

/// The SESSION arguments that are paths, from which the workspace may be found
/// ([`super::Ctx::new`]).
pub fn targets(a: &SessionArgs) -> Vec<&str> {
    let arg = match &a.cmd {
        SessionCmd::Add { session, .. }
        | SessionCmd::Show { session, .. }
        | SessionCmd::Rollback { session, .. } => Some(session),
        SessionCmd::Commit(c) => Some(&c.session),
        SessionCmd::Recover(r) => r.session.as_ref(),
        SessionCmd::List { .. } => None,
    };
    arg.map(String::as_str)
        .filter(|a| is_path(a))
        .into_iter()
        .collect()
}

/// The session a SESSION argument names: an id or a URI, or its directory under a mount of
/// the workspace ([`super::Ctx::target`]).
fn session_of(
    ctx: &Ctx,
    ws: &crate::workspace::Workspace,
    arg: &str,
) -> anyhow::Result<SessionPath> {
    if is_path(arg) {
        let dir = ctx.target(arg).with_context(|| format!("session {arg}"))?;
        return Ok(SessionPath::from_dir(dir)?);
    }
    Ok(SessionPath::resolve(ws, arg)?)
}

/// A SESSION argument as the daemon takes it: a path under a mount made its URI here (the
/// daemon does not know this process's working directory); an id or a URI as it is.
pub(super) fn daemon_arg(ctx: &Ctx, arg: &str) -> anyhow::Result<String> {
    if is_path(arg) {
        Ok(ctx
            .target(arg)
            .with_context(|| format!("session {arg}"))?
            .uri())
    } else {
        Ok(arg.to_string())
    }
}

pub fn run(ctx: &Ctx, args: &SessionArgs) -> anyhow::Result<i32> {
    if !matches!(args.cmd, SessionCmd::Recover(_)) {
        if let Some(d) = super::client::Daemon::find(ctx)? {
            return super::remote::session(&d, ctx, args).unwrap_or(Ok(0));
        }
    }
    let res = match &args.cmd {
        SessionCmd::Add {
            session,
            role,
            text,
        } => add(ctx, session, role, text),
        SessionCmd::List { json } => list(ctx, *json),
        SessionCmd::Show { session, json } => show(ctx, session, *json),
        SessionCmd::Commit(a) => commit(ctx, a),
        SessionCmd::Recover(a) => recover(ctx, a),
        SessionCmd::Rollback {
            session,
            archive,
            json,
        } => rollback(ctx, session, *archive, *json),
    };
    match res {
        Err(e)
            if e.downcast_ref::<SessionError>()
                .is_some_and(SessionError::is_busy) =>
        {
            eprintln!("vikingfs: {}", Chain(&*e));
            Ok(EXIT_BUSY)
        }
        other => other,
    }
}

fn rollback(ctx: &Ctx, session: &str, archive: Option<u32>, json: bool) -> anyhow::Result<i32> {
    let (_ops, sessions) = open_ops(ctx)?;
    let s = session_of(ctx, &sessions.ws, session)?;
    let report = serde_json::to_value(sessions.rollback(&s, archive)?)?;
    print_rollback(&report, json)
}

/// What `session rollback` prints: its report ([`session::rollback::RollbackReport`]).
pub(super) fn print_rollback(r: &serde_json::Value, json: bool) -> anyhow::Result<i32> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
        return Ok(0);
    }
    let list = |k: &str| -> Vec<String> {
        r[k].as_array()
            .into_iter()
            .flatten()
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
            .collect()
    };
    for u in list("changed") {
        println!("took facts out of {u}");
    }
    for u in list("removed") {
        println!("removed {u} (no fact left; kept in the history)");
    }
    let done = list("archives");
    let already = list("already");
    println!(
        "rolled back {} commit(s) ({} fact line(s)){}",
        done.len(),
        r["lines"].as_u64().unwrap_or(0),
        if already.is_empty() {
            String::new()
        } else {
            format!(
                "; archive(s) {} were rolled back before",
                already.join(", ")
            )
        }
    );
    Ok(0)
}

fn add(ctx: &Ctx, session: &str, role: &str, text: &str) -> anyhow::Result<i32> {
    let sessions = open(ctx, false)?;
    let s = session_of(ctx, &sessions.ws, session)?;
    let m = new_message(role, text)?;
    sessions.add_message(&s, &m)?;
    // The queue closes cheaply, as in the other one-shot commands (`crate::db::one_shot_process`:
    // no checkpoint on close).
    drop(sessions);
    Ok(0)
}

fn list(ctx: &Ctx, json: bool) -> anyhow::Result<i32> {
    let sessions = open(ctx, true)?;
    let rows = session::report::list(&sessions, sessions.ws.user())?;
    print_list(&rows, json)
}

/// `session list`'s rows ([`session::report::list`]) as it prints them.
pub(super) fn print_list(rows: &[serde_json::Value], json: bool) -> anyhow::Result<i32> {
    if json {
        println!("{}", serde_json::to_string_pretty(rows)?);
    } else {
        for r in rows {
            println!(
                "{}\t{} live message(s)\t{} archive(s){}",
                r["session"].as_str().unwrap_or_default(),
                r["live_messages"],
                r["archives"],
                if r["pending_commit"].is_null() {
                    String::new()
                } else {
                    format!("\tcommit of archive {} pending", r["pending_commit"])
                }
            );
        }
    }
    Ok(0)
}

fn show(ctx: &Ctx, session: &str, json: bool) -> anyhow::Result<i32> {
    let sessions = open(ctx, true)?;
    let s = session_of(ctx, &sessions.ws, session)?;
    let v = session::report::show(&sessions, &s)?;
    print_show(&v, json)
}

/// `session show`'s report ([`session::report::show`]) as it prints it.
pub(super) fn print_show(v: &serde_json::Value, json: bool) -> anyhow::Result<i32> {
    if json {
        println!("{}", serde_json::to_string_pretty(v)?);
        return Ok(0);
    }
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    println!("# {}", text(&v["uri"]));
    for m in v["messages"].as_array().into_iter().flatten() {
        println!("{}: {}", text(&m["role"]), text(&m["content"]));
    }
    for l in v["invalid_lines"].as_array().into_iter().flatten() {
        println!(
            "! line {} is not a valid message ({}): {}",
            l["line"],
            text(&l["error"]),
            text(&l["text"])
        );
    }
    for a in v["archives"].as_array().into_iter().flatten() {
        println!(
            "# {} {}",
            a["archive"].as_str().unwrap_or_default(),
            if a["done"] == true {
                "done"
            } else if a["failed"] == true {
                "failed (see .failed.json; `vikingfs session recover --requeue` retries)"
            } else {
                "processing"
            }
        );
    }
    let pending: Option<crate::session::meta::PendingCommit> =
        serde_json::from_value(v["pending_commit"].clone()).unwrap_or(None);
    if let Some(p) = pending {
        println!("# commit of archive {} pending ({:?})", p.archive, p.state);
    }
    Ok(0)
}

fn commit(ctx: &Ctx, a: &CommitArgs) -> anyhow::Result<i32> {
    let timeout = Duration::from_secs(a.timeout);
    let (ops, sessions) = open_ops(ctx)?;
    let s = session_of(ctx, &sessions.ws, &a.session)?;
    let report = serde_json::to_value(sessions.commit_keeping(&s, a.keep)?)?;
    let mut drained = None;
    if let (Some(n), true) = (report["archive"].as_u64(), a.wait) {
        drained = Some(wait_own(ctx, &ops, &sessions, &s, n as u32, timeout)?);
    }
    let outcome = report["archive"]
        .as_u64()
        .map(|n| session::report::archive_outcome(&sessions, &s, n as u32));
    print_commit(&report, outcome.as_ref(), a, drained)
}

/// What `session commit` prints: its report ([`session::CommitReport`] as JSON), what became
/// of the archive ([`session::report::archive_outcome`]), and whether `--wait` saw the work
/// drained.
pub(super) fn print_commit(
    report: &serde_json::Value,
    outcome: Option<&serde_json::Value>,
    a: &CommitArgs,
    drained: Option<bool>,
) -> anyhow::Result<i32> {
    let wait = a.wait;
    let diff = outcome
        .map(|o| o["memory_diff"].clone())
        .filter(|d| !d.is_null());
    if a.json {
        let mut v = report.clone();
        v["memory_diff"] = diff.clone().unwrap_or(serde_json::Value::Null);
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for n in report["recovered"].as_array().into_iter().flatten() {
            println!(
                "finished interrupted commit of {}",
                layout::archive_name(n.as_u64().unwrap_or_default() as u32)
            );
        }
        match report["archive_uri"].as_str() {
            None => println!(
                "nothing to commit in {}",
                report["session"].as_str().unwrap_or_default()
            ),
            Some(uri) => println!(
                "archived {} message(s) and {} invalid line(s) (kept verbatim) to {uri}",
                report["messages"], report["invalid_lines"]
            ),
        }
        if let Some(d) = &diff {
            println!(
                "memories: {} added, {} updated, {} unchanged",
                d["summary"]["total_adds"],
                d["summary"]["total_updates"],
                d["summary"]["unchanged"]
            );
        } else if !report["archive"].is_null() && !wait {
            println!("memory extraction queued (a daemon or `vikingfs wait` runs it)");
        }
    }
    if let (Some(n), true) = (report["archive"].as_u64(), wait) {
        if let Some(f) = outcome.map(|o| &o["failed"]).filter(|f| !f.is_null()) {
            eprintln!(
                "vikingfs: session commit: phase 2 of {} failed: {} (messages are archived; see {})",
                layout::archive_name(n as u32),
                f["error"].as_str().unwrap_or("unknown error"),
                f["path"].as_str().unwrap_or_default()
            );
            return Ok(1);
        }
    }
    if drained == Some(false) {
        eprintln!(
            "vikingfs: session commit: background work not finished after {}s \
             (the commit is made; `vikingfs wait` finishes the rest)",
            a.timeout
        );
        return Ok(super::wait::EXIT_TIMEOUT);
    }
    Ok(0)
}

fn recover(ctx: &Ctx, a: &RecoverArgs) -> anyhow::Result<i32> {
    let (ops, sessions) = open_ops(ctx)?;
    let all = match &a.session {
        Some(sid) => {
            let s = session_of(ctx, &sessions.ws, sid)?;
            let n = sessions.recover(&s)?;
            session::RecoverAll {
                recovered: n.map(|n| (s, n)).into_iter().collect(),
                failed: Vec::new(),
            }
        }
        None => sessions.recover_all(sessions.ws.user())?,
    };
    for (s, n) in &all.recovered {
        println!("finished interrupted commit of {}", s.archive(*n).uri());
    }
    for (_, e) in &all.failed {
        eprintln!("vikingfs: {}", Chain(e));
    }
    if a.requeue {
        let targets = match &a.session {
            Some(sid) => vec![session_of(ctx, &sessions.ws, sid)?],
            None => layout::list_sessions(&sessions.ws, sessions.ws.user())?,
        };
        for s in targets {
            for n in sessions.requeue_undone(&s)? {
                println!("queued phase 2 of {}", s.archive(n).uri());
            }
        }
        // Dead rows superseded by the jobs just queued go; any other comes back to life.
        sessions.retry_dead_commits()?;
    }
    if a.wait && !drain(ctx, &ops, Duration::from_secs(a.timeout))? {
        eprintln!(
            "vikingfs: session recover: background work not finished after {}s",
            a.timeout
        );
        return Ok(super::wait::EXIT_TIMEOUT);
    }
    Ok(if all.failed.is_empty() { 0 } else { 1 })
}

/// What `vikingfs wait` adds for sessions: every interrupted commit of the configured user is
/// finished (one line per session that cannot be), and the `session_commit` handler is
/// returned for the pool that drains the queues.
pub fn wait_hook(ctx: &Ctx, ops: &Arc<Ops>) -> anyhow::Result<Vec<queue::HandlerSpec>> {
    let sessions = Sessions::from_ops(ops);
    let all = sessions.recover_all(sessions.ws.user())?;
    for (s, n) in &all.recovered {
        eprintln!(
            "vikingfs: finished interrupted commit of {}",
            s.archive(*n).uri()
        );
    }
    for (_, e) in &all.failed {
        eprintln!("vikingfs: {}", Chain(e));
    }
    Ok(vec![session::handler_spec(ops.clone(), &ctx.config)?])
}

/// A daemon's start: finish every commit a crash left in phase 1 (failures are logged; the
/// next append, commit or `vikingfs wait` tries again).
pub fn recover_at_start(ops: &Arc<Ops>) {
    let sessions = Sessions::from_ops(ops);
    match sessions.recover_all(sessions.ws.user()) {
        Ok(all) => {
            for (s, n) in &all.recovered {
                tracing::info!(archive = %s.archive(*n).uri(), "finished an interrupted commit");
            }
            for (s, e) in &all.failed {
                tracing::warn!(session = %s.dir.uri(), "interrupted commit not recovered: {}", Chain(e));
            }
        }
        Err(e) => tracing::warn!("recovering sessions: {}", Chain(&e)),
    }
}

/// Wait for this commit's own work — phase 2 of archive `n`, which writes its memories and
/// their records — and not for the rest of the queue (a backlog of unrelated vectors used to
/// keep `commit --wait` waiting for minutes). With a daemon's workers running it, watch the
/// archive; else run phase 2 and the text records' queue here, not the vectors' or the
/// summaries' (a daemon or `vikingfs wait` does those).
fn wait_own(
    ctx: &Ctx,
    ops: &Arc<Ops>,
    sessions: &Sessions,
    s: &SessionPath,
    n: u32,
    timeout: Duration,
) -> anyhow::Result<bool> {
    let finished = || Ok(archive_finished(&session::report::show(sessions, s)?, n));
    if crate::daemon::workers_running(ops.workspace()) {
        return poll_finished(timeout, n, finished);
    }
    let spec = session::handler_spec(ops.clone(), &ctx.config)?;
    let mut bar = super::wait::Bar::new();
    ops.drain_some(
        &ctx.config.workers,
        &[queue::EMBEDDING],
        vec![spec],
        timeout,
        |p| bar.update(p),
    )?;
    bar.done();
    finished()
}

/// Whether phase 2 of archive `n` has run (done, or given up on), in `session show`'s report
/// ([`session::report::show`], also what a daemon answers).
pub(super) fn archive_finished(show: &serde_json::Value, n: u32) -> bool {
    let name = layout::archive_name(n);
    show["archives"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|a| a["archive"] == name.as_str() && (a["done"] == true || a["failed"] == true))
}

/// Ask `finished` until it says so or `timeout` has passed: another process (a daemon's
/// workers) does the work, which only its results show. A spinner on a terminal.
pub(super) fn poll_finished(
    timeout: Duration,
    n: u32,
    mut finished: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<bool> {
    let bar = super::wait::Bar::waiting_for(&format!("phase 2 of {}", layout::archive_name(n)));
    let start = std::time::Instant::now();
    let done = loop {
        if finished()? {
            break true;
        }
        if start.elapsed() >= timeout {
            break false;
        }
        bar.tick();
        std::thread::sleep(Duration::from_millis(100));
    };
    bar.done();
    Ok(done)
}

/// Wait for phase 2 and the embeddings and summaries it queues: watch the queue while a
/// daemon's workers run them, else run every queue in this process until empty.
fn drain(ctx: &Ctx, ops: &Arc<Ops>, timeout: Duration) -> anyhow::Result<bool> {
    if crate::daemon::workers_running(ops.workspace()) {
        return Ok(super::wait::watch(ops.queue(), timeout, |_| {})?);
    }
    let extra = vec![session::handler_spec(ops.clone(), &ctx.config)?];
    Ok(ops.drain_with_extra(&ctx.config.workers, extra, timeout, |_| {})?)
}
