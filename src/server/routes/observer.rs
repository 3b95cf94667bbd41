//! Component status: `GET /api/v1/observer/queue|vikingdb|models|lock|retrieval|filesystem|system`
//! (OpenViking 0.5.2's `routers/observer.py`). Each component answers `{name, is_healthy, has_errors, status}`,
//! `status` being OpenViking's text table (`format=table`, the default) or the same rows as
//! JSON (`format=json`); `system` gathers them with `is_healthy` and `errors`.
//!
//! The figures are vikingfs's own: the job queues' counts (processed and requeued: since this
//! daemon started), the index's records and vectors, the configured embedding model and
//! summariser; the lock files held and found stale, and the waits and busy answers since
//! the daemon started (`lock`: counts only, never a path, so no caller learns another's
//! names); the `find` / `search` queries this daemon answered and their scores
//! (`retrieval`, as OpenViking's `RetrievalStatsCollector` counts); the mount's requests and
//! errors by operation (`filesystem`, from the process's metrics). A queue with dead jobs is
//! unhealthy (they wait for a repair), and so is a stale or corrupt lock file.

use std::sync::Arc;

use axum::extract::State;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{get, Routes};
use crate::error::Chain;
use crate::server::auth::Identity;
use crate::server::extract::Params;
use crate::server::reply::{ok, ApiError, ApiResult};
use crate::server::{blocking, Api};

pub fn routes() -> Routes {
    Routes::new()
        .route("/api/v1/observer/queue", get(queue))
        .route("/api/v1/observer/vikingdb", get(vikingdb))
        .route("/api/v1/observer/models", get(models))
        .route("/api/v1/observer/lock", get(lock))
        .route("/api/v1/observer/retrieval", get(retrieval))
        .route("/api/v1/observer/filesystem", get(filesystem))
        .route("/api/v1/observer/system", get(system))
}

#[derive(Deserialize, Default)]
struct FormatParams {
    #[serde(default)]
    format: Option<String>,
}

impl FormatParams {
    fn json(&self) -> Result<bool, ApiError> {
        match self.format.as_deref() {
            None | Some("table") => Ok(false),
            Some("json") => Ok(true),
            Some(o) => Err(ApiError::invalid(format!(
                "format must be 'table' or 'json', got {o:?}"
            ))),
        }
    }
}

/// One component's status.
struct Component {
    name: &'static str,
    healthy: bool,
    errors: Vec<String>,
    table: String,
    rows: Value,
}

impl Component {
    fn to_json(&self, as_json: bool) -> Value {
        json!({
            "name": self.name,
            "is_healthy": self.healthy,
            "has_errors": !self.errors.is_empty(),
            "status": if as_json { self.rows.clone() } else { Value::String(self.table.clone()) },
        })
    }
}

/// A text table as OpenViking's observers print them (prettytable's default style: cells
/// centred, `+---+` rules).
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let rule = format!(
        "+{}+",
        widths
            .iter()
            .map(|w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("+")
    );
    let line = |cells: Vec<&str>| {
        let cells: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| {
                let pad = w - c.chars().count();
                let left = pad / 2;
                format!(" {}{}{} ", " ".repeat(left), c, " ".repeat(pad - left))
            })
            .collect();
        format!("|{}|", cells.join("|"))
    };
    let mut out = vec![rule.clone(), line(headers.to_vec()), rule.clone()];
    for r in rows {
        out.push(line(r.iter().map(String::as_str).collect()));
    }
    out.push(rule);
    out.join("\n")
}

fn queue_component(api: &Api) -> Result<Component, ApiError> {
    let stats = api
        .ops
        .queue()
        .stats()
        .map_err(|e| ApiError::internal(Chain(&e).to_string()))?;
    let m = crate::metrics::get();
    let mut rows = Vec::new();
    let mut json_rows = Vec::new();
    let mut total = [0u64; 6];
    let mut errors = Vec::new();
    for name in crate::queue::KNOWN_QUEUES {
        let s = stats.iter().find(|s| s.queue == *name);
        let pending = s.map_or(0, |s| s.pending);
        let running = s.map_or(0, |s| s.running + s.expired);
        let dead = s.map_or(0, |s| s.dead);
        let processed = m.jobs.with_label_values(&[name, "done"]).get();
        let requeued =
            m.jobs.with_label_values(&[name, "deferred"]).get() + s.map_or(0, |s| s.retrying);
        let sum = pending + running + processed + dead;
        for (t, v) in total
            .iter_mut()
            .zip([pending, running, processed, requeued, dead, sum])
        {
            *t += v;
        }
        if dead > 0 {
            errors.push(format!("queue {name}: {dead} dead job(s)"));
        }
        json_rows.push(json!({
            "queue": name, "pending": pending, "in_progress": running, "processed": processed,
            "requeued": requeued, "errors": dead, "total": sum,
        }));
        rows.push(
            [
                name.to_string(),
                pending.to_string(),
                running.to_string(),
                processed.to_string(),
                requeued.to_string(),
                dead.to_string(),
                sum.to_string(),
            ]
            .to_vec(),
        );
    }
    let mut last = vec!["TOTAL".to_string()];
    last.extend(total.iter().map(u64::to_string));
    rows.push(last);
    Ok(Component {
        name: "queue",
        healthy: errors.is_empty(),
        errors,
        table: table(
            &[
                "Queue",
                "Pending",
                "In Progress",
                "Processed",
                "Requeued",
                "Errors",
                "Total",
            ],
            &rows,
        ),
        rows: Value::Array(json_rows),
    })
}

fn backend_name(api: &Api) -> &'static str {
    if api.ops.index().location().starts_with("postgres") {
        "postgres"
    } else {
        "local"
    }
}

fn vikingdb_component(api: &Api, who: &Identity) -> Result<Component, ApiError> {
    let index = api.ops.index();
    let stats = index
        .stats()
        .map_err(|e| ApiError::internal(Chain(&e).to_string()))?;
    let dim = if index.has_dense() { index.dim() } else { 0 };
    let table = format!(
        "Account: {}\nBackend: {}\nCollection: context\nIndex: default\nDimension: {dim}\n\
         Vector count: {}\nRecord count: {}",
        who.account,
        backend_name(api),
        stats.vectors,
        stats.records
    );
    Ok(Component {
        name: "vikingdb",
        healthy: true,
        errors: Vec::new(),
        table,
        rows: json!({
            "account": who.account, "backend": backend_name(api), "collection": "context",
            "index": "default", "dimension": dim, "vector_count": stats.vectors,
            "record_count": stats.records, "lexical_count": stats.lexical,
            "partial_count": stats.partial,
        }),
    })
}

fn models_component(api: &Api, who: &Identity) -> Component {
    let (embed_model, dim) = match api.ops.embedder() {
        Some(e) => (Some(e.model_id()), e.dim()),
        None => (None, 0),
    };
    let summarizer = api.ops.summarizer_name();
    let headers = [
        "Model",
        "Provider",
        "Calls",
        "Prompt",
        "Completion",
        "Total",
        "Last Updated",
    ];
    // vikingfs does not count model calls or tokens: those cells say so.
    let row = |model: &str, provider: &str| {
        [model, provider, "-", "-", "-", "-", "-"]
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    };
    let vlm = table(&headers, &[row(summarizer, "vikingfs")]);
    let embedding = match &embed_model {
        Some(m) => table(&headers, &[row(m, "local")]),
        None => "(none configured: search is lexical)".to_string(),
    };
    let text = format!(
        "Account: {}\nEmbedding dimension: {dim}\n\nVLM Models:\n{vlm}\n\n\nEmbedding Models:\n{embedding}\n",
        who.account
    );
    Component {
        name: "models",
        healthy: true,
        errors: Vec::new(),
        table: text,
        rows: json!({
            "account": who.account,
            "embedding_dimension": dim,
            "vlm": [{"model": summarizer, "provider": "vikingfs"}],
            "embedding": embed_model.map(|m| vec![json!({"model": m, "provider": "local"})])
                .unwrap_or_default(),
        }),
    }
}

/// A component whose status is lines of `Name: value` (OpenViking's lock observer's table)
/// or the same as one JSON object.
fn lines_component(
    name: &'static str,
    healthy: bool,
    errors: Vec<String>,
    rows: &[(&str, Value)],
) -> Component {
    let table = rows
        .iter()
        .map(|(k, v)| {
            let label = k.replace('_', " ");
            let mut label = label.chars();
            let first = label.next().map(|c| c.to_ascii_uppercase()).unwrap_or(' ');
            format!(
                "{first}{}: {}",
                label.as_str(),
                v.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string())
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    Component {
        name,
        healthy,
        errors,
        table,
        rows: Value::Object(
            rows.iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        ),
    }
}

fn lock_component(api: &Api) -> Result<Component, ApiError> {
    let locks = api
        .ops
        .locked()
        .stores()
        .locks()
        .list()
        .map_err(|e| ApiError::internal(Chain(&e).to_string()))?;
    let stale = locks.iter().filter(|l| l.stale).count();
    let m = crate::metrics::get();
    let samples = crate::metrics::Samples::parse(&String::from_utf8_lossy(&m.render()));
    let waits = samples.sum("vikingfs_lock_wait_seconds_count", &[]) as u64;
    let busy = samples.sum("vikingfs_lock_busy_total", &[]) as u64;
    let errors: Vec<String> = (stale > 0)
        .then(|| format!("{stale} stale lock file(s): vikingfs fsck --repair removes them"))
        .into_iter()
        .collect();
    Ok(lines_component(
        "lock",
        stale == 0,
        errors,
        &[
            ("active_locks", json!(locks.len() - stale)),
            ("stale_locks", json!(stale)),
            ("lock_waits", json!(waits)),
            ("conflict_count", json!(busy)),
        ],
    ))
}

fn retrieval_component() -> Component {
    let r = super::search::retrieval_stats();
    let avg = |sum: f64, n: u64| if n == 0 { 0.0 } else { sum / n as f64 };
    lines_component(
        "retrieval",
        true,
        Vec::new(),
        &[
            ("total_queries", json!(r.queries)),
            ("total_results", json!(r.results)),
            (
                "avg_results_per_query",
                json!(avg(r.results as f64, r.queries)),
            ),
            ("zero_result_queries", json!(r.zero_result)),
            (
                "zero_result_rate",
                json!(avg(r.zero_result as f64, r.queries)),
            ),
            ("avg_score", json!(avg(r.score_sum, r.results))),
            (
                "min_score",
                json!(if r.results == 0 { 0.0 } else { r.min_score }),
            ),
            ("max_score", json!(r.max_score)),
            ("rerank_used", json!(0)),
        ],
    )
}

fn filesystem_component() -> Component {
    let m = crate::metrics::get();
    let samples = crate::metrics::Samples::parse(&String::from_utf8_lossy(&m.render()));
    let count = "vikingfs_fuse_request_duration_seconds_count";
    let mut rows = Vec::new();
    let mut json_rows = Vec::new();
    for op in samples.label_values(count, "op") {
        let n = samples.sum(count, &[("op", &op)]) as u64;
        let errs = samples.sum("vikingfs_fuse_errors_total", &[("op", &op)]) as u64;
        rows.push(vec![op.clone(), n.to_string(), errs.to_string()]);
        json_rows.push(json!({"op": op, "requests": n, "errors": errs}));
    }
    let text = if rows.is_empty() {
        "No filesystem operations recorded (no mount served by this daemon).".to_string()
    } else {
        table(&["Operation", "Requests", "Errors"], &rows)
    };
    Component {
        name: "filesystem",
        healthy: true,
        errors: Vec::new(),
        table: text,
        rows: json!({ "mounts": [{ "mount": "/", "operations": json_rows }] }),
    }
}

async fn lock(
    State(api): State<Arc<Api>>,
    _who: Identity,
    Params(p): Params<FormatParams>,
) -> ApiResult {
    let as_json = p.json()?;
    blocking(move || ok(lock_component(&api)?.to_json(as_json))).await
}

async fn retrieval(_who: Identity, Params(p): Params<FormatParams>) -> ApiResult {
    let as_json = p.json()?;
    ok(retrieval_component().to_json(as_json))
}

async fn filesystem(_who: Identity, Params(p): Params<FormatParams>) -> ApiResult {
    let as_json = p.json()?;
    ok(filesystem_component().to_json(as_json))
}

async fn queue(
    State(api): State<Arc<Api>>,
    _who: Identity,
    Params(p): Params<FormatParams>,
) -> ApiResult {
    let as_json = p.json()?;
    blocking(move || ok(queue_component(&api)?.to_json(as_json))).await
}

async fn vikingdb(
    State(api): State<Arc<Api>>,
    who: Identity,
    Params(p): Params<FormatParams>,
) -> ApiResult {
    let as_json = p.json()?;
    blocking(move || ok(vikingdb_component(&api, &who)?.to_json(as_json))).await
}

async fn models(
    State(api): State<Arc<Api>>,
    who: Identity,
    Params(p): Params<FormatParams>,
) -> ApiResult {
    let as_json = p.json()?;
    ok(models_component(&api, &who).to_json(as_json))
}

async fn system(
    State(api): State<Arc<Api>>,
    who: Identity,
    Params(p): Params<FormatParams>,
) -> ApiResult {
    let as_json = p.json()?;
    blocking(move || {
        let parts = [
            queue_component(&api)?,
            vikingdb_component(&api, &who)?,
            models_component(&api, &who),
        ];
        let errors: Vec<String> = parts.iter().flat_map(|c| c.errors.clone()).collect();
        let components: serde_json::Map<String, Value> = parts
            .iter()
            .map(|c| (c.name.to_string(), c.to_json(as_json)))
            .collect();
        ok(json!({
            "is_healthy": parts.iter().all(|c| c.healthy),
            "errors": errors,
            "components": components,
        }))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::table;

    #[test]
    fn tables_look_like_openvikings() {
        let t = table(
            &["Queue", "Pending"],
            &[vec!["Embedding".into(), "0".into()]],
        );
        assert_eq!(
            t,
            "+-----------+---------+\n\
             |   Queue   | Pending |\n\
             +-----------+---------+\n\
             | Embedding |    0    |\n\
             +-----------+---------+"
        );
    }
}
