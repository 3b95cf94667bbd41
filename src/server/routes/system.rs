//! Health and status: `GET /health`, `GET /ready`, `GET /api/v1/debug/health`,
//! `GET /api/v1/system/status`, `POST /api/v1/system/wait`.

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
