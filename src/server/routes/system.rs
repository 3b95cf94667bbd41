//! Health and status: `GET /health`, `GET /ready`, `GET /api/v1/debug/health`,
//! `GET /api/v1/system/status`, `POST /api/v1/system/wait`, `POST /api/v1/system/consistency`
//! (fsck's checks of the index against the files, for one directory), and `GET /metrics`
//! (the process's Prometheus text, the same the metrics endpoint serves, behind the API's key).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use serde::Deserialize;
use serde_json::json;

use super::{get, post, Routes};
use crate::error::Chain;
use crate::server::auth::Identity;
use crate::server::extract::Body;
use crate::server::reply::{ok, ApiError, ApiResult};
use crate::server::{blocking, Api};

pub fn routes() -> Routes {
    Routes::new()
        .route("/health", get(health))
        .route("/ready", get(health))
        .route("/api/v1/debug/health", get(debug_health))
        .route("/api/v1/system/status", get(status))
        .route("/api/v1/system/wait", post(wait))
        .route("/api/v1/system/consistency", post(consistency))
        .route("/metrics", get(metrics))
}

/// `GET /metrics`: what `vikingfs.metrics`' endpoint serves (the stores' gauges refreshed
/// first), on the API's port. Unlike OpenViking's, it needs the API's key like every route.
async fn metrics(
    State(api): State<Arc<Api>>,
    _who: Identity,
) -> Result<axum::response::Response, ApiError> {
    let text = blocking(move || {
        let m = crate::metrics::get();
        crate::metrics::Gauges::refresh(api.ops.as_ref(), m);
        Ok(m.render())
    })
    .await?;
    Ok(super::raw("text/plain; version=0.0.4; charset=utf-8", text))
}

/// `ConsistencyRequest`.
#[derive(Deserialize)]
struct ConsistencyBody {
    uri: String,
}

/// How many missing records a report names (OpenViking's `PUBLIC_MISSING_RECORD_LIMIT`).
const MISSING_RECORD_LIMIT: usize = 20;

/// `POST /api/v1/system/consistency`: OpenViking's index consistency report for a directory
/// (`storage/index_consistency.py`), answered by fsck's checks (`vikingfs fsck`, no repair):
/// a text file without its content record is missing at level 2, a directory without its
/// summary's records at levels 0 and 1 (a record of an older version is present, as
/// OpenViking counts it: the queue brings it up to date). `expected_count` is the records
/// there plus those missing.
async fn consistency(
    State(api): State<Arc<Api>>,
    who: Identity,
    Body(b): Body<ConsistencyBody>,
) -> ApiResult {
    let p = who.path(&b.uri)?;
    blocking(move || {
        let view = super::fs::View::open(&api, &who)?;
        let st = view.stat(&p)?.ok_or_else(|| super::fs::not_found(&p))?;
        if !st.is_dir() {
            return Err(ApiError::invalid(
                "Consistency check only supports directory URIs.",
            ));
        }
        let rep = api
            .ops
            .fsck(false, false)
            .map_err(|e| ApiError::from_ops(&p.uri(), e))?;
        let mut missing: Vec<(crate::uri::VPath, u8)> = Vec::new();
        for problem in &rep.problems {
            let (uri, levels): (&str, &[u8]) = match problem {
                crate::ops::fsck::Problem::Unindexed { uri, stale: false } => (uri, &[2]),
                crate::ops::fsck::Problem::MissingSummary { uri, stale: false } => (uri, &[0, 1]),
                _ => continue,
            };
            let Ok(q) = crate::uri::VPath::parse_uri(uri, &who.user) else {
                continue;
            };
            if q.starts_with(&p) && who.may_see(&q) {
                missing.extend(levels.iter().map(|l| (q.clone(), *l)));
            }
        }
        let present = super::fs::count_under(&api, &p).unwrap_or(0);
        let rel = |q: &crate::uri::VPath| {
            q.as_str()
                .strip_prefix(p.as_str())
                .unwrap_or("")
                .trim_start_matches('/')
                .to_string()
        };
        let shown: Vec<serde_json::Value> = missing
            .iter()
            .take(MISSING_RECORD_LIMIT)
            .map(|(q, level)| {
                let path = rel(q);
                let key = format!(
                    "{}#level={level}",
                    if path.is_empty() { "." } else { &path }
                );
                json!({ "uri": q.uri(), "path": path, "level": level, "key": key })
            })
            .collect();
        ok(json!({
            "ok": missing.is_empty(),
            "expected_count": present + missing.len(),
            "missing_record_count": missing.len(),
            "missing_records": shown,
            "missing_records_truncated": missing.len() > MISSING_RECORD_LIMIT,
        }))
    })
    .await
}

/// Unauthenticated, like OpenViking's: a load balancer's probe. As OpenViking's, a request
/// that carries a key has it checked (a wrong one is 401) and is told who it is.
async fn health(
    State(api): State<Arc<Api>>,
    parts: axum::http::request::Parts,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let mut v = json!({
        "status": "ok",
        "healthy": true,
        "version": env!("CARGO_PKG_VERSION"),
        "server": "vikingfs",
        "auth_mode": if api.auth.is_open() { "dev" } else { "api_key" },
    });
    let h = &parts.headers;
    if h.contains_key("x-api-key") || h.contains_key(axum::http::header::AUTHORIZATION) {
        let who = Identity::of(&api, &parts)?;
        v["account_id"] = who.account.into();
        v["user_id"] = who.user.into();
        v["role"] = who.role.name().into();
    }
    Ok(axum::Json(v))
}

async fn debug_health(_who: Identity) -> ApiResult {
    ok(json!({ "healthy": true }))
}

async fn status(State(api): State<Arc<Api>>, who: Identity) -> ApiResult {
    ok(json!({
        "initialized": true,
        "user": who.user,
        "account": who.account,
        "role": who.role.name(),
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_seconds": api.started.elapsed().as_secs_f64(),
    }))
}

#[derive(Deserialize, Default)]
struct WaitBody {
    timeout: Option<f64>,
}

/// Wait until the job queues are drained (every summary, vector and memory derived).
async fn wait(State(api): State<Arc<Api>>, _who: Identity, Body(b): Body<WaitBody>) -> ApiResult {
    let timeout = b.timeout.filter(|t| t.is_finite() && *t > 0.0);
    blocking(move || {
        let deadline = timeout.map(|t| Instant::now() + Duration::from_secs_f64(t));
        let drained = drained(&api, deadline)?;
        let queues = api
            .ops
            .queue()
            .stats()
            .map_err(|e| ApiError::internal(Chain(&e).to_string()))?;
        ok(json!({
            "drained": drained,
            "queues": queues.iter().map(|q| (q.queue.clone(), json!({
                "pending": q.pending, "running": q.running, "dead": q.dead,
            }))).collect::<serde_json::Map<_, _>>(),
        }))
    })
    .await
}

/// Wait until the index is rebuilt (if it is being), no job is outstanding and no task runs;
/// false when `deadline` came first. The daemon's own worker pool does the work.
pub fn drained(api: &Api, deadline: Option<Instant>) -> Result<bool, ApiError> {
    let far = Instant::now() + Duration::from_secs(100 * 365 * 86400);
    if !api
        .ops
        .wait_rebuilt(deadline.unwrap_or(far), &mut |_, _| {})
    {
        return Ok(false);
    }
    loop {
        let left = api
            .ops
            .queue()
            .outstanding(None)
            .map_err(|e| ApiError::internal(Chain(&e).to_string()))?;
        if left == 0 && api.tasks.active() == 0 && !api.ops.settling() {
            return Ok(true);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
