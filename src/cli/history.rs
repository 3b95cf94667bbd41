//! `vikingfs history [URI]` and `vikingfs undo URI`: what removals kept, and putting it back.

use anyhow::Context;
use clap::Args;

use super::ops::{done, open_locked, outcome};
use super::Ctx;
use crate::ops::{undo_time, Shown};
use crate::uri::VPath;

/// A time argument (`--since`, `--at`) read by clap, so a bad one is a usage error (exit 2,
/// the exit-status table's "a bad argument"), not an error of the command: ms since the epoch.
fn time_arg(t: &str) -> Result<i64, String> {
    undo_time(t)
}

#[derive(Args, Debug)]
pub struct HistoryArgs {
    /// A viking:// URI (or a path under a mount): entries of it and everything under it;
    /// all entries when left out.
    #[arg(value_name = "URI")]
    pub uri: Option<String>,
    /// Only entries since T: an RFC 3339 time (2026-12-04T10:00:00Z) or a span ago (10m, 2h,
    /// 3d).
    #[arg(long, value_name = "T", value_parser = time_arg)]
    pub since: Option<i64>,
    /// One JSON array of entries, newest first.
    #[arg(long)]
    pub json: bool,
    /// Entries of ignored paths too (what `.vikingignore` and the built-in defaults ignore:
    /// `.git/`, editor swap files, ...), which are left out by default.
    #[arg(long)]
    pub all: bool,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["uri", "since"]).multiple(true)))]
pub struct UndoArgs {
    /// The viking:// URI (or a path under a mount) to put back: a file or a tree; with
    /// --since, what to rewind (default: every scope).
    #[arg(value_name = "URI")]
    pub uri: Option<String>,
    /// Rewind everything under URI to T: what was removed or overwritten since comes back,
    /// what was created since goes into the history (an RFC 3339 time, or a span ago).
    #[arg(long, value_name = "T", conflicts_with_all = ["at", "force"], value_parser = time_arg)]
    pub since: Option<i64>,
    /// Restore it as it was at T (an RFC 3339 time, or a span ago: 10m, 2h); default: as it
    /// was before the last command that changed it.
    #[arg(long, value_name = "T", value_parser = time_arg)]
    pub at: Option<i64>,
    /// Print what would be restored and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Replace what exists now (it goes into the history first) instead of leaving it alone.
    #[arg(long)]
    pub force: bool,
    /// What was restored and what was left alone, as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn history(ctx: &Ctx, a: &HistoryArgs) -> anyhow::Result<i32> {
    let under = a
        .uri
        .as_deref()
        .map(|u| ctx.target(u).with_context(|| format!("history {u}")))
        .transpose()?;
    let since = a.since.unwrap_or(0);
    if let Some(d) = super::client::Daemon::find(ctx)? {
        let body = serde_json::json!({
            "uri": under.as_ref().map(|p| p.uri()), "since_ms": since, "all": a.all,
        });
        let v = d.call("POST", "/vikingfs/v1/history", Some(&body))?;
        let mut rows: Vec<Shown> = serde_json::from_value(v)?;
        // A daemon started from an older binary (the CLI upgraded under a live mount) sends
        // the entries without it: their recording time is the best there is.
        for s in rows.iter_mut().filter(|s| s.happened_ms == 0) {
            s.happened_ms = s.recorded.at_ms;
        }
        print_history(&rows, a.json)?;
        return Ok(0);
    }
    let ops = open_locked(ctx)?;
    let rows = ops.stores().history_view(under.as_ref(), since, a.all)?;
    print_history(&rows, a.json)?;
    done(ops, 0)
}

/// The entries as `history` prints them (the same whether the daemon read them or not).
fn print_history(rows: &[Shown], json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(rows)?);
        return Ok(());
    }
    for s in rows {
        let r = &s.recorded;
        let e = &r.entry;
        let kept = match (&e.blob, &e.reason) {
            (Some(_), _) => crate::content::human_size(e.size),
            (None, Some(why)) => why.clone(),
            (None, None) => "not kept".into(),
        };
        let who = match (e.pid, &e.cmd) {
            (Some(p), Some(c)) => format!("  pid {p} ({c})"),
            (Some(p), None) => format!("  pid {p}"),
            // An API request or an MCP tool call: its caller's name.
            (None, Some(c)) => format!("  ({c})"),
            (None, None) => String::new(),
        };
        let to = e
            .new_path
            .as_deref()
            .map(|n| format!(" -> viking://{n}"))
            .unwrap_or_default();
        let kept = match (&r.sha256, e.op.as_str()) {
            (_, "mv") => String::new(),
            // The first 12 hex digits tell versions apart at a glance (`--json` has all 64).
            (Some(h), _) => format!("{kept} sha256:{}", &h[..h.len().min(12)]),
            (None, _) => kept,
        };
        println!(
            "{}  {:<4} {:<7} viking://{}{to}  {kept}{who}",
            crate::ops::rfc3339(s.happened_ms),
            e.op,
            e.kind,
            e.path
        );
    }
    Ok(())
}

pub fn undo(ctx: &Ctx, a: &UndoArgs) -> anyhow::Result<i32> {
    let what = match &a.uri {
        Some(u) => format!("undo {u}"),
        None => "undo --since".to_string(),
    };
    let (at, since) = (a.at, a.since);
    // What to put back: the URI, or for a rewind without one every scope.
    let targets: Vec<VPath> = match &a.uri {
        Some(u) => vec![ctx.target(u).with_context(|| what.clone())?],
        None => crate::uri::SCOPES
            .iter()
            .map(|s| VPath::root().join(s))
            .collect::<Result<_, _>>()?,
    };
    let mut code = 0;
    for p in &targets {
        code = code.max(undo_one(ctx, a, &what, p, at, since)?);
        if code == super::EXIT_BUSY {
            break;
        }
    }
    Ok(code)
}

/// One undo or rewind of `p`, through the daemon when one serves the workspace.
fn undo_one(
    ctx: &Ctx,
    a: &UndoArgs,
    what: &str,
    p: &VPath,
    at: Option<i64>,
    since: Option<i64>,
) -> anyhow::Result<i32> {
    if let Some(d) = super::client::Daemon::find(ctx)? {
        let body = serde_json::json!({
            "uri": p.uri(), "at_ms": at, "since_ms": since, "dry_run": a.dry_run,
            "force": a.force,
        });
        let v = match d.call("POST", "/vikingfs/v1/undo", Some(&body)) {
            Ok(v) => v,
            Err(e) if super::client::is_busy(&e) => {
                eprintln!("vikingfs: {what}: {e}");
                return Ok(super::EXIT_BUSY);
            }
            Err(e) => return Err(e.context(what.to_string())),
        };
        let r: crate::ops::UndoReport = serde_json::from_value(v)?;
        return print_undo(&r, a);
    }
    let ops = open_locked(ctx)?;
    let mut report = None;
    let run = match since {
        Some(t) => ops.rewind(p, t, a.dry_run),
        None => ops.undo(p, at, a.dry_run, a.force),
    };
    let code = outcome(
        what,
        run.map(|r| {
            report = Some(r);
        }),
    )?;
    let Some(r) = report else {
        return done(ops, code);
    };
    let code = print_undo(&r, a)?;
    done(ops, code)
}

/// What an undo did, as `undo` prints it; its exit code (1 when something was left alone).
fn print_undo(r: &crate::ops::UndoReport, a: &UndoArgs) -> anyhow::Result<i32> {
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        let verb = if a.dry_run {
            "would restore"
        } else {
            "restored"
        };
        for (uri, _) in &r.restored {
            println!("{verb} {uri}");
        }
        for (from, to) in &r.moved {
            let verb = if a.dry_run {
                "would move back"
            } else {
                "moved back"
            };
            println!("{verb} {from} to {to}");
        }
        for uri in &r.removed {
            let verb = if a.dry_run {
                "would take out"
            } else {
                "took out"
            };
            println!("{verb} {uri} (made since; kept in the history)");
        }
        for (uri, why) in &r.conflicts {
            println!("left alone {uri}: {why}");
        }
        println!(
            "{} path(s) {verb} as at {}; {} left alone",
            r.restored.len(),
            crate::ops::rfc3339(r.at_ms),
            r.conflicts.len()
        );
    }
    // Something asked for and left alone: say so in the exit code too.
    Ok(if r.conflicts.is_empty() { 0 } else { 1 })
}
