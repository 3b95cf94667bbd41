//! Sessions: OpenViking 0.5.2's `routers/sessions.py` over [`crate::session`] — create,
//! list, get, delete, `messages`, `messages/batch`, `commit` (a task), `context`,
//! `archives/{id}`.
//!
//! - A session is always the caller's: `{sid}` resolves under `user/{who.user}/sessions/`
//!   ([`SessionPath::of_user`], one path component), so no key reaches another user's
//!   sessions, whatever the id. The archive files this module reads itself (`.done`,
//!   summaries, archived messages) are opened below the data root with no symlink on the
//!   way ([`read_below`]); everything else (the live log, the metadata, the archive list, the
//!   files a commit writes) goes through `crate::session`'s no-follow primitives
//!   (`session::fsx`). A link where a session file or directory should be (made through the
//!   mount: `history -> /etc`, `messages.jsonl` into another user's tree) is `400
//!   INVALID_ARGUMENT` naming it, never followed.
//! - Appends, commits and their locks are [`Sessions`](crate::session::Sessions)' (the same code the CLI and the mount
//!   run); deleting a session is `ops`' recursive `rm` of its directory.
//! - `commit` runs phase 1 in the request and answers with a `session_commit` task that
//!   completes when phase 2 of that archive is done (its `.done`), fails with the error
//!   phase 2 recorded (`.failed.json`) or when the archive or its job is gone; the daemon's
//!   worker pool runs phase 2, so the task only watches.
//! - A busy session lock (30 s, OpenViking's wait) is `409 CONFLICT` with `path_busy`.
//! - Not kept, and so answered with OpenViking's defaults: auto-commit policies, memory
//!   policies, event tags (`memory_extraction_config`), token usage; changing them
//!   (`PATCH .../config`) and the externalized tool results (`.../tool-results`) answer
//!   `501 UNIMPLEMENTED`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::search::estimate_tokens;
use super::{get, patch, post, Routes};
use crate::error::Chain;
use crate::semantic::memory::Message;
use crate::server::auth::Identity;
use crate::server::extract::{Body, Params};
use crate::server::reply::{ok, ApiError, ApiResult, Code};
use crate::server::{blocking, Api};
use crate::session::fsx;
use crate::session::layout::{self, SessionPath, ABSTRACT, DONE, FAILED, MESSAGES, OVERVIEW};
use crate::session::meta::Meta;
use crate::session::SessionError;
use crate::uri::VPath;

pub fn routes() -> Routes {
    Routes::new()
        .route("/api/v1/sessions", post(create).get(list))
        .route("/api/v1/sessions/{sid}", get(show).delete(delete))
        .route("/api/v1/sessions/{sid}/messages", post(add_message))
        .route("/api/v1/sessions/{sid}/messages/batch", post(add_batch))
        .route("/api/v1/sessions/{sid}/commit", post(commit))
        .route("/api/v1/sessions/{sid}/context", get(context))
        .route("/api/v1/sessions/{sid}/archives/{archive}", get(archive))
        .route("/api/v1/sessions/{sid}/config", patch(not_kept))
        .route("/api/v1/sessions/{sid}/tool-results", get(not_kept))
        .route("/api/v1/sessions/{sid}/tool-results/{rid}", get(not_kept))
        .route(
            "/api/v1/sessions/{sid}/tool-results/{rid}/search",
            get(not_kept),
        )
}

/// What vikingfs does not keep (auto-commit policies, event tags, externalized tool
/// results) is refused plainly rather than accepted and forgotten.
async fn not_kept(_who: Identity, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        Code::Unimplemented,
        format!(
            "{}: vikingfs keeps no session auto-commit policies, event tags or externalized \
             tool results",
            uri.path()
        ),
    )
}

/// OpenViking's limit on one batch.
const MAX_BATCH: usize = 100;

/// A session failure as OpenViking's codes say it.
fn session_error(sid: &str, uri: &str, e: SessionError) -> ApiError {
    let message = Chain(&e).to_string();
    match &e {
        SessionError::NoSuchSession(_) => not_found(sid),
        SessionError::Lock(crate::lock::LockError::Busy { .. }) => ApiError::busy(uri, message),
        SessionError::BadMessage(_) | SessionError::NotASession(_) => ApiError::invalid(message),
        SessionError::Uri(_) => ApiError::invalid_uri(uri, &e),
        SessionError::Link(link) => {
            ApiError::invalid(message).with_details(json!({ "resource": link }))
        }
        SessionError::Diverged { .. } => ApiError::new(Code::FailedPrecondition, message)
            .with_details(json!({ "resource": uri })),
        _ => match io_errno(&e) {
            libc::ENOSPC | libc::EDQUOT => ApiError::new(Code::ResourceExhausted, message),
            libc::EACCES | libc::EPERM | libc::EROFS => ApiError::denied(message),
            _ => {
                tracing::error!(session = uri, "{message}");
                ApiError::internal(message)
            }
        },
    }
}

/// The system error under a session failure, if one is.
fn io_errno(e: &SessionError) -> i32 {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return io.raw_os_error().unwrap_or(0);
        }
        cur = err.source();
    }
    0
}

fn not_found(sid: &str) -> ApiError {
    ApiError::new(Code::NotFound, format!("Session {sid} not found"))
        .with_details(json!({ "resource": sid, "type": "session" }))
}

/// The caller's session `sid`.
fn session_of(who: &Identity, sid: &str) -> Result<SessionPath, ApiError> {
    SessionPath::of_user(&who.user, sid)
        .map_err(|e| ApiError::invalid(format!("invalid session id {sid:?}: {}", Chain(&e))))
}

/// Whether the caller's session `s` exists (a link at its place is an error, not a session).
fn exists(api: &Api, s: &SessionPath, sid: &str) -> Result<bool, ApiError> {
    fsx::is_dir(&api.sessions.ws, &s.dir).map_err(|e| session_error(sid, &s.dir.uri(), e))
}

fn user_json(who: &Identity) -> Value {
    json!({ "account_id": who.account, "user_id": who.user })
}

fn extraction_config() -> Value {
    json!({ "events": { "tags": [] } })
}

/// `YYYYmmdd-HHMMSS-<16 hex>`, as OpenViking names a session it creates.
fn new_session_id() -> String {
    let now = jiff::Timestamp::now().strftime("%Y%m%d-%H%M%S");
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{now}-{}", &id[..16])
}

#[derive(Deserialize, Default)]
struct CreateBody {
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    #[allow(dead_code)] // Accepted: memory policies are not kept (see the module's doc).
    memory_policy: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    auto_commit_policy: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    memory_extraction_config: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    telemetry: Option<Value>,
}

async fn create(
    State(api): State<Arc<Api>>,
    who: Identity,
    Body(b): Body<CreateBody>,
) -> ApiResult {
    let sid = b
        .session_id
        .filter(|s| !s.is_empty())
        .unwrap_or_else(new_session_id);
    let s = session_of(&who, &sid)?;
    blocking(move || {
        let uri = s.dir.uri();
        let created = api
            .sessions
            .create(&s)
            .map_err(|e| session_error(&sid, &uri, e))?;
        if !created {
            return Err(ApiError::new(
                Code::AlreadyExists,
                format!("Session '{sid}' already exists"),
            )
            .with_details(json!({ "resource": sid, "type": "session" })));
        }
        ok(json!({
            "session_id": sid,
            "uri": uri,
            "user": user_json(&who),
            "auto_commit_policy": Value::Null,
            "memory_extraction_config": extraction_config(),
        }))
    })
    .await
}

async fn list(State(api): State<Arc<Api>>, who: Identity) -> ApiResult {
    blocking(move || {
        let ws = &api.sessions.ws;
        let all = layout::list_sessions(ws, &who.user)
            .map_err(|e| session_error("", "viking://user", e))?;
        let rows: Vec<Value> = all
            .iter()
            .map(|s| {
                let mtime = fsx::metadata(ws, &s.dir)
                    .ok()
                    .flatten()
                    .and_then(|m| m.modified().ok())
                    .and_then(|t| jiff::Timestamp::try_from(t).ok())
                    .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
                json!({
                    "session_id": s.sid,
                    "uri": s.dir.uri(),
                    "is_dir": true,
                    "mod_time": mtime,
                })
            })
            .collect();
        ok(rows)
    })
    .await
}

#[derive(Deserialize, Default)]
struct ShowParams {
    #[serde(default)]
    auto_create: bool,
}

/// A message's text parts' tokens (what OpenViking counts as pending).
fn message_tokens(m: &Message) -> i64 {
    estimate_tokens(&m.content)
}

/// The live messages of `s` and their tokens.
fn live(api: &Api, s: &SessionPath, sid: &str) -> Result<(Vec<Message>, i64), ApiError> {
    let parsed = api
        .sessions
        .live_messages(s)
        .map_err(|e| session_error(sid, &s.dir.uri(), e))?;
    let tokens = parsed.messages.iter().map(message_tokens).sum();
    Ok((parsed.messages, tokens))
}

fn created_at(m: &Message) -> Value {
    m.extra
        .get("created_at")
        .cloned()
        .or_else(|| m.time.clone().map(Value::String))
        .unwrap_or(Value::Null)
}

/// A message as OpenViking's `Message.to_dict()`: `id`, `role`, `parts`, `created_at`, and
/// what else it was given (peer, turn, kind).
fn message_json(m: &Message) -> Value {
    let parts = match m.extra.get("parts") {
        Some(Value::Array(p)) if !p.is_empty() => Value::Array(p.clone()),
        _ => json!([{ "type": "text", "text": m.content }]),
    };
    let mut v = json!({
        "id": m.id,
        "role": m.role,
        "parts": parts,
        "created_at": created_at(m),
    });
    for k in ["peer_id", "turn_id", "message_kind", "source_message_ids"] {
        if let Some(x) = m.extra.get(k) {
            v[k] = x.clone();
        }
    }
    v
}

async fn show(
    State(api): State<Arc<Api>>,
    who: Identity,
    Path(sid): Path<String>,
    Params(p): Params<ShowParams>,
) -> ApiResult {
    let s = session_of(&who, &sid)?;
    blocking(move || {
        let uri = s.dir.uri();
        if !exists(&api, &s, &sid)? {
            if !p.auto_create {
                return Err(not_found(&sid));
            }
            api.sessions
                .create(&s)
                .map_err(|e| session_error(&sid, &uri, e))?;
        }
        let ws = &api.sessions.ws;
        let meta = Meta::load(ws, &s).map_err(|e| session_error(&sid, &uri, e))?;
        let (messages, pending) = live(&api, &s, &sid)?;
        let mut extracted: Map<String, Value> = meta
            .memories_extracted
            .as_ref()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
            .unwrap_or_default();
        extracted.entry("total").or_insert(json!(0));
        let last_message_at = messages
            .last()
            .map(created_at)
            .filter(|v| !v.is_null())
            .unwrap_or_else(|| meta.extra.get("last_message_at").cloned().unwrap_or(json!("")));
        let mut out: Map<String, Value> = Map::new();
        // Fields OpenViking kept in the metadata come back as they are.
        for (k, v) in &meta.extra {
            out.insert(k.clone(), v.clone());
        }
        let fields = json!({
            "session_id": sid,
            "created_at": meta.created_at.clone().unwrap_or_default(),
            "updated_at": meta.updated_at.clone().unwrap_or_default(),
            "created_by_account_id": who.account,
            "created_by_user_id": meta.created_by_user_id.clone().unwrap_or_else(|| who.user.clone()),
            "message_count": messages.len(),
            "commit_count": meta.commit_count,
            "memories_extracted": extracted,
            "last_commit_at": meta.last_commit_at.clone().unwrap_or_default(),
            "llm_token_usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0,
                                "cached_tokens": 0, "reasoning_tokens": 0},
            "embedding_token_usage": {"total_tokens": 0},
            "pending_tokens": pending,
            "keep_recent_count": meta.keep_recent_count.unwrap_or(0),
            "retention_mode": "",
            "keep_recent_turn_count": 0,
            "retained_message_token_budget": 0,
            "min_raw_tail_steps": 1,
            "memory_policy": Value::Null,
            "auto_commit_policy": Value::Null,
            "last_message_at": last_message_at,
            "last_auto_commit_at": "",
            "last_idle_commit_accepted_at": "",
            "total_message_count": meta.total_message_count.unwrap_or(meta.message_count),
            "uri": uri,
            "user": user_json(&who),
            "memory_extraction_config": extraction_config(),
        });
        if let Value::Object(f) = fields {
            out.extend(f);
        }
        for internal in ["pending_commit", "last_archive", "event_search_tags"] {
            out.remove(internal);
        }
        ok(Value::Object(out))
    })
    .await
}

async fn delete(State(api): State<Arc<Api>>, who: Identity, Path(sid): Path<String>) -> ApiResult {
    let s = session_of(&who, &sid)?;
    blocking(move || {
        if !exists(&api, &s, &sid)? {
            return Err(not_found(&sid));
        }
        api.ops
            .rm(&s.dir, true)
            .map_err(|e| ApiError::from_ops(&s.dir.uri(), e))?;
        ok(json!({ "session_id": sid }))
    })
    .await
}

/// `AddMessageRequest`.
#[derive(Deserialize, Debug, Clone)]
struct MessageBody {
    role: String,
    #[serde(default)]
    peer_id: Option<String>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    parts: Option<Vec<Value>>,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    turn_id: Option<String>,
    #[serde(default)]
    message_kind: Option<String>,
    #[serde(default)]
    source_message_ids: Option<Vec<String>>,
    #[serde(default)]
    #[allow(dead_code)]
    telemetry: Option<Value>,
}

/// The URIs a part names, checked for the caller (OpenViking validates the same fields).
const PART_URI_FIELDS: [&str; 4] = ["uri", "tool_uri", "skill_uri", "tool_output_storage_uri"];

impl MessageBody {
    /// The message line to append: a fresh id, `parts` (or one text part of `content`) and
    /// its text as `content`, so every reader of `messages.jsonl` sees the words.
    fn to_message(&self, who: &Identity) -> Result<Message, ApiError> {
        if self.role.trim().is_empty() {
            return Err(ApiError::invalid("role must not be empty"));
        }
        if let Some(k) = &self.message_kind {
            if ![
                "user_query",
                "assistant_step",
                "tool_transport",
                "checkpoint",
            ]
            .contains(&k.as_str())
            {
                return Err(ApiError::invalid(format!("invalid message_kind {k:?}")));
            }
        }
        let parts: Vec<Value> = match (&self.parts, &self.content) {
            (Some(p), _) => p.clone(),
            (None, Some(c)) => vec![json!({ "type": "text", "text": c })],
            (None, None) => {
                return Err(ApiError::invalid(
                    "Either 'content' or 'parts' must be provided",
                ))
            }
        };
        let mut texts = Vec::new();
        for part in &parts {
            let Value::Object(o) = part else {
                return Err(ApiError::invalid("each part must be an object"));
            };
            let kind = o.get("type").and_then(Value::as_str).unwrap_or("text");
            match kind {
                "text" => match o.get("text") {
                    Some(Value::String(t)) => texts.push(t.clone()),
                    _ => return Err(ApiError::invalid("a text part needs \"text\"")),
                },
                "context" | "tool" | "image_url" => {}
                other => return Err(ApiError::invalid(format!("unknown part type {other:?}"))),
            }
            for f in PART_URI_FIELDS {
                if let Some(u) = o.get(f).and_then(Value::as_str).filter(|u| !u.is_empty()) {
                    if u.starts_with("viking://") {
                        who.path(u)?;
                    }
                }
            }
        }
        let content = texts.join("\n");
        let mut m = crate::session::messages::new_message(&self.role, &content)
            .map_err(|e| ApiError::invalid(Chain(&e).to_string()))?;
        m.extra.insert("parts".into(), Value::Array(parts));
        let created = self.created_at.clone().unwrap_or_else(|| {
            jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%S%.6f+00:00")
                .to_string()
        });
        m.extra.insert("created_at".into(), Value::String(created));
        if let Some(p) = &self.peer_id {
            m.extra.insert("peer_id".into(), Value::String(p.clone()));
        }
        if let Some(t) = &self.turn_id {
            m.extra.insert("turn_id".into(), Value::String(t.clone()));
        }
        if let Some(k) = &self.message_kind {
            m.extra
                .insert("message_kind".into(), Value::String(k.clone()));
        }
        if let Some(ids) = &self.source_message_ids {
            m.extra.insert("source_message_ids".into(), json!(ids));
        }
        Ok(m)
    }
}

/// Append `messages` to the caller's session `sid` (created by its first message, as in
/// OpenViking); the live message count and pending tokens after.
fn append(
    api: &Api,
    s: &SessionPath,
    sid: &str,
    messages: &[Message],
) -> Result<(usize, i64), ApiError> {
    let uri = s.dir.uri();
    for m in messages {
        api.sessions
            .add_message(s, m)
            .map_err(|e| session_error(sid, &uri, e))?;
    }
    let (live, tokens) = live(api, s, sid)?;
    Ok((live.len(), tokens))
}

async fn add_message(
    State(api): State<Arc<Api>>,
    who: Identity,
    Path(sid): Path<String>,
    Body(b): Body<MessageBody>,
) -> ApiResult {
    let s = session_of(&who, &sid)?;
    let m = b.to_message(&who)?;
    blocking(move || {
        let (count, tokens) = append(&api, &s, &sid, &[m])?;
        ok(json!({ "session_id": sid, "message_count": count, "pending_tokens": tokens }))
    })
    .await
}

#[derive(Deserialize)]
struct BatchBody {
    messages: Vec<MessageBody>,
    #[serde(default)]
    #[allow(dead_code)]
    telemetry: Option<Value>,
}

async fn add_batch(
    State(api): State<Arc<Api>>,
    who: Identity,
    Path(sid): Path<String>,
    Body(b): Body<BatchBody>,
) -> ApiResult {
    if b.messages.len() > MAX_BATCH {
        return Err(ApiError::invalid(format!(
            "Invalid request body: messages: at most {MAX_BATCH} messages per batch"
        )));
    }
    let s = session_of(&who, &sid)?;
    // Every message is checked before the first is appended: a bad one refuses the batch whole.
    let messages = b
        .messages
        .iter()
        .map(|m| m.to_message(&who))
        .collect::<Result<Vec<_>, _>>()?;
    blocking(move || {
        let added = messages.len();
        let (count, tokens) = append(&api, &s, &sid, &messages)?;
        ok(json!({
            "session_id": sid, "message_count": count, "added": added, "pending_tokens": tokens,
        }))
    })
    .await
}

/// `CommitRequest`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CommitBody {
    #[serde(default)]
    enable_working_memory: Option<bool>,
    #[serde(default)]
    reset_context: bool,
    #[serde(default)]
    keep_recent_count: i64,
    #[serde(default)]
    retention_mode: Option<String>,
    #[serde(default)]
    keep_recent_turn_count: Option<i64>,
    #[serde(default)]
    retained_message_token_budget: Option<i64>,
    #[serde(default)]
    min_raw_tail_steps: Option<i64>,
    #[serde(default)]
    #[allow(dead_code)] // Event tags are not kept (see the module's doc).
    extraction_metadata: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    telemetry: Option<Value>,
}

impl CommitBody {
    fn check(&self) -> Result<(), ApiError> {
        if !(0..=10_000).contains(&self.keep_recent_count) {
            return Err(ApiError::invalid(
                "keep_recent_count must be between 0 and 10000",
            ));
        }
        if let Some(m) = &self.retention_mode {
            if m != "turn_budget" {
                return Err(ApiError::invalid("retention_mode must be 'turn_budget'"));
            }
        }
        if self.reset_context && (self.keep_recent_count != 0 || self.retention_mode.is_some()) {
            return Err(ApiError::invalid(
                "reset_context requires keep_recent_count=0 and no retention_mode",
            ));
        }
        let turn_fields = [
            self.keep_recent_turn_count,
            self.retained_message_token_budget,
            self.min_raw_tail_steps,
        ];
        if self.retention_mode.is_none() && turn_fields.iter().any(Option::is_some) {
            return Err(ApiError::invalid(
                "retention_mode='turn_budget' is required when Turn retention fields are set",
            ));
        }
        if turn_fields.iter().flatten().any(|n| *n < 0) {
            return Err(ApiError::invalid(
                "Turn retention fields must not be negative",
            ));
        }
        Ok(())
    }

    /// How many of the live lines stay: `keep_recent_count`, or with turn retention every
    /// line from the `keep_recent_turn_count`-th last user message on.
    fn keep(&self, live: &[Message]) -> usize {
        match (self.retention_mode.as_deref(), self.keep_recent_turn_count) {
            (Some("turn_budget"), Some(turns)) if turns > 0 => {
                let mut seen = 0;
                for (i, m) in live.iter().enumerate().rev() {
                    if m.role == "user" {
                        seen += 1;
                        if seen == turns {
                            return live.len() - i;
                        }
                    }
                }
                live.len()
            }
            (Some("turn_budget"), _) => 0,
            _ => self.keep_recent_count as usize,
        }
    }
}

async fn commit(
    State(api): State<Arc<Api>>,
    who: Identity,
    Path(sid): Path<String>,
    Body(b): Body<CommitBody>,
) -> ApiResult {
    b.check()?;
    let s = session_of(&who, &sid)?;
    blocking(move || {
        let uri = s.dir.uri();
        if !exists(&api, &s, &sid)? {
            return Err(not_found(&sid));
        }
        let (messages, _) = live(&api, &s, &sid)?;
        let keep = b.keep(&messages);
        let report = api
            .sessions
            .commit_keeping(&s, keep)
            .map_err(|e| session_error(&sid, &uri, e))?;
        let working_memory = b.enable_working_memory.unwrap_or(false);
        let Some(n) = report.archive else {
            let reason = if keep > 0 && !messages.is_empty() {
                "all_within_keep_window"
            } else {
                "no_messages"
            };
            return ok(json!({
                "session_id": sid, "status": "skipped", "task_id": Value::Null,
                "archive_uri": Value::Null, "archived": false,
                "effective_enable_working_memory": working_memory,
                "reason": reason, "trace_id": "",
            }));
        };
        let (_, active_tokens) = live(&api, &s, &sid)?;
        let watcher = api.clone();
        let (ws_s, ws_sid) = (s.clone(), sid.clone());
        let task_id = api
            .tasks
            .spawn("session_commit", Some(sid.clone()), &who, move || {
                wait_phase2(&watcher, &ws_s, &ws_sid, n)
            });
        ok(json!({
            "session_id": sid,
            "status": "accepted",
            "task_id": task_id,
            "archive_uri": report.archive_uri,
            "archived": true,
            "effective_enable_working_memory": working_memory,
            "trace_id": "",
            "estimated_active_tokens": active_tokens,
            "budget_exceeded": false,
        }))
    })
    .await
}

/// Wait for phase 2 of archive `n` (run by the daemon's workers): its `.done` completes the
/// task, its `.failed.json` fails it with the recorded error, and so does an archive that
/// is gone or a job that ended without either (a dead job: `vikingfs status` shows why).
fn wait_phase2(api: &Api, s: &SessionPath, sid: &str, n: u32) -> Result<Value, ApiError> {
    let ws = &api.sessions.ws;
    let key = s.archive(n).as_str().to_string();
    let done = s.archive_file(n, DONE);
    let failed = s.archive_file(n, FAILED);
    let mut pause = Duration::from_millis(20);
    loop {
        if let Some(v) = read_json(ws, &done) {
            return Ok(json!({
                "session_id": sid,
                "archive_uri": s.archive(n).uri(),
                "memories_extracted": {
                    "adds": v.get("adds").cloned().unwrap_or(json!(0)),
                    "updates": v.get("updates").cloned().unwrap_or(json!(0)),
                },
                "completed_at": v.get("completed_at").cloned().unwrap_or(Value::Null),
            }));
        }
        if let Some(v) = read_json(ws, &failed) {
            let why = v["error"].as_str().unwrap_or("phase 2 failed").to_string();
            return Err(ApiError::internal(why));
        }
        if !fsx::is_dir(ws, &s.archive(n)).map_err(|e| session_error(sid, &key, e))? {
            return Err(ApiError::new(
                Code::NotFound,
                format!("Session '{sid}' no longer exists"),
            ));
        }
        let pending = api
            .ops
            .queue()
            .has_pending(crate::queue::SESSION_COMMIT, &key)
            .unwrap_or(true);
        let exists = |p: &VPath| fsx::exists(ws, p).map_err(|e| session_error(sid, &key, e));
        if !pending && !exists(&done)? && !exists(&failed)? {
            return Err(ApiError::internal(format!(
                "phase 2 of {} ended without completing (its job is dead: see `vikingfs \
                 status`; `vikingfs session recover --requeue` retries it)",
                s.archive(n).uri()
            )));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

fn read_json(ws: &crate::workspace::Workspace, p: &VPath) -> Option<Value> {
    let b = read_below(ws, p)?;
    Some(serde_json::from_slice(&b).unwrap_or(Value::Null))
}

/// A file of the caller's session as every route reads for a remote caller: below the data
/// root with no symlink on the way or at the end (`DataRoot::open_nofollow`), and only a
/// regular file. A link made through the mount in one's own session (an archive's
/// `.overview.md` to another user's file, `history` to `/etc`) hands over nothing.
fn read_below(ws: &crate::workspace::Workspace, p: &VPath) -> Option<Vec<u8>> {
    let root = crate::sys::DataRoot::open(&ws.data_root()).ok()?;
    let mut b = Vec::new();
    std::io::Read::read_to_end(&mut root.open_regular_beneath(p.as_bytes()).ok()?.0, &mut b)
        .ok()?;
    Some(b)
}

#[derive(Deserialize, Default)]
struct ContextParams {
    #[serde(default = "default_budget")]
    token_budget: i64,
}

fn default_budget() -> i64 {
    128_000
}

/// Archives of `s`, newest first, with their state: `Some(true)` done, `Some(false)` failed,
/// `None` still being processed.
fn archive_states(
    api: &Api,
    s: &SessionPath,
    sid: &str,
) -> Result<Vec<(u32, Option<bool>)>, ApiError> {
    let ws = &api.sessions.ws;
    let err = |e| session_error(sid, &s.dir.uri(), e);
    let mut v = Vec::new();
    for n in layout::archives_on_disk(ws, s).map_err(err)? {
        let state = if fsx::exists(ws, &s.archive_file(n, DONE)).map_err(err)? {
            Some(true)
        } else if fsx::exists(ws, &s.archive_file(n, FAILED)).map_err(err)? {
            Some(false)
        } else {
            None
        };
        v.push((n, state));
    }
    v.reverse();
    Ok(v)
}

fn archive_messages(api: &Api, s: &SessionPath, n: u32) -> Vec<Message> {
    let text = read_below(&api.sessions.ws, &s.archive_file(n, MESSAGES)).unwrap_or_default();
    crate::semantic::memory::parse_messages(&String::from_utf8_lossy(&text)).messages
}

/// OpenViking's `get_session_context`: the newest finished archive's overview, then the raw
/// messages of the archives still being processed after it and the live messages, the
/// newest kept within `token_budget`.
async fn context(
    State(api): State<Arc<Api>>,
    who: Identity,
    Path(sid): Path<String>,
    Params(p): Params<ContextParams>,
) -> ApiResult {
    if p.token_budget < 0 {
        return Err(
            ApiError::invalid("token_budget must be greater than or equal to 0")
                .with_details(json!({"field": "token_budget", "value": p.token_budget})),
        );
    }
    let s = session_of(&who, &sid)?;
    blocking(move || {
        if !exists(&api, &s, &sid)? {
            return Err(not_found(&sid));
        }
        let ws = &api.sessions.ws;
        let states = archive_states(&api, &s, &sid)?;
        let total = states.len();
        let failed = states.iter().filter(|(_, st)| *st == Some(false)).count();
        let mut pending_archives = Vec::new();
        let mut latest_overview = String::new();
        for (n, st) in &states {
            match st {
                None => pending_archives.push(*n),
                Some(true) => {
                    let b = read_below(ws, &s.archive_file(*n, OVERVIEW)).unwrap_or_default();
                    latest_overview = String::from_utf8_lossy(&b).trim().to_string();
                    break;
                }
                Some(false) => break,
            }
        }
        let mut all: Vec<Message> = Vec::new();
        for n in pending_archives.iter().rev() {
            all.extend(archive_messages(&api, &s, *n));
        }
        let (live_msgs, _) = live(&api, &s, &sid)?;
        all.extend(live_msgs);
        let budget = p.token_budget;
        let total_tokens: i64 = all.iter().map(message_tokens).sum();
        let (kept, used) = if total_tokens <= budget {
            (all, total_tokens)
        } else {
            // The newest messages that fit, in order.
            let mut used = 0;
            let mut start = all.len();
            for (i, m) in all.iter().enumerate().rev() {
                let t = message_tokens(m);
                if used + t > budget {
                    break;
                }
                used += t;
                start = i;
            }
            (all.split_off(start), used)
        };
        let remaining = (budget - used).max(0);
        let overview_tokens = estimate_tokens(&latest_overview);
        let include = !latest_overview.is_empty() && overview_tokens <= remaining;
        let archive_tokens = if include { overview_tokens } else { 0 };
        ok(json!({
            "latest_archive_overview": if include { latest_overview } else { String::new() },
            "pre_archive_abstracts": [],
            "messages": kept.iter().map(message_json).collect::<Vec<_>>(),
            "estimatedTokens": used + archive_tokens,
            "stats": {
                "totalArchives": total,
                "includedArchives": 0,
                "droppedArchives": total - failed,
                "failedArchives": failed,
                "activeTokens": used,
                "archiveTokens": archive_tokens,
            },
        }))
    })
    .await
}

/// One finished archive: its abstract, overview and messages.
async fn archive(
    State(api): State<Arc<Api>>,
    who: Identity,
    Path((sid, archive_id)): Path<(String, String)>,
) -> ApiResult {
    let s = session_of(&who, &sid)?;
    blocking(move || {
        if !exists(&api, &s, &sid)? {
            return Err(not_found(&sid));
        }
        let gone = || {
            ApiError::new(Code::NotFound, format!("Archive {archive_id} not found"))
                .with_details(json!({"resource": archive_id, "type": "session archive"}))
        };
        let n = layout::parse_archive_name(&archive_id).ok_or_else(gone)?;
        let ws = &api.sessions.ws;
        if !fsx::exists(ws, &s.archive_file(n, DONE))
            .map_err(|e| session_error(&sid, &s.dir.uri(), e))?
        {
            return Err(gone());
        }
        let read = |name: &str| {
            let b = read_below(ws, &s.archive_file(n, name)).unwrap_or_default();
            String::from_utf8_lossy(&b).trim().to_string()
        };
        ok(json!({
            "archive_id": archive_id,
            "abstract": read(ABSTRACT),
            "overview": read(OVERVIEW),
            "messages": archive_messages(&api, &s, n).iter().map(message_json).collect::<Vec<_>>(),
        }))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turn_retention_keeps_from_the_nth_last_user_message() {
        let msgs: Vec<Message> = ["user", "assistant", "user", "assistant", "user"]
            .iter()
            .map(|r| Message::new(*r, "x"))
            .collect();
        let b = CommitBody {
            retention_mode: Some("turn_budget".into()),
            keep_recent_turn_count: Some(2),
            ..Default::default()
        };
        assert_eq!(b.keep(&msgs), 3);
        let b = CommitBody {
            keep_recent_count: 1,
            ..Default::default()
        };
        assert_eq!(b.keep(&msgs), 1);
        let b = CommitBody {
            keep_recent_turn_count: Some(1),
            ..Default::default()
        };
        assert!(b.check().is_err());
    }

    #[test]
    fn new_ids_look_like_openvikings() {
        let id = new_session_id();
        assert_eq!(id.len(), "20261202-150035-f4f348e73dcf433e".len(), "{id}");
        assert!(SessionPath::of_user("u", &id).is_ok());
    }
}
