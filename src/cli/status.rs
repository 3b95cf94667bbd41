//! `vikingfs status [--json] [--watch]`: running daemons and their mounts, the job queues (per
//! queue: pending, running, dead with their last errors, oldest job age), held and stale locks,
//! and the index size. Sections are built by separate functions so other
//! subsystems (locks, index) can add theirs to the same JSON object and text.
//!
//! With no workspace named (no `--workspace`, no `VIKINGFS_WORKSPACE`, not run inside a
//! mount) it starts with every vikingfs mount of this host (`mounts_view`: the mount table,
//! each mount's daemon from its workspace's registry, a dead one with its remedy), then shows
//! the default workspace if there is one. It never creates a workspace.

use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

use super::discover::Mount;
use super::Ctx;
use crate::daemon;
use crate::error::Chain;
use crate::index::Index;
use crate::lock::LockManager;
use crate::queue::{Queue, QueueStats, KNOWN_QUEUES};
use crate::workspace::Workspace;

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Print one JSON object (`{"daemons": [...], "queues": {NAME: {...}}, "locks": {...},
    /// "index": {...}}`) instead of text; with no workspace named, an array of this host's
    /// vikingfs mounts (`[{"mountpoint", "workspace", "state", "daemon_pid", ...}]`).
    #[arg(long)]
    pub json: bool,
    /// Refresh every SECS seconds (default 2) until interrupted.
    #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "2")]
    pub watch: Option<f64>,
}

pub fn run(ctx: &Ctx, args: &StatusArgs) -> anyhow::Result<i32> {
    if let Some(every) = args.watch {
        if !every.is_finite() || every < 0.1 {
            anyhow::bail!("--watch takes an interval of at least 0.1 seconds, not {every}");
        }
    }
    // A named workspace must exist; with none named, each frame looks again.
    let ws = if ctx.named() {
        Some(ctx.existing_workspace()?)
    } else {
        None
    };
    let frame = || match &ws {
        Some(ws) => render(ctx, ws, args.json),
        None => mounts_view(ctx, args.json),
    };
    let Some(every) = args.watch else {
        print!("{}", frame()?);
        return Ok(0);
    };
    loop {
        let text = frame()?;
        // Clear the screen on a terminal, like watch(1); plain output otherwise.
        if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
            print!("\x1b[H\x1b[2J");
        }
        print!("{text}");
        use std::io::Write;
        std::io::stdout().flush()?;
        std::thread::sleep(Duration::from_secs_f64(every));
    }
}

fn render(ctx: &Ctx, ws: &Workspace, as_json: bool) -> anyhow::Result<String> {
    // A damaged queue is derived state: say so and go on (the engine's next open rebuilds it).
    let damaged = match ctx.config.backend {
        crate::config::Backend::Sqlite => crate::db::damage(&ws.queue_db()),
        crate::config::Backend::Postgres { .. } => None,
    };
    let stats = match &damaged {
        Some(_) => Vec::new(),
        None => queue_stats(&crate::ops::open_queue_of(ws, &ctx.config.backend)?)?,
    };
    let queue_note = damaged.map(|why| {
        format!(
            "damaged ({why}); the daemon's next start or any command that opens the engine \
             moves it aside and queues its jobs again"
        )
    });
    let disk = disk_note(ws);
    let daemons = daemon::running(ws)?;
    let scraped: Vec<Option<Value>> = daemons
        .iter()
        .map(|d| d.metrics.as_deref().map(metrics_summary))
        .collect();
    let locks = LockManager::new(ws, ctx.config.lock.clone())?.list()?;
    let index = index_section(ctx, ws);
    if as_json {
        let stale = locks.iter().filter(|l| l.stale).count();
        let daemons: Vec<Value> = daemons
            .iter()
            .zip(&scraped)
            .map(|(d, m)| {
                let mut v = json!(d);
                if let Some(m) = m {
                    v["metrics_summary"] = m.clone();
                }
                v
            })
            .collect();
        let v = json!({
            "workspace": ws.root(),
            "daemons": daemons,
            "queues": queues_json(&stats),
            "queue_error": queue_note,
            "disk": disk,
            "locks": {"held": locks.len() - stale, "stale": stale, "list": locks},
            "index": index,
        });
        return Ok(serde_json::to_string_pretty(&v)? + "\n");
    }
    let mut out = format!("workspace: {}\n", ws.root().display());
    if daemons.is_empty() {
        out += "daemons: none (queues are drained only by `--wait` commands and `vikingfs wait`)\n";
    } else {
        out += "daemons:\n";
        for d in &daemons {
            let mp = d
                .mountpoint
                .as_ref()
                .map(|m| format!("mounted at {}", m.display()))
                .unwrap_or_else(|| "no mount".into());
            let w = if d.workers { ", workers" } else { "" };
            out += &format!("  pid {}  {mp}{w}  vikingfs {}\n", d.pid, d.version);
        }
        for (d, m) in daemons.iter().zip(&scraped) {
            if let (Some(addr), Some(m)) = (&d.metrics, m) {
                out += &format!(
                    "  pid {} metrics http://{addr}/metrics: {}\n",
                    d.pid,
                    summary_text(m)
                );
            }
        }
    }
    if let Some(d) = &disk {
        out += &format!("disk: {d}\n");
    }
    match &queue_note {
        Some(n) => out += &format!("queues: {n}\n"),
        None => out += &queues_text(&stats),
    }
    let stale = locks.iter().filter(|l| l.stale).count();
    out += &format!("locks: {} held, {} stale\n", locks.len() - stale, stale);
    for l in &locks {
        let why = l
            .stale_reason
            .as_deref()
            .map(|r| format!("  STALE: {r}"))
            .unwrap_or_default();
        out += &format!(
            "  {:<5} {}  owner {}  age {}{why}\n",
            l.kind.as_str(),
            l.uri,
            l.owner,
            human(Duration::from_secs_f64(l.age_secs.max(0.0)))
        );
    }
    match index.get("error") {
        Some(e) => out += &format!("index: {}\n", e.as_str().unwrap_or_default()),
        None => {
            let size = match index["at"].as_str() {
                Some(at) => format!("on PostgreSQL {at}"),
                None => format!("{} bytes", index["bytes"]),
            };
            out += &format!(
                "index: {} records, {size}\n  lexical  {} rows (BM25)\n",
                index["records"], index["lexical"],
            );
            let r = &index["rebuilding"];
            if !r.is_null() {
                let total = r["total"]
                    .as_u64()
                    .map_or_else(|| "?".to_string(), |t| t.to_string());
                out += &format!(
                    "  rebuilding from the files: {} of {total} files (find answers from what is \
                     rebuilt so far)\n",
                    r["done"]
                );
            }
            let partial = index["partial"].as_u64().unwrap_or(0);
            if partial > 0 {
                out += &format!(
                    "  partial  {partial} file(s) longer than vikingfs.index.max_file_bytes ({}): \
                     indexed up to it\n",
                    crate::content::human_size(index["max_file_bytes"].as_u64().unwrap_or(0))
                );
            }
            let configured = index["configured_model"].as_str().unwrap_or("-");
            match index["model"].as_str() {
                Some(stored) => {
                    out += &format!(
                        "  dense    {} vectors, {} to embed; vectors of {stored}; configured: {configured}\n",
                        index["vectors"], index["vectors_missing"],
                    )
                }
                None => out += &format!("  dense    no vectors; configured: {configured}\n"),
            }
        }
    }
    Ok(out)
}

/// One vikingfs mount of this host, as `status` with no workspace named lists it.
#[derive(Serialize)]
struct MountRow {
    mountpoint: std::path::PathBuf,
    workspace: std::path::PathBuf,
    /// `live`, or `dead` when its daemon is gone (the mount point answers ENOTCONN).
    state: &'static str,
    /// The daemon serving it, from the workspace's registry (none for a dead mount, or one
    /// whose daemon's record this host cannot check).
    daemon_pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    remedy: Option<String>,
}

fn mount_row(m: &Mount) -> MountRow {
    let dead = m.dead();
    let error = dead
        .as_ref()
        .map(|e| crate::metrics::errno_name(e.raw_os_error().unwrap_or(0)));
    MountRow {
        mountpoint: m.mountpoint.clone(),
        workspace: m.workspace.clone(),
        state: if dead.is_some() { "dead" } else { "live" },
        daemon_pid: match dead {
            Some(_) => None,
            None => daemon::serving(&m.workspace, &m.mountpoint).map(|d| d.pid),
        },
        remedy: dead.map(|_| format!("umount -l {}", m.mountpoint.display())),
        error,
    }
}

/// `status` with no workspace named: every vikingfs mount of this host, then the default
/// workspace's status when it exists (as text; `--json` gives the array of mounts alone).
fn mounts_view(ctx: &Ctx, as_json: bool) -> anyhow::Result<String> {
    let rows: Vec<MountRow> = ctx.mounts().iter().map(mount_row).collect();
    let ws = match crate::workspace::is_workspace(&ctx.workspace_path) {
        true => Some(ctx.workspace()?),
        false => None,
    };
    if rows.is_empty() && ws.is_none() {
        anyhow::bail!(
            "no vikingfs mounts and no workspace at {}",
            ctx.workspace_path.display()
        );
    }
    if as_json {
        return Ok(serde_json::to_string_pretty(&rows)? + "\n");
    }
    let mut out = String::new();
    if rows.is_empty() {
        out += "vikingfs mounts: none\n";
    } else {
        out += "vikingfs mounts:\n";
    }
    for r in &rows {
        let state = match (&r.error, &r.remedy, r.daemon_pid) {
            (Some(e), Some(fix), _) => format!("dead ({e}): run {fix}"),
            (_, _, Some(pid)) => format!("daemon pid {pid}"),
            _ => "daemon not in its workspace's registry on this host".to_string(),
        };
        out += &format!(
            "  {}  workspace {}  {state}\n",
            r.mountpoint.display(),
            r.workspace.display()
        );
    }
    if let Some(ws) = ws {
        out += "\n";
        out += &render(ctx, &ws, false)?;
    }
    Ok(out)
}

/// What a daemon's metrics endpoint says, in a few numbers (or why it could not be read).
fn metrics_summary(addr: &str) -> Value {
    let s = match crate::metrics::scrape(addr, Duration::from_secs(2)) {
        Ok(s) => s,
        Err(e) => return json!({"error": e}),
    };
    let errno = |e: &str| s.sum("vikingfs_fuse_errors_total", &[("errno", e)]) as u64;
    json!({
        "requests": s.sum("vikingfs_fuse_request_duration_seconds_count", &[]) as u64,
        "ebusy": errno("EBUSY"),
        "enospc": errno("ENOSPC"),
        "eio": errno("EIO"),
        "lock_waits": s.sum("vikingfs_lock_wait_seconds_count", &[]) as u64,
        "lock_busy": s.sum("vikingfs_lock_busy_total", &[]) as u64,
        "jobs_done": s.sum("vikingfs_jobs_total", &[("outcome", "done")]) as u64,
        "jobs_failed": s.sum("vikingfs_jobs_total", &[("outcome", "failed")]) as u64,
    })
}

fn summary_text(m: &Value) -> String {
    if let Some(e) = m["error"].as_str() {
        return format!("unreachable ({e})");
    }
    format!(
        "{} requests (EBUSY {}, ENOSPC {}, EIO {}), {} lock batches ({} busy), jobs {} done, {} failed",
        m["requests"],
        m["ebusy"],
        m["enospc"],
        m["eio"],
        m["lock_waits"],
        m["lock_busy"],
        m["jobs_done"],
        m["jobs_failed"]
    )
}

/// "full" (with what is left) when the workspace's filesystem has almost no room: writes
/// answer ENOSPC, and rm, rmdir and truncate still work (the engine's reserve).
fn disk_note(ws: &Workspace) -> Option<String> {
    crate::ops::gauges::disk_full(ws).map(|free| {
        format!(
            "full ({} free): writes answer ENOSPC; rm, rmdir and truncate still work",
            crate::content::human_size(free)
        )
    })
}

/// Record count, size on disk and model of the index; an `error` key when it can't be read.
fn index_section(ctx: &Ctx, ws: &Workspace) -> Value {
    let bytes = crate::db::size_on_disk(&ws.index_db());
    // The configured model as configured (loading it is the daemon's business, not status').
    let e = &ctx.config.embedding;
    let configured = match (e.provider.as_str(), e.model.as_deref()) {
        ("local", None) => "none (lexical only)".to_string(),
        ("local", Some(dir)) => format!("local {dir}"),
        (p, m) => format!("{p} {}", m.unwrap_or("-")),
    };
    let home = match crate::ops::index_home(ws, &ctx.config.backend) {
        Ok(home) => home,
        Err(e) => return json!({ "error": crate::error::Chain(&e).to_string() }),
    };
    if let Some(why) = home.file().and_then(crate::db::damage) {
        return json!({
            "error": format!("damaged ({why}); the daemon's next start or any command that \
                              opens the engine moves it aside and rebuilds it"),
            "bytes": bytes,
        });
    }
    let mut loc = String::new();
    let opened = Index::open_lexical_in(home.store())
        .map_err(anyhow::Error::from)
        .and_then(|i| {
            let rebuild = crate::ops::rebuild::recorded(&i);
            loc = i.location().to_string();
            Ok((i.stats()?, i.stored_model()?, rebuild))
        });
    match opened {
        Ok((st, stored, rebuild)) => json!({
            "rebuilding": rebuild.map(|p| match p {
                Some((done, total)) => json!({"done": done, "total": total}),
                None => json!({"done": 0, "total": null}),
            }),
            "records": st.records,
            "lexical": st.lexical,
            "vectors": st.vectors,
            "vectors_missing": st.records.saturating_sub(st.vectors),
            "partial": st.partial,
            "max_file_bytes": ctx.config.index.max_file_bytes,
            "bytes": bytes,
            // Where it is, when not the workspace's index.db.
            "at": home.file().is_none().then(|| loc.clone()),
            "model": if stored.is_empty() { Value::Null } else { json!(stored) },
            "configured_model": configured,
        }),
        Err(e) => json!({"error": Chain(&*e).to_string(), "bytes": bytes}),
    }
}

/// Stats of every queue with jobs, plus the project's queues even when empty, sorted by name.
pub fn queue_stats(queue: &Queue) -> anyhow::Result<Vec<QueueStats>> {
    let mut stats = queue.stats()?;
    for name in KNOWN_QUEUES {
        if !stats.iter().any(|s| s.queue == *name) {
            stats.push(QueueStats {
                queue: name.to_string(),
                ..QueueStats::default()
            });
        }
    }
    stats.sort_by(|a, b| a.queue.cmp(&b.queue));
    Ok(stats)
}

/// The `"queues"` section: an object keyed by queue name.
pub fn queues_json(stats: &[QueueStats]) -> Value {
    let secs = |d: Duration| (d.as_secs_f64() * 1000.0).round() / 1000.0;
    let map = stats
        .iter()
        .map(|s| {
            let dead: Vec<Value> = s
                .dead_jobs
                .iter()
                .map(|d| {
                    json!({
                        "id": d.id,
                        "key": d.key,
                        "attempts": d.attempts,
                        "error": d.error,
                        "age_secs": secs(d.age),
                    })
                })
                .collect();
            let v = json!({
                "pending": s.pending,
                "retrying": s.retrying,
                "running": s.running,
                "expired": s.expired,
                "dead": s.dead,
                "oldest_age_secs": s.oldest_age.map(secs),
                "last_dead": dead,
            });
            (s.queue.clone(), v)
        })
        .collect();
    Value::Object(map)
}

/// The queue section as text.
pub fn queues_text(stats: &[QueueStats]) -> String {
    let mut out = String::from("queues:\n");
    for s in stats {
        let oldest = s
            .oldest_age
            .map(|d| format!("  oldest {}", human(d)))
            .unwrap_or_default();
        let retrying = if s.retrying > 0 {
            format!(" ({} retrying)", s.retrying)
        } else {
            String::new()
        };
        let expired = if s.expired > 0 {
            format!(
                "  expired {} (worker gone; next claim takes them)",
                s.expired
            )
        } else {
            String::new()
        };
        out += &format!(
            "  {:<15} pending {}{retrying}  running {}{expired}  dead {}{oldest}\n",
            s.queue, s.pending, s.running, s.dead
        );
        for d in &s.dead_jobs {
            let key = d
                .key
                .as_deref()
                .map(|k| format!(" {k}"))
                .unwrap_or_default();
            out += &format!(
                "    dead job {}{key} after {} attempt(s), {} ago: {}\n",
                d.id,
                d.attempts,
                human(d.age),
                d.error
            );
        }
        if s.dead as usize > s.dead_jobs.len() {
            out += &format!(
                "    ... and {} more dead\n",
                s.dead as usize - s.dead_jobs.len()
            );
        }
    }
    out
}

/// `42s`, `7m03s`, `2h05m`.
fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations() {
        assert_eq!(human(Duration::from_secs(42)), "42s");
        assert_eq!(human(Duration::from_secs(423)), "7m03s");
        assert_eq!(human(Duration::from_secs(7500)), "2h05m");
    }
}
