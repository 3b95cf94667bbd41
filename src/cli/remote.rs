//! The commands as a live daemon answers them ([`super::client`]): each sends what its
//! arguments say to the daemon's routes (`server/local.rs`, the same `ops` calls the command
//! makes without a daemon) and prints the answer with the command's own printing code, so the
//! text, the JSON and the exit statuses are the same either way (a busy lock: 75, `wait`'s
//! timeout: 124, `find` with no hit: 1).

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use super::client::{self, Daemon};
use super::{Ctx, EXIT_BUSY};
use crate::index::{Hit, Level};
use crate::server::local::HitRow;
use crate::uri::VPath;

/// POST `body` to `route`: its result, or — a busy lock — the line the command prints and
/// exit status 75 (`Err(75)`); any other failure is the command's error, after `what`.
fn ask(d: &Daemon, what: &str, route: &str, body: &Value) -> anyhow::Result<Result<Value, i32>> {
    match d.call("POST", route, Some(body)) {
        Ok(v) => Ok(Ok(v)),
        Err(e) if client::is_busy(&e) => {
            eprintln!("vikingfs: {what}: {e}");
            Ok(Err(EXIT_BUSY))
        }
        Err(e) => Err(e.context(what.to_string())),
    }
}

/// `vikingfs find` ([`super::find::run`] checked the arguments and read the queries).
pub(super) fn find(
    d: &Daemon,
    ctx: &Ctx,
    args: &super::find::FindArgs,
    queries: &[String],
    under: Option<&VPath>,
    naming: &super::find::Naming,
) -> anyhow::Result<i32> {
    let v = d
        .call(
            "POST",
            "/vikingfs/v1/find",
            Some(&json!({
                "queries": queries,
                "mode": args.mode,
                "limit": args.limit,
                "under": under.map(VPath::uri),
            })),
        )
        .context("find")?;
    let results: Vec<Vec<HitRow>> =
        serde_json::from_value(v["results"].clone()).context("find: the daemon's answer")?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut any = false;
    for (i, rows) in results.into_iter().enumerate() {
        if let Some(text) = queries.get(i) {
            super::find::query_header(&mut out, i, text, args)?;
        }
        let hits = rows
            .into_iter()
            .map(|r| {
                Ok(Hit {
                    uri: VPath::parse_uri(&r.uri, &ctx.config.user)?,
                    level: Level::from_i64(r.level.into())
                        .with_context(|| format!("level {}", r.level))?,
                    score: r.score,
                    snippet: r.snippet,
                    source_version: String::new(),
                    evidence: r.evidence,
                })
            })
            .collect::<anyhow::Result<Vec<Hit>>>()
            .context("find: the daemon's answer")?;
        any |= !hits.is_empty();
        super::find::print_hits(&mut out, &hits, args.json, naming)?;
    }
    out.flush()?;
    Ok(if any { 0 } else { 1 })
}

/// `vikingfs status`'s report, read by the daemon.
pub fn status(d: &Daemon) -> anyhow::Result<Value> {
    d.call("GET", "/vikingfs/v1/status", None)
}

/// The daemon's pool drains the queues; `Ok(true)` once drained, `Ok(false)` when `timeout`
/// passed first (with the daemon's last word on what is left).
fn drained(d: &Daemon, timeout: Option<Duration>) -> anyhow::Result<(bool, Value)> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let v = d.call(
            "POST",
            "/vikingfs/v1/wait",
            Some(&json!({ "timeout": left.map(|l| l.as_secs_f64()) })),
        )?;
        if v["drained"] == true {
            return Ok((true, v));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok((false, v));
        }
    }
}

/// `vikingfs wait [--watch]`: the daemon's pool does the work.
pub fn wait(d: &Daemon, a: &super::wait::WaitArgs) -> anyhow::Result<i32> {
    let (done, v) = drained(d, a.timeout).context("wait")?;
    if !done {
        let secs = a.timeout.unwrap_or_default().as_secs_f64();
        if v["rebuilding"] == true {
            eprintln!(
                "vikingfs: wait: timed out after {secs}s with the index still being rebuilt from \
                 the files"
            );
        } else {
            eprintln!(
                "vikingfs: wait: timed out after {secs}s with {} job(s) outstanding",
                v["outstanding"]
            );
        }
        return Ok(super::wait::EXIT_TIMEOUT);
    }
    let dead = v["dead"].as_u64().unwrap_or(0);
    if dead > 0 {
        eprintln!("vikingfs: wait: queues drained; {dead} job(s) are dead (see `vikingfs status`)");
    }
    Ok(0)
}

/// `vikingfs rm [-r] URI...`: one at a time, stopping at the first that fails.
pub fn rm(d: &Daemon, a: &super::rm::RmArgs, targets: &[VPath]) -> anyhow::Result<i32> {
    for (arg, p) in a.uris.iter().zip(targets) {
        let what = format!("rm {arg}");
        let body = json!({ "uri": p.uri(), "recursive": a.recursive });
        if let Err(code) = ask(d, &what, "/vikingfs/v1/rm", &body)? {
            return Ok(code);
        }
    }
    Ok(0)
}

/// `vikingfs mv SRC DST`.
pub fn mv(d: &Daemon, what: &str, src: &VPath, dst: &VPath) -> anyhow::Result<i32> {
    let body = json!({ "src": src.uri(), "dst": dst.uri() });
    Ok(ask(d, what, "/vikingfs/v1/mv", &body)?.err().unwrap_or(0))
}

/// `vikingfs write URI`: the content read here, written by the daemon.
pub fn write(d: &Daemon, a: &super::write::WriteArgs, p: &VPath) -> anyhow::Result<i32> {
    let what = format!("write {}", a.uri);
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
    let route = format!("/vikingfs/v1/write?uri={}", client::query_value(&p.uri()));
    match d.send("POST", &route, "application/octet-stream", bytes) {
        Ok(_) => Ok(0),
        Err(e) if client::is_busy(&e) => {
            eprintln!("vikingfs: {what}: {e}");
            Ok(EXIT_BUSY)
        }
        Err(e) => Err(e.context(what)),
    }
}

/// `vikingfs add-resource PATH [--to URI] [--wait]`: the daemon copies (the path made
/// absolute: its working directory is not this one) and its pool does the work.
pub fn add(d: &Daemon, a: &super::add::AddArgs, to: Option<&VPath>) -> anyhow::Result<i32> {
    let what = format!("add-resource {}", a.local_path.display());
    let path = std::path::absolute(&a.local_path).with_context(|| what.clone())?;
    let body = json!({ "path": path, "to": to.map(VPath::uri) });
    let rep = match ask(d, &what, "/vikingfs/v1/add", &body)? {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    // The daemon's add, as this process's would: a target that got a `_N` name says so.
    if let Some(w) = rep["warning"].as_str() {
        eprintln!("vikingfs: add-resource: {w}");
    }
    println!("{}", rep["target"].as_str().unwrap_or_default());
    if !a.wait {
        return Ok(0);
    }
    let (done, _) =
        drained(d, Some(Duration::from_secs_f64(a.timeout))).with_context(|| what.clone())?;
    if !done {
        anyhow::bail!("{what}: jobs still outstanding after {}s", a.timeout);
    }
    Ok(0)
}

/// `vikingfs reindex [--under URI] [--json]`, by the daemon, with its configuration.
pub fn reindex(d: &Daemon, a: &super::reindex::ReindexArgs, under: &VPath) -> anyhow::Result<i32> {
    let rep = match ask(
        d,
        "reindex",
        "/vikingfs/v1/reindex",
        &json!({ "under": under.uri() }),
    )? {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    super::reindex::print(&rep, a.json);
    Ok(0)
}

/// `vikingfs fsck` (without `--repair`): the daemon's stores against the files.
pub fn fsck(d: &Daemon, a: &super::fsck::FsckArgs) -> anyhow::Result<i32> {
    let v = d
        .call("POST", "/vikingfs/v1/fsck", Some(&json!({})))
        .context("fsck")?;
    let rep: crate::ops::FsckReport =
        serde_json::from_value(v).context("fsck: the daemon's answer")?;
    super::fsck::print(&rep, a)
}

/// A session route: its result, or the session command's failure (busy: exit 75).
fn session_call(d: &Daemon, route: &str, body: &Value) -> anyhow::Result<Result<Value, i32>> {
    match d.call("POST", route, Some(body)) {
        Ok(v) => Ok(Ok(v)),
        Err(e) if client::is_busy(&e) => {
            eprintln!("vikingfs: {e}");
            Ok(Err(EXIT_BUSY))
        }
        Err(e) => Err(e),
    }
}

/// `vikingfs session add|list|show|commit`; `None`: not one the daemon answers (`recover`
/// runs here).
pub fn session(
    d: &Daemon,
    ctx: &Ctx,
    args: &super::session::SessionArgs,
) -> Option<anyhow::Result<i32>> {
    use super::session::{daemon_arg, SessionCmd};
    let run = || -> anyhow::Result<i32> {
        match &args.cmd {
            SessionCmd::Add {
                session,
                role,
                text,
            } => {
                let body =
                    json!({ "session": daemon_arg(ctx, session)?, "role": role, "text": text });
                Ok(session_call(d, "/vikingfs/v1/session/add", &body)?
                    .err()
                    .unwrap_or(0))
            }
            SessionCmd::List { json } => {
                match session_call(d, "/vikingfs/v1/session/list", &json!({}))? {
                    Ok(v) => {
                        let rows = v.as_array().cloned().unwrap_or_default();
                        super::session::print_list(&rows, *json)
                    }
                    Err(code) => Ok(code),
                }
            }
            SessionCmd::Show { session, json } => {
                let body = json!({ "session": daemon_arg(ctx, session)? });
                match session_call(d, "/vikingfs/v1/session/show", &body)? {
                    Ok(v) => super::session::print_show(&v, *json),
                    Err(code) => Ok(code),
                }
            }
            SessionCmd::Commit(a) => {
                let session = daemon_arg(ctx, &a.session)?;
                let body = json!({ "session": session, "keep": a.keep });
                let report = match session_call(d, "/vikingfs/v1/session/commit", &body)? {
                    Ok(v) => v,
                    Err(code) => return Ok(code),
                };
                let mut drained_in_time = None;
                if let (Some(n), true) = (report["archive"].as_u64(), a.wait) {
                    // The commit's own work only (phase 2 of its archive), as without a daemon;
                    // a busy answer is asked again.
                    let body = json!({ "session": session });
                    drained_in_time = Some(super::session::poll_finished(
                        Duration::from_secs(a.timeout),
                        n as u32,
                        || {
                            Ok(session_call(d, "/vikingfs/v1/session/show", &body)?
                                .is_ok_and(|v| super::session::archive_finished(&v, n as u32)))
                        },
                    )?);
                }
                let outcome = match report["archive"].as_u64() {
                    Some(n) => {
                        let body = json!({ "session": session, "archive": n });
                        match session_call(d, "/vikingfs/v1/session/archive", &body)? {
                            Ok(v) => Some(v),
                            Err(code) => return Ok(code),
                        }
                    }
                    None => None,
                };
                super::session::print_commit(&report, outcome.as_ref(), a, drained_in_time)
            }
            SessionCmd::Rollback {
                session,
                archive,
                json,
            } => {
                let body = json!({ "session": daemon_arg(ctx, session)?, "archive": archive });
                match session_call(d, "/vikingfs/v1/session/rollback", &body)? {
                    Ok(v) => super::session::print_rollback(&v, *json),
                    Err(code) => Ok(code),
                }
            }
            SessionCmd::Recover(_) => unreachable!("answered here"),
        }
    };
    match &args.cmd {
        super::session::SessionCmd::Recover(_) => None,
        _ => Some(run()),
    }
}
