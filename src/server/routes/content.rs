//! The content routes of OpenViking 0.5.2 (`openviking/server/routers/content.py`):
//! `GET /api/v1/content/read` (lines `offset`..`offset+limit`, as Python slices them),
//! `GET /api/v1/content/abstract` and `/overview` (a directory's `.abstract.md` and
//! `.overview.md`, which the workers write; a file's are its directory's),
//! `GET /api/v1/content/download` (the raw bytes, streamed) and `POST /api/v1/content/write`
//! (modes `replace`, `create` — OpenViking's alias of replace — and `append`, through the
//! locked write the mount and `vikingfs write` use), `POST /api/v1/content/batch-write`
//! (`ops::Locked::write_batch`: every target's EXACT lock at once), `POST
//! /api/v1/content/set_tags` (tags kept as the extended attribute `user.openviking.tags`:
//! `ops::Locked::set_tags`) and `POST /api/v1/content/reindex` (`ops::Ops::reindex`: the
//! records rebuilt from the files now, summaries and vectors queued).
//!
//! Reads go through `fs::View`: no lock, no symlink followed, internal names never
//! reachable (a URI naming one is refused when it is parsed).

use std::io::Read;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use super::fs::{abstract_or_placeholder, not_found, overview_or_placeholder, wait_drained, View};
use super::{get, post, Routes};
use crate::ops::{OpsError, TagMode};
use crate::server::auth::Identity;
use crate::server::extract::{Body, Params};
use crate::server::reply::{ok, ApiError, ApiResult, Code};
use crate::server::{blocking, Api};
use crate::uri::VPath;

pub fn routes() -> Routes {
    Routes::new()
        .route("/api/v1/content/read", get(read))
        .route("/api/v1/content/abstract", get(abstract_))
        .route("/api/v1/content/overview", get(overview))
        .route("/api/v1/content/download", get(download))
        .route("/api/v1/content/write", post(write))
        .route("/api/v1/content/batch-write", post(batch_write))
        .route("/api/v1/content/set_tags", post(set_tags))
        .route("/api/v1/content/reindex", post(reindex))
}

#[derive(Deserialize)]
struct ReadQuery {
    uri: String,
    #[serde(default)]
    offset: i64,
    #[serde(default = "to_end")]
    limit: i64,
}

fn to_end() -> i64 {
    -1
}

/// Python's `str.splitlines(keepends=True)`: the lines with their ends, at every boundary
/// Python knows (`\n`, `\r`, `\r\n`, `\v`, `\f`, `\x1c`–`\x1e`, `\x85`, `\u2028`, `\u2029`).
fn split_lines(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut it = text.char_indices().peekable();
    while let Some((i, c)) = it.next() {
        let end = match c {
            '\r' => match it.peek() {
                Some(&(j, '\n')) => {
                    it.next();
                    j + 1
                }
                _ => i + 1,
            },
            '\n' | '\x0b' | '\x0c' | '\x1c' | '\x1d' | '\x1e' | '\u{85}' | '\u{2028}'
            | '\u{2029}' => i + c.len_utf8(),
            _ => continue,
        };
        out.push(&text[start..end]);
        start = end;
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// `lines[offset:]` (limit -1) or `lines[offset:offset+limit]`, with Python's slice rules
/// (a negative index counts from the end; out of range clamps).
fn slice_lines(text: &str, offset: i64, limit: i64) -> String {
    if offset == 0 && limit == -1 {
        return text.to_string();
    }
    let lines = split_lines(text);
    let n = lines.len() as i64;
    let norm = |i: i64| if i < 0 { (i + n).max(0) } else { i.min(n) };
    let start = norm(offset);
    let stop = if limit == -1 { n } else { norm(offset + limit) };
    if stop <= start {
        return String::new();
    }
    lines[start as usize..stop as usize].concat()
}

/// The file's text (invalid UTF-8 replaced), up to `server.max_body_bytes`: a bigger file
/// is downloaded, not read into one JSON string.
fn read_text(api: &Api, view: &View, p: &VPath) -> Result<String, ApiError> {
    let (file, st) = view.open_file(p)?;
    let max = api.config.max_body_bytes as u64;
    let too_big = |size: u64| {
        ApiError::new(
            Code::ResourceExhausted,
            "File exceeds the configured read size limit",
        )
        .with_details(json!({
            "uri": p.uri(), "reason": "read_limit_exceeded",
            "size_bytes": size, "max_bytes": max,
        }))
    };
    if st.st_size as u64 > max {
        return Err(too_big(st.st_size as u64));
    }
    let mut bytes = Vec::with_capacity(st.st_size as usize);
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ApiError::from_ops(&p.uri(), OpsError::io(p.uri(), e)))?;
    if bytes.len() as u64 > max {
        return Err(too_big(bytes.len() as u64));
    }
    Ok(match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

async fn read(
    State(api): State<Arc<Api>>,
    who: Identity,
    Params(q): Params<ReadQuery>,
) -> ApiResult {
    let p = who.path(&q.uri)?;
    blocking(move || {
        let view = View::open(&api, &who)?;
        let text = read_text(&api, &view, &p)?;
        ok(slice_lines(&text, q.offset, q.limit))
    })
    .await
}

#[derive(Deserialize)]
struct UriQuery {
    uri: String,
}

/// The directory whose summaries `p` shows: itself, or a file's directory.
fn summary_dir(view: &View, p: &VPath) -> Result<VPath, ApiError> {
    let st = view.stat(p)?.ok_or_else(|| not_found(p))?;
    Ok(if st.is_dir() {
        p.clone()
    } else {
        p.parent().unwrap_or_else(VPath::root)
    })
}

async fn abstract_(
    State(api): State<Arc<Api>>,
    who: Identity,
    Params(q): Params<UriQuery>,
) -> ApiResult {
    let p = who.path(&q.uri)?;
    blocking(move || {
        let view = View::open(&api, &who)?;
        let dir = summary_dir(&view, &p)?;
        ok(abstract_or_placeholder(&view, &dir))
    })
    .await
}

async fn overview(
    State(api): State<Arc<Api>>,
    who: Identity,
    Params(q): Params<UriQuery>,
) -> ApiResult {
    let p = who.path(&q.uri)?;
    blocking(move || {
        let view = View::open(&api, &who)?;
        let dir = summary_dir(&view, &p)?;
        ok(overview_or_placeholder(&view, &dir))
    })
    .await
}

#[derive(Deserialize)]
struct DownloadQuery {
    uri: Option<String>,
}

/// Python's `urllib.parse.quote` of a file name (every byte but `A-Za-z0-9_.-~/`
/// percent-encoded), for `Content-Disposition: attachment; filename*=UTF-8''…`.
fn quote(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"_.-~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// How much of a download is read at a time.
const CHUNK: usize = 64 * 1024;

/// The file's bytes as they are (`application/octet-stream`), read on the blocking pool a
/// chunk at a time as the client takes them: a large file never sits in memory whole.
async fn download(
    State(api): State<Arc<Api>>,
    who: Identity,
    Params(q): Params<DownloadQuery>,
) -> Result<Response, ApiError> {
    let uri = q
        .uri
        .filter(|u| !u.is_empty())
        .ok_or_else(|| ApiError::invalid("uri is required"))?;
    let p = who.path(&uri)?;
    let name = p.name().to_string();
    let (file, size) = blocking(move || {
        let view = View::open(&api, &who)?;
        let (f, st) = view.open_file(&p)?;
        Ok((f, st.st_size as u64))
    })
    .await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
    tokio::task::spawn_blocking(move || {
        // The length announced is what is sent, should the file grow meanwhile.
        let mut file = file.take(size);
        loop {
            let mut buf = vec![0u8; CHUNK];
            let r = match file.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    buf.truncate(n);
                    Ok(Bytes::from(buf))
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => Err(e),
            };
            let failed = r.is_err();
            // The client went away: stop reading.
            if tx.blocking_send(r).is_err() || failed {
                return;
            }
        }
    });
    let body = axum::body::Body::from_stream(Chunks(rx));
    let disposition = format!("attachment; filename*=UTF-8''{}", quote(&name));
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_DISPOSITION, disposition),
            (header::CONTENT_LENGTH, size.to_string()),
        ],
        body,
    )
        .into_response())
}

/// The chunks a download's reader sends, as a stream for the body.
struct Chunks(tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>);

impl futures_core::Stream for Chunks {
    type Item = std::io::Result<Bytes>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// `content/write`'s body (`WriteContentRequest`, which refuses unknown fields).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct WriteBody {
    uri: String,
    content: String,
    #[serde(default = "replace")]
    mode: String,
    #[serde(default)]
    wait: bool,
    // Accepted for OpenViking's clients; vikingfs keeps no telemetry, tags, ACLs or edit
    // sources, and always derives both summaries and vectors.
    #[serde(default)]
    telemetry: Value,
    processing_mode: Option<String>,
    tags: Option<Vec<String>>,
    tag_mode: Option<String>,
    acl: Option<Value>,
    edit_source: Option<String>,
}

fn replace() -> String {
    "replace".into()
}

/// OpenViking's context type of a path: memories, skills, or resources.
pub(super) fn context_type(p: &VPath) -> &'static str {
    let c: Vec<&str> = p.components().collect();
    match c.as_slice() {
        ["agent", "skills", ..] => "skill",
        ["user", _, "peers", _, "memories", ..] => "memory",
        ["user", _, "memories", ..] => "memory",
        ["user", _, "skills", ..] => "skill",
        _ => "resource",
    }
}

async fn write(State(api): State<Arc<Api>>, who: Identity, Body(b): Body<WriteBody>) -> ApiResult {
    let p = who.path(&b.uri)?;
    if !matches!(b.mode.as_str(), "replace" | "create" | "append") {
        return Err(ApiError::invalid(format!(
            "unsupported write mode: {}",
            b.mode
        )));
    }
    blocking(move || {
        let uri = p.uri();
        let fail = |e| ApiError::from_ops(&uri, e);
        let parent = p.parent().unwrap_or_else(VPath::root);
        // A missing directory is made as OpenViking makes it, each level a locked mkdir.
        let missing = || std::fs::symlink_metadata(api.ops.workspace().fs_path(&parent)).is_err();
        if parent.depth() > 1 && missing() {
            match api.ops.mkdir(&parent, true) {
                Ok(()) | Err(OpsError::Exists(_)) => {}
                Err(e) => return Err(fail(e)),
            }
        }
        let written = if b.mode == "append" {
            api.ops
                .append_file(&p, b.content.as_bytes())
                .map_err(fail)?
        } else {
            api.ops.write_file(&p, b.content.as_bytes()).map_err(fail)?;
            b.content.len()
        };
        let status = if b.wait {
            wait_drained(&api)?;
            "completed"
        } else {
            "queued"
        };
        ok(json!({
            "uri": uri,
            "root_uri": parent.uri(),
            "context_type": context_type(&p),
            "mode": b.mode,
            "written_bytes": written,
            "content_updated": true,
            "semantic_status": status,
            "vector_status": status,
            "queue_status": Value::Null,
        }))
    })
    .await
}

// ---- set_tags -------------------------------------------------------------------------

/// `SetTagsRequest` (which refuses unknown fields).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SetTagsBody {
    uri: String,
    tags: Option<Vec<String>>,
    #[serde(default = "replace")]
    mode: String,
    #[serde(default)]
    recursive: bool,
    #[serde(default)]
    #[allow(dead_code)]
    telemetry: Value,
}

fn tag_mode(mode: &str) -> Result<TagMode, ApiError> {
    TagMode::parse(mode).ok_or_else(|| {
        ApiError::invalid(format!(
            "unsupported tag mode: {mode}; use replace, append or clear"
        ))
        .with_details(json!({ "field": "mode", "allowed": ["replace", "append", "clear"] }))
    })
}

/// Whether OpenViking keeps tags (and reindexes) in the namespace of `p`: not in a user's
/// sessions (its `namespace_policy_for_uri`, FILE_ONLY there).
fn indexed_namespace(p: &VPath) -> bool {
    !p.is_under_sessions()
}

/// What a change of `p` (`recursive`: with everything below) may reach for `who`: `p`, or
/// for a directory holding other users' trees (`viking://`, `viking://user`) the trees of
/// it `who` sees (`Identity::visible_trees`), never another user's.
fn tag_targets(who: &Identity, p: &VPath, recursive: bool) -> Vec<VPath> {
    if recursive {
        who.visible_trees(p)
    } else {
        vec![p.clone()]
    }
}

/// `content/set_tags` and `fs/attrs/set_tags`: OpenViking's `set_tags` result.
pub(super) async fn set_tags(
    State(api): State<Arc<Api>>,
    who: Identity,
    Body(b): Body<SetTagsBody>,
) -> ApiResult {
    let p = who.path(&b.uri)?;
    let mode = tag_mode(&b.mode)?;
    if !indexed_namespace(&p) {
        return Err(ApiError::invalid(format!(
            "tags are not supported for namespace: {}",
            p.uri()
        )));
    }
    blocking(move || {
        let given = if mode == TagMode::Clear {
            Vec::new()
        } else {
            b.tags.clone().unwrap_or_default()
        };
        let normalized = crate::ops::normalize_tags(given.iter().map(String::as_str));
        let root = p.parent().unwrap_or_else(VPath::root).uri();
        // OpenViking: a replace by nothing changes nothing (clear is how tags are removed).
        let (updated, skipped) = if mode == TagMode::Replace && normalized.is_empty() {
            View::open(&api, &who)?
                .stat(&p)?
                .ok_or_else(|| super::fs::not_found(&p))?;
            (Vec::new(), 1)
        } else {
            let mut changed = Vec::new();
            for t in tag_targets(&who, &p, b.recursive) {
                changed.extend(
                    api.ops
                        .set_tags(&t, &normalized, mode, b.recursive)
                        .map_err(|e| ApiError::from_ops(&t.uri(), e))?,
                );
            }
            (changed, 0)
        };
        ok(json!({
            "uri": p.uri(),
            "updated_uris": updated.iter().map(VPath::uri).collect::<Vec<_>>(),
            "root_uri": root,
            "context_type": context_type(&p),
            "tags": normalized,
            "mode": b.mode,
            "success_count": updated.len(),
            "skipped_count": skipped,
            "failed_count": 0,
            "tags_updated": !updated.is_empty(),
        }))
    })
    .await
}

// ---- batch-write ------------------------------------------------------------------------

/// `BatchWriteOperation` (which refuses unknown fields).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchOp {
    uri: String,
    content: Option<String>,
    content_base64: Option<String>,
    #[serde(default = "replace")]
    mode: String,
    expected_sha256: Option<String>,
    tags: Option<Vec<String>>,
    #[serde(default = "replace")]
    tag_mode: String,
    #[allow(dead_code)]
    acl: Option<Value>,
}

/// `BatchWriteRequest` (which refuses unknown fields).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct BatchBody {
    root_uri: String,
    operations: Vec<BatchOp>,
    #[serde(default = "yes")]
    wait: bool,
    #[serde(default)]
    telemetry: Value,
    #[serde(default)]
    skip_conflicts: bool,
    #[serde(default)]
    defer_processing: bool,
    processing_mode: Option<String>,
    edit_source: Option<String>,
}

fn yes() -> bool {
    true
}

/// Where OpenViking lets a batch write: inside a resource directory (not `resources`
/// itself, nor a user's `resources`), or inside a memory type's directory.
fn batch_root_ok(p: &VPath) -> bool {
    let c: Vec<&str> = p.components().collect();
    match context_type(p) {
        "memory" => matches!(
            c.as_slice(),
            ["user", _, "memories", _, ..] | ["user", _, "peers", _, "memories", _, ..]
        ),
        "resource" => match c.as_slice() {
            ["resources"] | ["user", _, "resources"] | ["user", _, "peers", _, "resources"] => {
                false
            }
            ["resources", ..] | ["user", _, "resources", ..] => true,
            ["user", _, "peers", _, "resources", ..] => true,
            ["agent", _, ..] => true,
            _ => false,
        },
        _ => false,
    }
}

async fn batch_write(
    State(api): State<Arc<Api>>,
    who: Identity,
    Body(b): Body<BatchBody>,
) -> ApiResult {
    let root = who.path(&b.root_uri)?;
    if !batch_root_ok(&root) || root.is_under_sessions() {
        return Err(ApiError::invalid(
            "batch-write root must be a resource or memory directory",
        ));
    }
    if b.operations.is_empty() {
        return Err(ApiError::invalid(
            "batch-write operations must not be empty",
        ));
    }
    let mut writes = Vec::new();
    let mut tagged = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for op in &b.operations {
        let p = who.path(&op.uri)?;
        if !seen.insert(p.clone()) {
            return Err(ApiError::invalid(format!(
                "duplicate batch-write target: {}",
                p.uri()
            )));
        }
        if p == root || !p.starts_with(&root) {
            return Err(ApiError::invalid(format!(
                "batch-write target is outside root_uri: {}",
                p.uri()
            )));
        }
        if context_type(&p) != context_type(&root) {
            return Err(ApiError::invalid(format!(
                "batch-write target has a different context type: {}",
                p.uri()
            )));
        }
        let bytes = match (&op.content, &op.content_base64) {
            (Some(t), None) => t.clone().into_bytes(),
            (None, Some(b64)) => {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|e| {
                        ApiError::invalid(format!(
                            "content_base64 of {} is not base64: {e}",
                            p.uri()
                        ))
                    })?
            }
            _ => {
                return Err(ApiError::invalid(
                    "exactly one of content or content_base64 is required",
                ))
            }
        };
        if !matches!(op.mode.as_str(), "replace" | "append" | "create" | "upsert") {
            return Err(ApiError::invalid(format!(
                "unsupported batch-write mode: {}; use replace, append, create or upsert",
                op.mode
            )));
        }
        if let Some(h) = &op.expected_sha256 {
            if h.len() != 64 || !h.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
                return Err(ApiError::invalid(format!(
                    "expected_sha256 of {} must be 64 lower-case hex digits",
                    p.uri()
                )));
            }
        }
        if op.tags.is_some() || op.tag_mode == "clear" {
            tagged.push((
                p.clone(),
                op.tags.clone().unwrap_or_default(),
                tag_mode(&op.tag_mode)?,
            ));
        }
        writes.push(crate::ops::BatchWrite {
            path: p,
            bytes,
            append: op.mode == "append",
            expected_sha256: op.expected_sha256.clone(),
        });
    }
    if b.defer_processing && !tagged.is_empty() {
        return Err(ApiError::invalid(
            "defer_processing does not support tags or ACL updates",
        ));
    }
    blocking(move || {
        let view = View::open(&api, &who)?;
        match view.stat(&root)? {
            Some(st) if st.is_dir() => {}
            _ => {
                return Err(ApiError::invalid(format!(
                    "batch-write root must be an existing directory: {}",
                    root.uri()
                )))
            }
        }
        let rep = api
            .ops
            .write_batch(&writes, b.skip_conflicts)
            .map_err(|e| ApiError::from_ops(&root.uri(), e))?;
        let skipped: std::collections::HashSet<&VPath> =
            rep.conflicts.iter().map(|(p, _)| p).collect();
        for (p, tags, mode) in &tagged {
            if skipped.contains(p) {
                continue;
            }
            let normalized = crate::ops::normalize_tags(tags.iter().map(String::as_str));
            api.ops
                .set_tags(p, &normalized, *mode, false)
                .map_err(|e| ApiError::from_ops(&p.uri(), e))?;
        }
        let status = if b.defer_processing {
            "deferred"
        } else if b.wait {
            wait_drained(&api)?;
            "completed"
        } else {
            "queued"
        };
        let uris = |v: &[VPath]| v.iter().map(VPath::uri).collect::<Vec<_>>();
        let mut r = json!({
            "root_uri": root.uri(),
            "created": uris(&rep.created),
            "updated": uris(&rep.updated),
            "unchanged": uris(&rep.unchanged),
            "queue_status": Value::Null,
            "semantic_status": status,
            "vector_status": status,
        });
        if b.skip_conflicts {
            r["conflicts"] = rep
                .conflicts
                .iter()
                .map(|(p, m)| json!({"uri": p.uri(), "code": "CONFLICT", "message": m}))
                .collect::<Vec<_>>()
                .into();
        }
        ok(r)
    })
    .await
}

// ---- reindex ----------------------------------------------------------------------------

/// `ReindexRequest` (unknown fields ignored, as its model does).
#[derive(Deserialize)]
struct ReindexBody {
    uri: String,
    #[serde(default = "vectors_only")]
    mode: String,
    #[serde(default)]
    #[allow(dead_code)]
    force: bool,
    #[serde(default = "yes")]
    wait: bool,
    #[serde(default = "yes")]
    recursive: bool,
    tags: Option<Vec<String>>,
    #[serde(default = "replace")]
    tag_mode: String,
}

fn vectors_only() -> String {
    "vectors_only".into()
}

fn unsupported_uri(p: &VPath) -> ApiError {
    ApiError::new(
        Code::UnsupportedUri,
        format!("Unsupported reindex URI: {}", p.uri()),
    )
    .with_details(json!({ "uri": p.uri() }))
}

/// OpenViking's reindex target type of `p` (`ReindexExecutor._infer_target_type`).
fn reindex_type(p: &VPath) -> Result<&'static str, ApiError> {
    if p.is_under_sessions() {
        return Err(unsupported_uri(p));
    }
    let c: Vec<&str> = p.components().collect();
    Ok(match c.as_slice() {
        [] => "global_namespace",
        ["user"] | ["user", _] => "user_namespace",
        _ if context_type(p) == "memory" => "memory",
        ["agent", "skills"] | ["user", _, "skills"] => "skill_namespace",
        _ if p.is_skill_dir() => "skill",
        ["agent", "skills", ..] | ["user", _, "skills", ..] => return Err(unsupported_uri(p)),
        ["resources", ..] | ["user", ..] | ["agent", _, ..] => "resource",
        _ => return Err(unsupported_uri(p)),
    })
}

/// `content/reindex`: the records at or below `uri` rebuilt from the files now (the terms
/// written before the answer), summaries and missing vectors queued, and with `wait` done
/// before the answer. Both of OpenViking's modes rebuild both here (summaries are derived
/// from the files either way).
async fn reindex(
    State(api): State<Arc<Api>>,
    who: Identity,
    Body(b): Body<ReindexBody>,
) -> ApiResult {
    let p = who.path(&b.uri)?;
    if who.role == crate::server::auth::Role::User {
        let own = matches!(
            p.components().collect::<Vec<_>>().as_slice(),
            ["user", u, ..] if *u == who.user
        );
        if !own {
            return Err(
                ApiError::denied("USER can only reindex their own user namespace.")
                    .with_details(json!({ "resource": p.uri() })),
            );
        }
    }
    let object_type = reindex_type(&p)?;
    if !matches!(b.mode.as_str(), "vectors_only" | "semantic_and_vectors") {
        return Err(ApiError::new(
            Code::UnsupportedMode,
            format!("Mode {} is not supported for {object_type}", b.mode),
        )
        .with_details(json!({
            "mode": b.mode, "object_type": object_type,
            "supported_modes": ["semantic_and_vectors", "vectors_only"],
        })));
    }
    if !b.recursive && object_type.ends_with("_namespace") {
        return Err(ApiError::invalid(format!(
            "recursive=false is not supported for namespace reindex target {}",
            p.uri()
        )));
    }
    let tags = if b.tags.is_some() || b.tag_mode == "clear" {
        Some((b.tags.clone().unwrap_or_default(), tag_mode(&b.tag_mode)?))
    } else {
        None
    };
    blocking(move || {
        let started = std::time::Instant::now();
        let view = View::open(&api, &who)?;
        if !p.is_root() && view.stat(&p)?.is_none() {
            return Err(super::fs::not_found(&p));
        }
        // Only the trees the caller sees: `viking://user` for root acting as one user is
        // that user's tree (a user key reaches only its own namespace, checked above).
        let trees = who.visible_trees(&p);
        if let Some((tags, mode)) = &tags {
            let normalized = crate::ops::normalize_tags(tags.iter().map(String::as_str));
            for t in tag_targets(&who, &p, b.recursive) {
                api.ops
                    .set_tags(&t, &normalized, *mode, b.recursive)
                    .map_err(|e| ApiError::from_ops(&t.uri(), e))?;
            }
        }
        let mut rep = crate::ops::ReindexReport::default();
        for t in &trees {
            let r = api
                .ops
                .reindex(t, &mut |_, _| {})
                .map_err(|e| ApiError::from_ops(&t.uri(), e))?;
            rep.files += r.files;
            rep.removed += r.removed;
            rep.queued += r.queued;
        }
        if b.wait {
            wait_drained(&api)?;
        }
        ok(json!({
            "status": "completed",
            "uri": p.uri(),
            "object_type": object_type,
            "mode": b.mode,
            "scanned_records": rep.files,
            "rebuilt_records": rep.files,
            "deleted_records": rep.removed,
            "unsupported_records": 0,
            "failed_records": 0,
            "queued_jobs": rep.queued,
            "duration_ms": started.elapsed().as_millis() as u64,
            "warnings": [],
        }))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_sliced_as_python_slices_them() {
        assert_eq!(split_lines("a\nb\r\nc\rd"), ["a\n", "b\r\n", "c\r", "d"]);
        assert_eq!(split_lines(""), Vec::<&str>::new());
        assert_eq!(split_lines("x\u{2028}y\n"), ["x\u{2028}", "y\n"]);
        let t = "l0\nl1\nl2\nl3\n";
        assert_eq!(slice_lines(t, 0, -1), t);
        assert_eq!(slice_lines(t, 1, 2), "l1\nl2\n");
        assert_eq!(slice_lines(t, 3, 10), "l3\n");
        assert_eq!(slice_lines(t, 9, -1), "");
        assert_eq!(slice_lines(t, -1, -1), "l3\n");
        assert_eq!(slice_lines(t, 2, 0), "");
    }

    #[test]
    fn names_are_quoted_and_typed_as_openviking_does() {
        assert_eq!(quote("a b.md"), "a%20b.md");
        assert_eq!(quote("é"), "%C3%A9");
        let p = |s: &str| VPath::parse_uri(s, "u").unwrap();
        assert_eq!(context_type(&p("viking://user/u/memories/x.md")), "memory");
        assert_eq!(
            context_type(&p("viking://agent/skills/s/SKILL.md")),
            "skill"
        );
        assert_eq!(context_type(&p("viking://resources/a.md")), "resource");
    }
}
