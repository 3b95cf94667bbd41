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
use crate::session::layout::{self, SessionPath, DONE, MEMORY_DIFF};
use crate::session::messages::new_message;
use crate::session::meta::Meta;
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
}

#[derive(Args, Debug)]
pub struct CommitArgs {
    /// Session id, viking://session/SID, viking://user/UID/sessions/SID or the session's
    /// directory under a mount (a path with a `/`, or `.`).
    pub session: String,
    /// Leave the N most recent messages in the live file (OpenViking's keep_recent_count).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub keep: usize,
    /// Also run phase 2 (and the indexing it queues) before returning.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up after this many seconds.
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
    /// With --wait: give up after this many seconds.
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
    let ws = ctx.workspace()?;
    let ops = Ops::open(&ws, &ctx.config)?;
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
        SessionCmd::Add { session, .. } | SessionCmd::Show { session, .. } => Some(session),
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

pub fn run(ctx: &Ctx, args: &SessionArgs) -> anyhow::Result<i32> {
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
    let mut rows = Vec::new();
    for s in layout::list_sessions(&sessions.ws, sessions.ws.user())? {
        let live = sessions.live_messages(&s)?;
        let archives = layout::archives_on_disk(&sessions.ws, &s)?;
        let meta = Meta::load(&sessions.ws, &s)?;
        rows.push(serde_json::json!({
            "session": s.sid,
            "uri": s.dir.uri(),
            "live_messages": live.messages.len(),
            "live_invalid_lines": live.invalid.len(),
            "archives": archives.len(),
            "pending_commit": meta.pending_commit.map(|p| p.archive),
        }));
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
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
    let ws = &sessions.ws;
    let s = session_of(ctx, ws, session)?;
    if !ws.fs_path(&s.dir).is_dir() {
        return Err(SessionError::NoSuchSession(s.dir.uri()).into());
    }
    let live = sessions.live_messages(&s)?;
    let mut archives = Vec::new();
    for n in layout::archives_on_disk(ws, &s)? {
        let done = ws.fs_path(&s.archive_file(n, DONE)).exists();
        let failed = ws.fs_path(&s.archive_file(n, layout::FAILED)).exists();
        let diff: Option<serde_json::Value> =
            std::fs::read(ws.fs_path(&s.archive_file(n, MEMORY_DIFF)))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
        archives.push(serde_json::json!({
            "archive": layout::archive_name(n),
            "uri": s.archive(n).uri(),
            "done": done,
            "failed": failed && !done,
            "memory_summary": diff.map(|d| d["summary"].clone()),
        }));
    }
    let meta = Meta::load(ws, &s)?;
    if json {
        let v = serde_json::json!({
            "session": s.sid,
            "uri": s.dir.uri(),
            "messages": live.messages,
            "invalid_lines": live.invalid,
            "archives": archives,
            "pending_commit": meta.pending_commit,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    println!("# {}", s.dir.uri());
    for m in &live.messages {
        println!("{}: {}", m.role, m.content);
    }
    for l in &live.invalid {
        println!(
            "! line {} is not a valid message ({}): {}",
            l.line, l.error, l.text
        );
    }
    for a in &archives {
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
    if let Some(p) = meta.pending_commit {
        println!("# commit of archive {} pending ({:?})", p.archive, p.state);
    }
    Ok(0)
}

fn commit(ctx: &Ctx, a: &CommitArgs) -> anyhow::Result<i32> {
    let (wait, json, timeout) = (a.wait, a.json, Duration::from_secs(a.timeout));
    let (ops, sessions) = open_ops(ctx)?;
    let s = session_of(ctx, &sessions.ws, &a.session)?;
    let report = sessions.commit_keeping(&s, a.keep)?;
    let mut drained = None;
    if wait {
        drained = Some(drain(ctx, &ops, timeout)?);
    }
    let diff = report.archive.and_then(|n| {
        std::fs::read(sessions.ws.fs_path(&s.archive_file(n, MEMORY_DIFF)))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
    });
    if json {
        let mut v = serde_json::to_value(&report)?;
        v["memory_diff"] = diff.clone().unwrap_or(serde_json::Value::Null);
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for n in &report.recovered {
            println!(
                "finished interrupted commit of {}",
                layout::archive_name(*n)
            );
        }
        match &report.archive_uri {
            None => println!("nothing to commit in {}", report.session),
            Some(uri) => println!(
                "archived {} message(s) and {} invalid line(s) (kept verbatim) to {uri}",
                report.messages, report.invalid_lines
            ),
        }
        if let Some(d) = &diff {
            println!(
                "memories: {} added, {} updated, {} unchanged",
                d["summary"]["total_adds"],
                d["summary"]["total_updates"],
                d["summary"]["unchanged"]
            );
        } else if report.archive.is_some() && !wait {
            println!("memory extraction queued (a daemon or `vikingfs wait` runs it)");
        }
    }
    if let Some(n) = report.archive.filter(|_| wait) {
        let failed = sessions.ws.fs_path(&s.archive_file(n, layout::FAILED));
        if let Ok(b) = std::fs::read(&failed) {
            let v: serde_json::Value = serde_json::from_slice(&b).unwrap_or_default();
            eprintln!(
                "vikingfs: session commit: phase 2 of {} failed: {} (messages are archived; see {})",
                layout::archive_name(n),
                v["error"].as_str().unwrap_or("unknown error"),
                failed.display()
            );
            return Ok(1);
        }
    }
    if drained == Some(false) {
        eprintln!(
            "vikingfs: session commit: background work not finished after {}s",
            timeout.as_secs()
        );
        return Ok(EXIT_BUSY);
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
        return Ok(EXIT_BUSY);
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

/// Wait for phase 2 and the embeddings and summaries it queues: watch the queue while a
/// daemon's workers run them, else run every queue in this process until empty.
fn drain(ctx: &Ctx, ops: &Arc<Ops>, timeout: Duration) -> anyhow::Result<bool> {
    if crate::daemon::workers_running(ops.workspace()) {
        return Ok(super::wait::watch(ops.queue(), timeout, |_| {})?);
    }
    let extra = vec![session::handler_spec(ops.clone(), &ctx.config)?];
    Ok(ops.drain_with_extra(&ctx.config.workers, extra, timeout, |_| {})?)
}
