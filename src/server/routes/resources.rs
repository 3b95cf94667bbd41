//! The resource routes of OpenViking 0.5.2 (`openviking/server/routers/resources.py`):
//! `POST /api/v1/resources/temp_upload` (a multipart `file`, kept until it is added: see
//! `upload`) and `POST /api/v1/resources` (add-resource, the locked operation the CLI's
//! `vikingfs add-resource` runs, `ops.add_resource`).
//!
//! - The content comes from an upload (`temp_file_id`; the SDK's or `ov`'s zip of a directory
//!   is unpacked safely, any other file stored byte for byte: `upload::is_directory_zip_name`) or, for a root caller only (the root key, the workspace's socket, an open
//!   server on loopback), from a path on the server's own disk. OpenViking refuses host paths
//!   over HTTP altogether; a user key here is refused the same way (`PERMISSION_DENIED`), so a
//!   remote user never reads the host's files through add-resource.
//! - The target (`to` or `parent`) is resource content only, as OpenViking's
//!   `validate_content_target_uri(kind="resource")` has it: `viking://resources/…`, or a
//!   user's (or peer's) `resources/…`; anything else is `INVALID_URI` (400), and another
//!   user's tree is root's alone (`PERMISSION_DENIED`, also for an admin key).
//! - vikingfs fetches nothing remote (URLs, git, connectors) and keeps no watches:
//!   those requests answer `UNIMPLEMENTED`.

pub(super) mod upload;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::multipart::{Multipart, MultipartError, MultipartRejection};
use axum::extract::DefaultBodyLimit;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{json, Value};

use super::fs::wait_drained;
use super::{post, Routes};
use crate::ops::{AddOptions, OpsError};
use crate::server::auth::{Identity, Role};
use crate::server::extract::Body;
use crate::server::reply::{ok, ApiError, ApiResult, Code};
use crate::server::{blocking, Api};
use crate::uri::VPath;

pub fn routes() -> Routes {
    Routes::new().route("/api/v1/resources", post(add)).route(
        "/api/v1/resources/temp_upload",
        // Not the server's body limit (`max_body_bytes`): the handler holds the file to
        // `max_upload_bytes` and what surrounds it to `TEMP_UPLOAD_FRAMING`, so an upload is
        // refused by its own limit, with OpenViking's code and message.
        post(temp_upload).map(|m| m.layer(DefaultBodyLimit::disable())),
    )
}

/// What a multipart body may hold beside its file (boundaries, headers, other fields).
const TEMP_UPLOAD_FRAMING: u64 = 1 << 20;

/// An upload over `max` bytes, as OpenViking's store refuses it (`InvalidArgumentError`).
fn too_big(max: u64) -> ApiError {
    ApiError::invalid(format!("Upload exceeds size limit ({max} bytes)."))
        .with_details(json!({ "max_size_bytes": max }))
}

fn multipart_error(e: MultipartError) -> ApiError {
    ApiError::framework(e.status(), e.body_text())
}

/// An upload being received: forgotten (its file removed) unless it completes, also when
/// the client goes away midway and the request is dropped.
struct Receiving<'a> {
    uploads: &'a upload::Uploads,
    id: String,
    complete: bool,
}

impl Drop for Receiving<'_> {
    fn drop(&mut self) {
        if !self.complete {
            self.uploads.drop_upload(&self.id);
        }
    }
}

/// `temp_upload`: the multipart field `file` kept for a later add (`telemetry` and
/// `upload_mode` are accepted and ignored: uploads are local to this daemon).
async fn temp_upload(
    State(api): State<Arc<Api>>,
    who: Identity,
    form: Result<Multipart, MultipartRejection>,
) -> ApiResult {
    let max = api.config.max_upload_bytes;
    let mut form = form.map_err(|r| ApiError::framework(r.status(), r.body_text()))?;
    let uploads = upload::uploads()?;
    let mut id = None;
    // The bytes of everything but the file: read (and dropped) here, to bound them.
    let mut other = 0u64;
    while let Some(mut field) = form.next_field().await.map_err(multipart_error)? {
        if field.name() != Some("file") || id.is_some() {
            while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
                other += chunk.len() as u64;
                if other > TEMP_UPLOAD_FRAMING {
                    return Err(too_big(max));
                }
            }
            continue;
        }
        let original = field.file_name().unwrap_or("upload").to_string();
        let (fid, mut file) = uploads.create(&who, &original)?;
        let mut rx = Receiving {
            uploads,
            id: fid,
            complete: false,
        };
        let write = |file: &mut std::fs::File, buf: &mut Vec<u8>| {
            tokio::task::block_in_place(|| file.write_all(buf)).map_err(|e| {
                ApiError::from_ops("temp_upload", OpsError::io(std::env::temp_dir(), e))
            })?;
            buf.clear();
            Ok::<_, ApiError>(())
        };
        // Written a MiB at a time: a body arriving in small chunks (a slow client's) does not
        // take a worker thread off the runtime for every one of them.
        let mut buf = Vec::new();
        let mut total = 0u64;
        while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
            total += chunk.len() as u64;
            if total > max {
                return Err(too_big(max));
            }
            buf.extend_from_slice(&chunk);
            if buf.len() >= 1 << 20 {
                write(&mut file, &mut buf)?;
            }
        }
        write(&mut file, &mut buf)?;
        uploads.done(&rx.id);
        rx.complete = true;
        id = Some(rx.id.clone());
    }
    let id = id.ok_or_else(|| {
        ApiError::invalid("file: Field required").with_details(json!({
            "validation_errors": [{ "type": "missing", "loc": ["body", "file"],
                                    "msg": "Field required" }]
        }))
    })?;
    ok(json!({ "temp_file_id": id }))
}

/// `AddResourceRequest` (which refuses unknown fields).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct AddBody {
    path: Option<String>,
    temp_file_id: Option<String>,
    add_type: Option<String>,
    to: Option<String>,
    parent: Option<String>,
    #[serde(default)]
    create_parent: bool,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    instruction: String,
    #[serde(default)]
    wait: bool,
    #[serde(default)]
    strict: bool,
    #[serde(default)]
    internal_task: bool,
    source_name: Option<String>,
    ignore_dirs: Option<String>,
    include: Option<String>,
    exclude: Option<String>,
    #[serde(default)]
    directly_upload_media: Option<bool>,
    preserve_structure: Option<bool>,
    #[serde(default)]
    args: Value,
    #[serde(default)]
    telemetry: Value,
    #[serde(default)]
    watch_interval: f64,
    #[serde(default)]
    is_active: Option<bool>,
    processing_mode: Option<String>,
    tags: Option<Vec<String>>,
    tag_mode: Option<String>,
    acl: Option<Value>,
}

fn unimplemented(what: &str) -> ApiError {
    ApiError::new(
        Code::Unimplemented,
        format!("{what} is not supported by vikingfs"),
    )
}

/// Sources OpenViking fetches itself.
const REMOTE: [&str; 6] = ["http://", "https://", "git@", "ssh://", "git://", "tos://"];

fn non_empty(s: &Option<String>) -> Option<&str> {
    s.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

async fn add(State(api): State<Arc<Api>>, who: Identity, Body(b): Body<AddBody>) -> ApiResult {
    if non_empty(&b.path).is_none() && non_empty(&b.temp_file_id).is_none() {
        return Err(ApiError::invalid(
            "Either 'path' or 'temp_file_id' must be provided",
        ));
    }
    if non_empty(&b.add_type).is_some() {
        return Err(unimplemented("add_type (connector imports)"));
    }
    if b.watch_interval > 0.0 {
        return Err(unimplemented("watch_interval (watches)"));
    }
    for (field, v) in [
        ("include", &b.include),
        ("exclude", &b.exclude),
        ("ignore_dirs", &b.ignore_dirs),
    ] {
        if non_empty(v).is_some() {
            return Err(unimplemented(&format!(
                "{field} (vikingfs filters with .vikingignore files)"
            )));
        }
    }
    let to = non_empty(&b.to)
        .map(|u| target(&who, "to", u))
        .transpose()?;
    let parent = non_empty(&b.parent)
        .map(|u| target(&who, "parent", u))
        .transpose()?;
    if to.is_some() && parent.is_some() {
        return Err(ApiError::invalid(
            "Cannot specify both 'to' and 'parent' at the same time.",
        ));
    }
    blocking(move || add_now(&api, &who, &b, to, parent)).await
}

/// `to` or `parent` as OpenViking's `validate_content_target_uri(kind="resource")` takes it:
/// a URI the caller may name, of resource content ([`VPath::is_resource_target`]: 400
/// `INVALID_URI` with OpenViking's message otherwise), and in another user's tree only for
/// root (its `is_accessible`: an admin key reads every user's tree but adds into none of
/// them, 403).
fn target(who: &Identity, field: &str, raw: &str) -> Result<VPath, ApiError> {
    let p = who.path(raw)?;
    if !p.is_resource_target() {
        let reason = format!("{field} must target resource content");
        return Err(
            ApiError::new(Code::InvalidUri, format!("Invalid URI: {raw} ({reason})"))
                .with_details(json!({ "uri": raw, "reason": reason })),
        );
    }
    let others = {
        let mut c = p.components();
        match (c.next(), c.next()) {
            (Some("user"), Some(u)) => u != who.user,
            _ => false,
        }
    };
    if who.role != Role::Root && others {
        return Err(ApiError::denied(format!("Access denied for {}", p.uri()))
            .with_details(json!({ "resource": p.uri() })));
    }
    Ok(p)
}

/// The name an upload is added under when the request names none.
fn default_name(original: &str, zipped: bool) -> String {
    let base = std::path::Path::new(original)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("upload");
    match base
        .strip_suffix(".zip")
        .or_else(|| base.strip_suffix(".ZIP"))
    {
        Some(stem) if zipped && !stem.is_empty() => stem.to_string(),
        _ => base.to_string(),
    }
}

fn add_now(
    api: &Api,
    who: &Identity,
    b: &AddBody,
    to: Option<VPath>,
    parent: Option<VPath>,
) -> ApiResult {
    // Kept until the add has copied it in.
    let mut _staging = None;
    let (local, source): (PathBuf, String) = if let Some(id) = non_empty(&b.temp_file_id) {
        let uploads = upload::uploads()?;
        let up = uploads.take(id, who)?;
        // Unpacked only when the client says it zipped a directory (by the name it gives
        // the zip), never because the bytes are a zip: a .docx is stored as the .docx it is.
        let zipped = upload::is_directory_zip_name(&up.original) && upload::is_zip(&up.path);
        let name = match non_empty(&b.source_name) {
            Some(n) => n.to_string(),
            None => default_name(&up.original, zipped),
        };
        // One name: it is joined onto the staging directory.
        if name.contains('/') {
            return Err(ApiError::invalid(format!(
                "source_name {name:?}: a name, not a path"
            )));
        }
        crate::uri::check_component(&name, &name).map_err(|e| {
            ApiError::invalid(format!("source_name: {e}"))
                .with_details(json!({ "source_name": name }))
        })?;
        let staging = uploads.staging()?;
        let dest = staging.path().join(&name);
        if zipped {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o755)
                .create(&dest)
                .map_err(|e| ApiError::internal(e.to_string()))?;
            let ws = api.ops.workspace().internal_dir();
            let budget = upload::Budget::new(
                api.config.max_unpacked_bytes,
                api.config.max_unpacked_entries,
                &[staging.path(), &ws],
            );
            upload::unpack(&up.path, &dest, &budget)?;
        } else {
            std::fs::rename(&up.path, &dest).map_err(|e| ApiError::internal(e.to_string()))?;
        }
        _staging = Some(staging);
        (dest, name)
    } else {
        let path = non_empty(&b.path).expect("checked");
        if REMOTE.iter().any(|p| path.starts_with(p)) {
            return Err(unimplemented(
                "adding a remote source (vikingfs fetches nothing: upload the content with \
                 temp_upload)",
            ));
        }
        if who.role != Role::Root {
            return Err(ApiError::denied(
                "HTTP server only accepts remote resource URLs or temp-uploaded files; \
                 direct host filesystem paths are not allowed.",
            ));
        }
        let p = PathBuf::from(path);
        if !p.is_absolute() {
            return Err(ApiError::invalid(format!(
                "path {path:?}: a path on the server must be absolute"
            )));
        }
        (p, path.to_string())
    };
    let target_uri = to
        .as_ref()
        .or(parent.as_ref())
        .map_or_else(|| source.clone(), VPath::uri);
    let fail = |e| ApiError::from_ops(&target_uri, e);
    if b.create_parent {
        if let Some(dir) = &parent {
            match api.ops.mkdir(dir, true) {
                Ok(()) | Err(OpsError::Exists(_)) => {}
                Err(e) => return Err(fail(e)),
            }
        }
    }
    let is_dir = local.is_dir();
    let report = api
        .ops
        .add_resource(&local, &AddOptions { to, parent }, &mut |_, _| {})
        .map_err(fail)?;
    drop(_staging);
    if b.wait {
        wait_drained(api)?;
    }
    let mut meta = json!({
        "file_count": report.files,
        "changed_files": report.changed,
        "removed_entries": report.removed,
        "update": report.update,
    });
    if is_dir {
        meta["dir_name"] = Value::from(report.target.name());
    }
    // OpenViking's warning when the name asked for was taken and a `_N` one was made.
    let warnings: Vec<String> = report.warning().into_iter().collect();
    ok(json!({
        "status": "success",
        "errors": [],
        "warnings": warnings,
        "source_path": source,
        "root_uri": report.target.uri(),
        "meta": meta,
    }))
}
