//! Background tasks: `GET /api/v1/tasks/{id}`, `GET /api/v1/tasks`, `POST
//! /api/v1/tasks/{id}/cancel` (OpenViking 0.5.2's `routers/tasks.py`) over the daemon's task
//! tracker ([`crate::server::tasks`]): each record as `TaskRecord.to_dict()`, a caller seeing
//! only its own tasks unless it is root.
//!
//! vikingfs's tasks watch durable work (a commit's phase 2 in the queue); stopping the watch
//! would not stop the work, so cancelling is refused (`FAILED_PRECONDITION`) rather than
//! pretended.

use std::sync::Arc;

use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::json;

use super::{get, post, Routes};
use crate::server::auth::{Identity, Role};
use crate::server::extract::Params;
use crate::server::reply::{ok, ApiError, ApiResult, Code};
use crate::server::Api;

pub fn routes() -> Routes {
    Routes::new()
        .route("/api/v1/tasks", get(list))
        .route("/api/v1/tasks/{id}", get(show))
        .route("/api/v1/tasks/{id}/cancel", post(cancel))
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(Code::NotFound, "Task not found or expired")
        .with_details(json!({ "resource": id, "type": "task" }))
}

#[derive(Deserialize, Default)]
struct ShowParams {
    #[serde(default)]
    include_events: bool,
}

async fn show(
    State(api): State<Arc<Api>>,
    who: Identity,
    Path(id): Path<String>,
    Params(p): Params<ShowParams>,
) -> ApiResult {
    let t = api.tasks.get(&id, &who).ok_or_else(|| not_found(&id))?;
    let mut v = t.to_json();
    if p.include_events {
        v["execution_events"] = json!([]);
    }
    ok(v)
}

async fn cancel(State(api): State<Arc<Api>>, who: Identity, Path(id): Path<String>) -> ApiResult {
    if who.role == Role::Root {
        return Err(ApiError::denied("ROOT may not cancel tasks"));
    }
    let t = api.tasks.get(&id, &who).ok_or_else(|| not_found(&id))?;
    if t.is_terminal() {
        return Err(ApiError::new(
            Code::FailedPrecondition,
            format!("task {id} has already ended ({})", t.status),
        ));
    }
    Err(ApiError::new(
        Code::FailedPrecondition,
        format!(
            "task {id} cannot be cancelled: it watches work the queue runs durably ({})",
            t.kind
        ),
    ))
}

#[derive(Deserialize, Default)]
struct ListParams {
    #[serde(default)]
    task_type: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    resource_id: Option<String>,
    #[serde(default)]
    #[allow(dead_code)] // No internal child tasks exist here.
    include_internal: bool,
    #[serde(default)]
    limit: Option<i64>,
    #[serde(default)]
    pagination: Option<String>,
    #[serde(default)]
    cursor: Option<String>,
    #[serde(default)]
    q: Option<String>,
}

async fn list(
    State(api): State<Arc<Api>>,
    who: Identity,
    Params(p): Params<ListParams>,
) -> ApiResult {
    let limit = p.limit.unwrap_or(50);
    if !(1..=200).contains(&limit) {
        return Err(
            ApiError::invalid("limit must be between 1 and 200").with_details(json!({
                "validation_errors": [{"type": "value_error", "loc": ["query", "limit"],
                                       "msg": "limit must be between 1 and 200"}]
            })),
        );
    }
    let limit = limit as usize;
    let all = api.tasks.list(
        &who,
        p.task_type.as_deref(),
        p.status.as_deref(),
        p.resource_id.as_deref(),
        usize::MAX,
    );
    let matching = |t: &crate::server::tasks::Task| {
        p.q.as_deref().is_none_or(|q| {
            t.id.contains(q)
                || t.kind.contains(q)
                || t.resource_id.as_deref().is_some_and(|r| r.contains(q))
        })
    };
    match p.pagination.as_deref() {
        None => ok(all
            .iter()
            .filter(|t| matching(t))
            .take(limit)
            .map(|t| t.to_json())
            .collect::<Vec<_>>()),
        Some("cursor") => {
            // The cursor is the last task id of the previous page (newest first).
            let start = match &p.cursor {
                Some(c) => all
                    .iter()
                    .position(|t| &t.id == c)
                    .map_or(all.len(), |i| i + 1),
                None => 0,
            };
            let rest: Vec<_> = all[start.min(all.len())..]
                .iter()
                .filter(|t| matching(t))
                .collect();
            let more = rest.len() > limit;
            let items: Vec<_> = rest.iter().take(limit).map(|t| t.to_json()).collect();
            let next = more.then(|| rest[limit - 1].id.clone());
            ok(json!({ "items": items, "has_more": more, "next_cursor": next }))
        }
        Some(other) => Err(ApiError::invalid(format!(
            "pagination must be 'cursor', got {other:?}"
        ))),
    }
}
