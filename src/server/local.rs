//! The `vikingfs` command's own routes, `/vikingfs/v1/...`, served only on the workspace's
//! owner-only Unix socket (a request from anywhere else is 404, as if they did not exist):
//! what a command asks a live daemon so that the stores are opened once, the model loaded
//! once, and the configuration in force is the daemon's (`cli/client.rs` asks, `cli/remote.rs`
//! prints).
//!
//! Each is the same `ops` (or `session`) call the command makes without a daemon, answering
//! what the command prints from: `find`'s hits in its JSON shape, `status`'s report
//! ([`crate::ops::status`]), `fsck`'s report, the session reports ([`crate::session::report`]).
//! A failure is the envelope with the operation's own message (the command prints it as it
//! would its own error) and OpenViking's code (`CONFLICT` for a busy lock: exit 75).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::auth::Identity;
use super::extract::{Body, Params};
use super::reply::{ok, ApiError, ApiResult, Code};
use super::routes::{get, post, Routes};
use super::{blocking, Api, Local};
use crate::error::Chain;
use crate::index::{Evidence, Mode};
use crate::ops::search::Query;
use crate::ops::{AddOptions, OpsError};
use crate::session::{SessionError, SessionPath};
use crate::uri::VPath;

/// Where the routes are.
pub const PREFIX: &str = "/vikingfs/v1";

pub fn routes() -> Routes {
    Routes::new()
        .route("/vikingfs/v1/hello", get(hello))
        .route("/vikingfs/v1/find", post(find))
        .route("/vikingfs/v1/status", get(status))
        .route("/vikingfs/v1/wait", post(wait))
        .route("/vikingfs/v1/rm", post(rm))
        .route("/vikingfs/v1/mv", post(mv))
        .route("/vikingfs/v1/history", post(history))
        .route("/vikingfs/v1/undo", post(undo))
        // A file's whole content: as large as the command's own write takes.
        .route(
            "/vikingfs/v1/write",
            post(write).map(|m| m.layer(DefaultBodyLimit::disable())),
        )
        .route("/vikingfs/v1/add", post(add))
        .route("/vikingfs/v1/reindex", post(reindex))
        .route("/vikingfs/v1/fsck", post(fsck))
        .route("/vikingfs/v1/session/add", post(session_add))
        .route("/vikingfs/v1/session/list", post(session_list))
        .route("/vikingfs/v1/session/show", post(session_show))
        .route("/vikingfs/v1/session/commit", post(session_commit))
        .route("/vikingfs/v1/session/archive", post(session_archive))
        .route("/vikingfs/v1/session/rollback", post(session_rollback))
        .map(|r| r.route_layer(middleware::from_fn(local_only)))
}

/// Off the socket these routes do not exist.
async fn local_only(req: Request, next: Next) -> Response {
    if req.extensions().get::<Local>().is_none() {
        return ApiError::framework(
            axum::http::StatusCode::NOT_FOUND,
            format!("Not Found: {}", req.uri().path()),
        )
        .into_response();
    }
    next.run(req).await
}

/// An operation's failure: OpenViking's code for it, with the operation's own message.
fn op_err(uri: &str, e: OpsError) -> ApiError {
    let message = Chain(&e).to_string();
    ApiError {
        message,
        ..ApiError::from_ops(uri, e)
    }
}

/// A session operation's failure, the same way.
fn session_err(e: SessionError) -> ApiError {
    let message = Chain(&e).to_string();
    let code = match &e {
        _ if e.is_busy() => Code::Conflict,
        SessionError::NotASession(_) | SessionError::BadMessage(_) | SessionError::Uri(_) => {
            Code::InvalidArgument
        }
        SessionError::NoSuchSession(_) => Code::NotFound,
        SessionError::Rollback(_) => Code::FailedPrecondition,
        _ => Code::Internal,
    };
    ApiError::new(code, message)
}

/// `uri` through the caller's access check, a malformed one named as the command names it.
fn path(who: &Identity, uri: &str) -> Result<VPath, ApiError> {
    who.path(uri)
        .map_err(|e| match VPath::parse_uri(uri, &who.user) {
            Err(u) => ApiError {
                message: u.to_string(),
                ..e
            },
            Ok(_) => e,
        })
}

/// Who answers: the daemon's version, pid, and the model its configuration names (the
/// command compares it with its own).
async fn hello(State(api): State<Arc<Api>>, _who: Identity) -> ApiResult {
    let model = api
        .ops
        .embedder()
        .map_or_else(|| "none (lexical only)".to_string(), |e| e.describe());
    ok(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "pid": std::process::id(),
        "workspace": api.ops.workspace().root(),
        "model": model,
    }))
}

#[derive(Deserialize)]
struct FindBody {
    queries: Vec<String>,
    mode: String,
    limit: usize,
    under: Option<String>,
}

/// One hit as `vikingfs find --json` prints it.
#[derive(Serialize, Deserialize)]
pub struct HitRow {
    pub uri: String,
    pub score: f32,
    pub level: u8,
    pub snippet: String,
    pub evidence: Evidence,
}

/// Every query in order, each with its hits (`{"results": [[hit, ...], ...]}`).
async fn find(State(api): State<Arc<Api>>, who: Identity, Body(b): Body<FindBody>) -> ApiResult {
    let mode = Mode::parse(&b.mode)
        .ok_or_else(|| ApiError::invalid(format!("unknown mode {:?}", b.mode)))?;
    let under = match &b.under {
        Some(u) => Some(path(&who, u)?),
        None => None,
    };
    if mode == Mode::Semantic && !api.ops.index().has_dense() {
        return Err(ApiError::new(
            Code::FailedPrecondition,
            "--mode semantic needs a model: set embedding.dense.provider \"local\" and \
             embedding.dense.model to a model directory (scripts/fetch-model.sh) in the \
             daemon's configuration, and let it embed the records",
        ));
    }
    blocking(move || {
        let mut results = Vec::with_capacity(b.queries.len());
        let mut orphans = 0;
        for text in &b.queries {
            let started = Instant::now();
            let found = api
                .ops
                .search(&Query {
                    text,
                    mode,
                    limit: b.limit,
                    under: under.as_ref(),
                })
                .map_err(|e| op_err(text, e))?;
            tracing::debug!(query = %text, ms = started.elapsed().as_secs_f64() * 1e3, "find");
            orphans += found.orphans_removed;
            let rows: Vec<HitRow> = found
                .hits
                .into_iter()
                .map(|h| HitRow {
                    uri: h.uri.uri(),
                    score: h.score,
                    level: h.level as u8,
                    snippet: h.snippet,
                    evidence: h.evidence,
                })
                .collect();
            results.push(rows);
        }
        if orphans > 0 {
            tracing::info!(removed = orphans, "deleted index records of missing files");
        }
        ok(json!({ "results": results }))
    })
    .await
}

/// `vikingfs status --json`'s object, read through the daemon's stores.
async fn status(State(api): State<Arc<Api>>, _who: Identity) -> ApiResult {
    blocking(move || {
        let embedder = api.ops.embedder();
        let model = embedder
            .as_ref()
            .map_or_else(|| "none (lexical only)".to_string(), |e| e.describe());
        let from = crate::ops::status::Source::Open {
            stores: api.ops.stores(),
            model,
            precision: embedder.and_then(|e| e.precision()),
        };
        crate::ops::status::report(api.ops.workspace(), &from)
            .map(super::reply::Ok)
            .map_err(|e| op_err("", e))
    })
    .await
}

#[derive(Deserialize, Default)]
struct WaitBody {
    timeout: Option<f64>,
}

/// Wait (at most `timeout`, and at most half the request timeout: the command asks again)
/// for the daemon's pool to drain the queues: `{drained, rebuilding, outstanding, dead}`.
async fn wait(State(api): State<Arc<Api>>, _who: Identity, Body(b): Body<WaitBody>) -> ApiResult {
    let cap = api.config.request_timeout / 2;
    let chunk = b
        .timeout
        .filter(|t| t.is_finite() && *t >= 0.0)
        .map_or(cap, |t| Duration::from_secs_f64(t).min(cap));
    blocking(move || {
        let drained = super::routes::system::drained(&api, Some(Instant::now() + chunk))?;
        let queue = api.ops.queue();
        let internal = |e: crate::queue::QueueError| ApiError::internal(Chain(&e).to_string());
        let outstanding = queue.outstanding(None).map_err(internal)?;
        let dead: u64 = queue
            .stats()
            .map_err(internal)?
            .iter()
            .map(|s| s.dead)
            .sum();
        ok(json!({
            "drained": drained,
            "rebuilding": api.ops.rebuilding(),
            "outstanding": outstanding,
            "dead": dead,
        }))
    })
    .await
}

#[derive(Deserialize)]
struct RmBody {
    uri: String,
    #[serde(default)]
    recursive: bool,
}

async fn rm(State(api): State<Arc<Api>>, who: Identity, Body(b): Body<RmBody>) -> ApiResult {
    let p = path(&who, &b.uri)?;
    blocking(move || {
        api.ops.rm(&p, b.recursive).map_err(|e| op_err(&b.uri, e))?;
        ok(json!({}))
    })
    .await
}

#[derive(Deserialize)]
struct HistoryBody {
    uri: Option<String>,
    #[serde(default)]
    since_ms: i64,
    /// Ignored paths' entries too (`history --all`).
    #[serde(default)]
    all: bool,
}

/// `vikingfs history`: the entries, newest first by when they happened, ignored paths' left
/// out unless `all` (`Stores::history_view`).
async fn history(
    State(api): State<Arc<Api>>,
    who: Identity,
    Body(b): Body<HistoryBody>,
) -> ApiResult {
    let under = b.uri.as_deref().map(|u| path(&who, u)).transpose()?;
    blocking(move || {
        let rows = api
            .ops
            .history_view(under.as_ref(), b.since_ms, b.all)
            .map_err(|e| ApiError::internal(Chain(&e).to_string()))?;
        ok(json!(rows))
    })
    .await
}

#[derive(Deserialize)]
struct UndoBody {
    uri: String,
    at_ms: Option<i64>,
    since_ms: Option<i64>,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    force: bool,
}

/// `vikingfs undo`: the same locked operation the command runs without a daemon.
async fn undo(State(api): State<Arc<Api>>, who: Identity, Body(b): Body<UndoBody>) -> ApiResult {
    let p = path(&who, &b.uri)?;
    blocking(move || {
        let report = match b.since_ms {
            Some(t) => api.ops.rewind(&p, t, b.dry_run),
            None => api.ops.undo(&p, b.at_ms, b.dry_run, b.force),
        }
        .map_err(|e| op_err(&b.uri, e))?;
        ok(json!(report))
    })
    .await
}

#[derive(Deserialize)]
struct MvBody {
    src: String,
    dst: String,
}

async fn mv(State(api): State<Arc<Api>>, who: Identity, Body(b): Body<MvBody>) -> ApiResult {
    let src = path(&who, &b.src)?;
    let dst = path(&who, &b.dst)?;
    blocking(move || {
        let dst = api
            .ops
            .mv_target(&src, &dst)
            .map_err(|e| op_err(&b.dst, e))?;
        api.ops.mv(&src, &dst).map_err(|e| op_err(&b.src, e))?;
        ok(json!({ "to": dst.uri() }))
    })
    .await
}

#[derive(Deserialize)]
struct UriParam {
    uri: String,
}

/// The body is the file's whole content.
async fn write(
    State(api): State<Arc<Api>>,
    who: Identity,
    Params(q): Params<UriParam>,
    bytes: Bytes,
) -> ApiResult {
    let p = path(&who, &q.uri)?;
    blocking(move || {
        api.ops
            .write_file(&p, &bytes)
            .map_err(|e| op_err(&q.uri, e))?;
        ok(json!({}))
    })
    .await
}

#[derive(Deserialize)]
struct AddBody {
    /// An absolute path on this host (the caller's files are the daemon's: same owner).
    path: std::path::PathBuf,
    to: Option<String>,
}

async fn add(State(api): State<Arc<Api>>, who: Identity, Body(b): Body<AddBody>) -> ApiResult {
    let to = match &b.to {
        Some(u) => Some(path(&who, u)?),
        None => None,
    };
    blocking(move || {
        let rep = api
            .ops
            .add_resource(&b.path, &AddOptions { to, parent: None }, &mut |_, _| {})
            .map_err(|e| op_err(&b.path.display().to_string(), e))?;
        ok(json!({ "target": rep.target.uri(), "jobs": rep.jobs, "warning": rep.warning() }))
    })
    .await
}

#[derive(Deserialize)]
struct ReindexBody {
    under: Option<String>,
}

async fn reindex(
    State(api): State<Arc<Api>>,
    who: Identity,
    Body(b): Body<ReindexBody>,
) -> ApiResult {
    let under = match &b.under {
        Some(u) => path(&who, u)?,
        None => VPath::root(),
    };
    blocking(move || {
        let rep = api
            .ops
            .reindex(&under, &mut |_, _| {})
            .map_err(|e| op_err(&under.uri(), e))?;
        ok(json!({
            "under": under.uri(),
            "files": rep.files,
            "removed": rep.removed,
            "queued": rep.queued,
        }))
    })
    .await
}

/// `fsck` without `--repair`: the daemon's stores checked against the files.
async fn fsck(State(api): State<Arc<Api>>, _who: Identity) -> ApiResult {
    blocking(move || ok(api.ops.fsck(false, false).map_err(|e| op_err("", e))?)).await
}

#[derive(Deserialize)]
struct SessionBody {
    session: String,
    #[serde(default)]
    role: String,
    #[serde(default)]
    text: String,
    #[serde(default)]
    keep: usize,
    /// An archive's number (0 or none: every archive, for a rollback).
    #[serde(default, deserialize_with = "archive_number")]
    archive: u32,
}

/// An archive number, `null` being none (0).
fn archive_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    Ok(Option::<u32>::deserialize(d)?.unwrap_or(0))
}

fn session_of(who: &Identity, arg: &str) -> Result<SessionPath, ApiError> {
    SessionPath::resolve_as(&who.user, arg).map_err(session_err)
}

async fn session_add(
    State(api): State<Arc<Api>>,
    who: Identity,
    Body(b): Body<SessionBody>,
) -> ApiResult {
    let s = session_of(&who, &b.session)?;
    blocking(move || {
        let m = crate::session::messages::new_message(&b.role, &b.text).map_err(session_err)?;
        api.sessions.add_message(&s, &m).map_err(session_err)?;
        ok(json!({}))
    })
    .await
}

async fn session_list(State(api): State<Arc<Api>>, who: Identity) -> ApiResult {
    blocking(move || {
        ok(crate::session::report::list(&api.sessions, &who.user).map_err(session_err)?)
    })
    .await
}

async fn session_show(
    State(api): State<Arc<Api>>,
    who: Identity,
    Body(b): Body<SessionBody>,
) -> ApiResult {
    let s = session_of(&who, &b.session)?;
    blocking(move || ok(crate::session::report::show(&api.sessions, &s).map_err(session_err)?))
        .await
}

/// Phase 1 (phase 2 is the daemon's pool's: the command waits with `wait`).
async fn session_commit(
    State(api): State<Arc<Api>>,
    who: Identity,
    Body(b): Body<SessionBody>,
) -> ApiResult {
    let s = session_of(&who, &b.session)?;
    blocking(move || {
        ok(api
            .sessions
            .commit_keeping(&s, b.keep)
            .map_err(session_err)?)
    })
    .await
}

/// `vikingfs session rollback`: the same call the command makes without a daemon.
async fn session_rollback(
    State(api): State<Arc<Api>>,
    who: Identity,
    Body(b): Body<SessionBody>,
) -> ApiResult {
    let s = session_of(&who, &b.session)?;
    let archive = (b.archive > 0).then_some(b.archive);
    blocking(move || ok(api.sessions.rollback(&s, archive).map_err(session_err)?)).await
}

/// What became of an archive's phase 2.
async fn session_archive(
    State(api): State<Arc<Api>>,
    who: Identity,
    Body(b): Body<SessionBody>,
) -> ApiResult {
    let s = session_of(&who, &b.session)?;
    blocking(move || {
        ok(crate::session::report::archive_outcome(
            &api.sessions,
            &s,
            b.archive,
        ))
    })
    .await
}
