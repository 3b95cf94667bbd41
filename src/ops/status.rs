//! What `vikingfs status --json` reports about a workspace, built once for both faces: read
//! through a daemon's open stores (the CLI asks it over the workspace's socket, so the
//! configuration in force is the daemon's), or opened read-only by a one-shot process from
//! its own configuration. The text form is drawn from this JSON (`cli/status.rs`), so both
//! paths print the same.

use std::time::Duration;

use serde_json::{json, Value};

use super::{index_home, open_queue_of, Result, Stores};
use crate::config::{Backend, Config};
use crate::daemon;
use crate::error::Chain;
use crate::index::Index;
use crate::lock::LockManager;
use crate::queue::{Queue, QueueError, QueueStats, KNOWN_QUEUES};
use crate::workspace::Workspace;

/// Where the report is read from.
pub enum Source<'a> {
    /// A daemon's open stores, and how its model is configured ([`crate::embed::describe`]).
    /// `model`: the daemon's embedder as `embed::describe` names it, `precision` how it
    /// computes (`Embedder::precision`).
    Open {
        stores: &'a Stores,
        model: String,
        precision: Option<&'static str>,
    },
    /// A one-shot process: the stores as `config` says, each opened here to be read.
    Config(&'a Config),
}

/// The report: `{"workspace", "daemons", "queues", "queue_error", "queue_healed", "disk",
/// "locks", "index", "history"}`.
pub fn report(ws: &Workspace, from: &Source<'_>) -> Result<Value> {
    let healed = match from {
        Source::Open { stores, .. } => stores.queue().last_heal().map(|h| {
            let at = jiff::Timestamp::try_from(h.at)
                .map(|t| t.round(jiff::Unit::Second).unwrap_or(t).to_string())
                .unwrap_or_default();
            format!(
                "healed at {at}: it was damaged ({}), was moved to {} and its jobs were \
                 derived again from the files",
                h.why,
                h.aside.display()
            )
        }),
        Source::Config(_) => None,
    };
    let (stats, queue_note) = match from {
        Source::Open { stores, .. } => (queue_stats(stores.queue())?, None),
        Source::Config(config) => {
            // A damaged queue is derived state: say so and go on (the engine's next open
            // rebuilds it). Damage is judged by the header, then by the open's page check.
            let damaged = match config.backend {
                Backend::Sqlite => crate::db::damage(&ws.queue_db()),
                Backend::Postgres { .. } => None,
            };
            let opened = match &damaged {
                Some(why) => Err(why.clone()),
                None => match open_queue_of(ws, &config.backend) {
                    Err(super::OpsError::Queue(
                        QueueError::Open { source, .. } | QueueError::Sql(source),
                    )) if crate::db::is_damage_code(&source) => Err(source.to_string()),
                    r => Ok(r?),
                },
            };
            match opened {
                Ok(queue) => (queue_stats(&queue)?, None),
                Err(why) => (
                    Vec::new(),
                    Some(format!(
                        "damaged ({why}); the daemon's next start or any command that opens \
                         the engine moves it aside and queues its jobs again"
                    )),
                ),
            }
        }
    };
    let disk = disk_note(ws);
    let daemons = daemon::running(ws).map_err(|e| super::OpsError::io(ws.internal_dir(), e))?;
    let locks = match from {
        Source::Open { stores, .. } => stores.locks().list()?,
        Source::Config(config) => LockManager::new(ws, config.lock.clone())?.list()?,
    };
    let index = index_section(ws, from);
    let stale = locks.iter().filter(|l| l.stale).count();
    let daemons: Vec<Value> = daemons
        .iter()
        .map(|d| {
            let mut v = json!(d);
            if let Some(addr) = d.metrics.as_deref() {
                v["metrics_summary"] = metrics_summary(addr);
            }
            v
        })
        .collect();
    let history = history_section(ws, from);
    Ok(json!({
        "workspace": ws.root(),
        "daemons": daemons,
        "queues": queues_json(&stats),
        "queue_error": queue_note,
        "queue_healed": healed,
        "disk": disk,
        "locks": {"held": locks.len() - stale, "stale": stale, "list": locks},
        "index": index,
        "history": history,
    }))
}

/// `{"entries", "bytes", "oldest", "given_back"}` of the history (`entries` and the rest
/// `null` where they cannot be read: a server's, from a one-shot status). `given_back`: the
/// last time history was given back for space (`history/given-back.json`, written by
/// whichever process gave it back), or `null`.
fn history_section(ws: &Workspace, from: &Source<'_>) -> Value {
    let given_back = super::prune::last_given_back(ws).map(|g| {
        json!({
            "at": super::rfc3339(g.at_ms),
            "entries": g.entries,
            "bytes": g.bytes,
            "oldest": super::rfc3339(g.oldest_ms),
            "newest": super::rfc3339(g.newest_ms),
            "free": g.free,
            "line": g.line,
            "why": g.why,
        })
    });
    let rows = match from {
        Source::Open { stores, .. } => stores.history(None, 0).map_err(|e| Chain(&e).to_string()),
        Source::Config(config) if matches!(config.backend, Backend::Sqlite) => {
            crate::journal::Journal::open(&ws.internal_dir().join("ops.db"))
                .and_then(|j| j.history(None, 0))
                .map_err(|e| Chain(&e).to_string())
        }
        Source::Config(_) => {
            return given_back.map_or(Value::Null, |g| json!({ "given_back": g }));
        }
    };
    match rows {
        Ok(rows) => {
            let bytes: u64 = rows
                .iter()
                .filter(|r| r.entry.blob.is_some())
                .map(|r| r.entry.size)
                .sum();
            json!({
                "entries": rows.len(),
                "bytes": bytes,
                "oldest": rows.last().map(|r| super::rfc3339(r.at_ms)),
                "given_back": given_back,
            })
        }
        Err(e) => json!({ "error": e, "given_back": given_back }),
    }
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

/// "full" (with what is left) when the workspace's filesystem has almost no room (writes
/// answer ENOSPC, and rm, rmdir and truncate still work: the engine's reserve) or no inodes.
fn disk_note(ws: &Workspace) -> Option<String> {
    super::gauges::disk_full(ws).map(|full| match full {
        super::gauges::Full::Bytes(free) => format!(
            "full ({} free): writes answer ENOSPC; rm, rmdir and truncate still work",
            crate::content::human_size(free)
        ),
        super::gauges::Full::Inodes => {
            "full (no inodes): creates answer ENOSPC; writes to existing files, rm and rmdir \
             still work"
                .to_string()
        }
    })
}

/// Record count, size on disk and model of the index; an `error` key when it can't be read.
fn index_section(ws: &Workspace, from: &Source<'_>) -> Value {
    let bytes = crate::db::size_on_disk(&ws.index_db());
    let read = |i: &Index| -> anyhow::Result<_> {
        Ok((
            i.stats()?,
            i.stored_model()?,
            super::rebuild::recorded(i),
            i.meta(super::stores::REDERIVED_KEY)?,
            i.location().to_string(),
        ))
    };
    let precision = match from {
        Source::Open { precision, .. } => *precision,
        Source::Config(_) => None,
    };
    let (configured, max_file_bytes, on_server, opened) = match from {
        Source::Open { stores, model, .. } => (
            model.clone(),
            stores.derive.max_file_bytes,
            stores.index().location() != ws.index_db().display().to_string(),
            read(stores.index()),
        ),
        Source::Config(config) => {
            // The configured model as configured (loading it is the daemon's business).
            let configured = crate::embed::describe(&config.embedding);
            let home = match index_home(ws, &config.backend) {
                Ok(home) => home,
                Err(e) => return json!({ "error": Chain(&e).to_string() }),
            };
            if let Some(why) = home.file().and_then(crate::db::damage) {
                return json!({
                    "error": format!("damaged ({why}); the daemon's next start or any command \
                                      that opens the engine moves it aside and rebuilds it"),
                    "bytes": bytes,
                });
            }
            let opened = Index::open_lexical_in(home.store())
                .map_err(anyhow::Error::from)
                .and_then(|i| read(&i));
            (
                configured,
                config.index.max_file_bytes,
                home.file().is_none(),
                opened,
            )
        }
    };
    match opened {
        Ok((st, stored, rebuild, rederived, loc)) => json!({
            "rebuilding": rebuild.map(|p| match p {
                Some((done, total)) => json!({"done": done, "total": total}),
                None => json!({"done": 0, "total": null}),
            }),
            "records": st.records,
            "lexical": st.lexical,
            "vectors": st.vectors,
            "vectors_missing": st.records.saturating_sub(st.vectors),
            "partial": st.partial,
            "max_file_bytes": max_file_bytes,
            "bytes": bytes,
            // Where it is, when not the workspace's index.db.
            "at": on_server.then_some(loc),
            "model": if stored.is_empty() { Value::Null } else { json!(stored) },
            "configured_model": configured,
            // How the daemon's model computes (`vikingfs.index.model_precision`); null
            // without a daemon or a model run in process.
            "model_precision": precision,
            // The model whose vectors the last re-derivation (`reindex`, a daemon started
            // with another model) dropped, while records still wait for their vector.
            "rederived_from": rederived
                .filter(|_| st.records > st.vectors)
                .map(|m| super::stores::model_name(&m)),
        }),
        Err(e) => json!({"error": Chain(&*e).to_string(), "bytes": bytes}),
    }
}

/// Stats of every queue with jobs, plus the project's queues even when empty, sorted by name.
pub fn queue_stats(queue: &Queue) -> Result<Vec<QueueStats>> {
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
