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
use serde_json::Value;

use super::discover::Mount;
use super::Ctx;
use crate::daemon;
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
            return super::usage(format!(
                "--watch takes an interval of at least 0.1 seconds, not {every}"
            ));
        }
    }
    // A named workspace must exist; with none named, each frame looks again.
    let ws = if ctx.named() {
        Some(ctx.existing_workspace()?)
    } else {
        None
    };
    if ws.is_some() {
        if let Some(d) = super::client::Daemon::find(ctx)? {
            return show(args, || {
                format(&with_mounts(ctx, super::remote::status(&d)?), args.json)
            });
        }
    }
    show(args, || match &ws {
        Some(ws) => format(&with_mounts(ctx, report(ctx, ws)?), args.json),
        None => mounts_view(ctx, args.json),
    })
}

/// A named workspace's report with its mounts on this host (`mounts`: live, or dead with the
/// remedy), which only this process can see: the daemon's report is the same without them.
fn with_mounts(ctx: &Ctx, mut v: Value) -> Value {
    let rows: Vec<MountRow> = ctx.workspace_mounts().into_iter().map(mount_row).collect();
    v["mounts"] = serde_json::to_value(rows).unwrap_or_default();
    v
}

/// Print the report once, or every `--watch` seconds.
fn show(args: &StatusArgs, render: impl Fn() -> anyhow::Result<String>) -> anyhow::Result<i32> {
    let Some(every) = args.watch else {
        print!("{}", render()?);
        return Ok(0);
    };
    loop {
        let text = render()?;
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

/// The workspace's report, read by this process.
fn report(ctx: &Ctx, ws: &Workspace) -> anyhow::Result<Value> {
    crate::ops::check_backend(ws, &ctx.config.backend)?;
    Ok(crate::ops::status::report(
        ws,
        &crate::ops::status::Source::Config(&ctx.config),
    )?)
}

/// The report ([`crate::ops::status::report`], read here or by the daemon) as `status`
/// prints it: the JSON itself, or text drawn from it.
pub fn format(v: &Value, as_json: bool) -> anyhow::Result<String> {
    if as_json {
        return Ok(serde_json::to_string_pretty(v)? + "\n");
    }
    let str_of = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut out = format!("workspace: {}\n", str_of(&v["workspace"]));
    let daemons = v["daemons"].as_array().cloned().unwrap_or_default();
    if daemons.is_empty() {
        out += "daemons: none (queues are drained only by `--wait` commands and `vikingfs wait`)\n";
    } else {
        out += "daemons:\n";
        for d in &daemons {
            let mp = d["mountpoint"]
                .as_str()
                .map(|m| format!("mounted at {m}"))
                .unwrap_or_else(|| "no mount".into());
            let w = if d["workers"] == true {
                ", workers"
            } else {
                ""
            };
            let log = d["log"]
                .as_str()
                .map(|l| format!("  log {l}"))
                .unwrap_or_default();
            // Where an agent or `ov` reaches it over HTTP (the Unix socket is always there).
            let api = d["api"]
                .as_str()
                .map(|a| format!("  api http://{a}"))
                .unwrap_or_default();
            out += &format!(
                "  pid {}  {mp}{w}{api}  vikingfs {}{log}\n",
                d["pid"],
                str_of(&d["version"])
            );
        }
        for d in &daemons {
            if let (Some(addr), m) = (d["metrics"].as_str(), &d["metrics_summary"]) {
                if !m.is_null() {
                    out += &format!(
                        "  pid {} metrics http://{addr}/metrics: {}\n",
                        d["pid"],
                        summary_text(m)
                    );
                }
            }
        }
    }
    // A mount whose daemon died answers ENOTCONN: named, with the remedy.
    for m in v["mounts"].as_array().into_iter().flatten() {
        if let (Some(e), Some(fix)) = (m["error"].as_str(), m["remedy"].as_str()) {
            out += &format!(
                "dead mount: {} ({e}): run {fix}\n",
                str_of(&m["mountpoint"])
            );
        }
    }
    if let Some(d) = v["disk"].as_str() {
        out += &format!("disk: {d}\n");
    }
    if let Some(h) = v["queue_healed"].as_str() {
        out += &format!("queue: {h}\n");
    }
    match v["queue_error"].as_str() {
        Some(n) => out += &format!("queues: {n}\n"),
        None => out += &queues_text(&v["queues"]),
    }
    let h = &v["history"];
    if let Some(n) = h["entries"].as_u64() {
        let bytes = crate::content::human_size(h["bytes"].as_u64().unwrap_or(0));
        match h["oldest"].as_str() {
            Some(t) => out += &format!("history: {n} entries, {bytes} kept, oldest {t}\n"),
            None => out += "history: empty\n",
        }
    }
    let g = &h["given_back"];
    if let Some(at) = g["at"].as_str() {
        let size = |k: &str| crate::content::human_size(g[k].as_u64().unwrap_or(0));
        out += &format!(
            "history: gave back {} entries ({}, recorded {} to {}) at {at} for space: {} ({} \
             free)\n",
            g["entries"],
            size("bytes"),
            str_of(&g["oldest"]),
            str_of(&g["newest"]),
            str_of(&g["why"]),
            size("free"),
        );
    }
    let locks = &v["locks"];
    out += &format!("locks: {} held, {} stale\n", locks["held"], locks["stale"]);
    for l in locks["list"].as_array().into_iter().flatten() {
        let why = l["stale_reason"]
            .as_str()
            .map(|r| format!("  STALE: {r}"))
            .unwrap_or_default();
        out += &format!(
            "  {:<5} {}  owner {}  age {}{why}\n",
            str_of(&l["kind"]),
            str_of(&l["uri"]),
            str_of(&l["owner"]),
            human(secs(&l["age_secs"]))
        );
    }
    let index = &v["index"];
    match index.get("error") {
        Some(e) => out += &format!("index: {}\n", e.as_str().unwrap_or_default()),
        None => {
            let size = match index["at"].as_str() {
                Some(at) => format!("on PostgreSQL {at}"),
                None => crate::content::human_size(index["bytes"].as_u64().unwrap_or(0)),
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
            let mut configured = index["configured_model"]
                .as_str()
                .unwrap_or("-")
                .to_string();
            if let Some(p) = index["model_precision"].as_str() {
                configured += &format!(" (run in {p})");
            }
            match index["model"].as_str() {
                Some(stored) => {
                    out += &format!(
                        "  dense    {} vectors, {} to embed; vectors of {stored}; configured: {configured}\n",
                        index["vectors"], index["vectors_missing"],
                    )
                }
                None => out += &format!("  dense    no vectors; configured: {configured}\n"),
            }
            match (index["rederived_from"].as_str(), index["model"].is_null()) {
                (Some("none (lexical only)"), false) => {
                    out += &format!(
                        "  re-deriving: the index was built without a model; every record is \
                         embedded with {configured}: {} still to embed\n",
                        index["vectors_missing"]
                    )
                }
                (Some(old), false) => {
                    out += &format!(
                        "  re-deriving: the vectors of {old} were dropped for {configured}; {} \
                         record(s) still to embed\n",
                        index["vectors_missing"]
                    )
                }
                (Some(old), true) => {
                    out += &format!(
                        "  re-derived: the vectors of {old} were dropped (no model is configured)\n"
                    )
                }
                (None, _) => {}
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
        out += &format(&report(ctx, &ws)?, false)?;
    }
    Ok(out)
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

/// A number of seconds in the report as a duration.
fn secs(v: &Value) -> Duration {
    Duration::try_from_secs_f64(v.as_f64().unwrap_or(0.0).max(0.0)).unwrap_or_default()
}

/// The queue section (the report's `"queues"` object) as text.
pub fn queues_text(queues: &Value) -> String {
    let mut out = String::from("queues:\n");
    let Some(map) = queues.as_object() else {
        return out;
    };
    for (name, s) in map {
        let oldest = match &s["oldest_age_secs"] {
            Value::Null => String::new(),
            a => format!("  oldest {}", human(secs(a))),
        };
        let retrying = match s["retrying"].as_u64().unwrap_or(0) {
            0 => String::new(),
            n => format!(" ({n} retrying)"),
        };
        let expired = match s["expired"].as_u64().unwrap_or(0) {
            0 => String::new(),
            n => format!("  expired {n} (worker gone; next claim takes them)"),
        };
        out += &format!(
            "  {:<15} pending {}{retrying}  running {}{expired}  dead {}{oldest}\n",
            name, s["pending"], s["running"], s["dead"]
        );
        let dead_jobs = s["last_dead"].as_array().cloned().unwrap_or_default();
        for d in &dead_jobs {
            let key = d["key"]
                .as_str()
                .map(|k| format!(" {k}"))
                .unwrap_or_default();
            out += &format!(
                "    dead job {}{key} after {} attempt(s), {} ago: {}\n",
                d["id"],
                d["attempts"],
                human(secs(&d["age_secs"])),
                d["error"].as_str().unwrap_or_default()
            );
        }
        let dead = s["dead"].as_u64().unwrap_or(0) as usize;
        if dead > dead_jobs.len() {
            out += &format!("    ... and {} more dead\n", dead - dead_jobs.len());
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
