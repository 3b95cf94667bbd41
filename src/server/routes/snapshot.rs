//! OpenViking 0.5.2's snapshot routes (`openviking/server/routers/snapshot.py`), served over
//! the history: `GET /api/v1/snapshot/log`, `GET /api/v1/snapshot/show`,
//! `GET /api/v1/snapshot/diff` and `POST /api/v1/snapshot/restore`, where their shapes fit.
//!
//! OpenViking's snapshots are commits someone made (`ov snapshot commit`); here every change
//! is kept, so every change is a commit: one per run of a process's entries (an `rm -rf` is
//! one), newest first, its oid the state after it (40 hex digits naming the time after it and
//! its last entry: `commit_oid`) and its parent the one before. A ref is such an oid, an RFC 3339 time, or `main`
//! / `HEAD` (the live tree). A file at a ref is read as the mount's `.history/@T/` shows it
//! (`ops::PastView`); a restore is the rewind `vikingfs undo --since` runs (the same locked
//! operation, recorded, undoable). `commit` has nothing to do (everything is kept already)
//! and answers the HEAD commit; `diff-paths`, `versions` and the ignore file are not served.
//!
//! Account-scoped like every route: a caller sees only entries under paths it may see, a user
//! key must name the paths (OpenViking refuses log, show and restore without them too), and a
//! restore of a directory holding other users' trees rewinds only the caller's part of it.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use super::fs::repeated;
use super::{get, post, Routes};
use crate::fs::PastSource;
use crate::journal::Recorded;
use crate::ops::{rfc3339, PastView};
use crate::server::auth::{Identity, Role};
use crate::server::extract::{Body, Params};
use crate::server::reply::{ok, ApiError, ApiResult, Code};
use crate::server::{blocking, Api};
use crate::uri::VPath;

/// At most this many paths filter a log (OpenViking's `MAX_LOG_FILTER_PATHS`).
const MAX_LOG_FILTER_PATHS: usize = 32;

/// Bytes of a file a diff reads at most (OpenViking's `SNAPSHOT_DIFF_MAX_FILE_BYTES`).
const DIFF_MAX_FILE_BYTES: u64 = 1 << 20;

pub fn routes() -> Routes {
    Routes::new()
        .route("/api/v1/snapshot/commit", post(commit))
        .route("/api/v1/snapshot/log", get(log))
        .route("/api/v1/snapshot/show", get(show))
        .route("/api/v1/snapshot/diff", get(diff))
        .route("/api/v1/snapshot/restore", post(restore))
}

/// A point a ref names: `None` for the live tree.
fn point_of(r: &str) -> Result<Option<i64>, ApiError> {
    let r = r.trim();
    if matches!(r, "main" | "HEAD" | "refs/heads/main") {
        return Ok(None);
    }
    if r.len() == 40 && r.bytes().all(|b| b.is_ascii_hexdigit()) {
        if let Some(ms) = oid_time(r) {
            return Ok(Some(ms));
        }
        // The form an older vikingfs gave: the time alone, as 40 hex digits.
        if let Ok(ms) = i64::from_str_radix(r, 16) {
            return Ok(Some(ms));
        }
    }
    if let Ok(t) = r.parse::<jiff::Timestamp>() {
        return Ok(Some(t.as_millisecond()));
    }
    Err(ref_not_found(r))
}

fn ref_not_found(r: &str) -> ApiError {
    ApiError::new(Code::NotFound, format!("Resource not found: {r}"))
        .with_details(json!({ "resource": r, "resource_type": "git_ref" }))
}

/// The oid of the state at `ms` (no change of its own: `seq` 0).
fn oid(ms: i64) -> String {
    commit_oid(ms, 0)
}

/// The oid of the state after the change ending at `ms` whose last history entry is `seq`:
/// 40 hex digits, `MIX TIME SEQ` — a mix of both (16 digits), the time in milliseconds (12)
/// and the entry's id (12). The mix comes first because clients show an oid by its first 12
/// digits (`ov snapshot log`): the time alone, zero-padded, showed `000000000000` for every
/// commit; two changes of one millisecond differ by their entry. [`oid_time`] reads the
/// time back, and refuses 40 digits whose mix does not match.
fn commit_oid(ms: i64, seq: i64) -> String {
    let (t, n) = (ms as u64 & 0xffff_ffff_ffff, seq as u64 & 0xffff_ffff_ffff);
    format!("{:016x}{t:012x}{n:012x}", oid_mix(t, n))
}

/// splitmix64's finaliser over the time and the entry: every bit of both moves the result.
fn oid_mix(t: u64, n: u64) -> u64 {
    let mut z = t ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The time of a [`commit_oid`]; `None` when `r` is not one.
fn oid_time(r: &str) -> Option<i64> {
    let mix = u64::from_str_radix(r.get(..16)?, 16).ok()?;
    let t = u64::from_str_radix(r.get(16..28)?, 16).ok()?;
    let n = u64::from_str_radix(r.get(28..40)?, 16).ok()?;
    (oid_mix(t, n) == mix).then_some(t as i64)
}

/// The branch every ref is on: there is one history.
fn check_branch(branch: &str) -> Result<(), ApiError> {
    match branch {
        "main" | "HEAD" | "refs/heads/main" => Ok(()),
        b => Err(ref_not_found(b)),
    }
}

/// The paths a request names, each one the caller may see; a user key must name some.
fn scoped(who: &Identity, uris: &[String], what: &str) -> Result<Vec<VPath>, ApiError> {
    if uris.is_empty() && who.role == Role::User {
        return Err(ApiError::denied(format!(
            "Snapshot {what} requires explicit paths"
        )));
    }
    uris.iter().map(|u| who.path(u)).collect()
}

/// The commits of `entries` (in the order recorded) that touch `under` (any of them; all
/// when empty) and paths `who` may see, newest first, each with the time after it.
fn commits(entries: &[Recorded], under: &[VPath], who: &Identity) -> Vec<(i64, Value)> {
    let visible = |r: &Recorded| {
        let paths = std::iter::once(r.entry.path.as_str()).chain(r.entry.new_path.as_deref());
        paths.filter_map(|p| VPath::from_rel(p).ok()).any(|p| {
            who.may_see(&p) && (under.is_empty() || under.iter().any(|u| p.starts_with(u)))
        })
    };
    let mut out = Vec::new();
    let mut parent: Option<String> = None;
    for change in crate::ops::changes(entries) {
        let mine: Vec<&Recorded> = change.iter().filter(|r| visible(r)).collect();
        let last = &change[change.len() - 1];
        let (end, oid) = (last.at_ms, commit_oid(last.at_ms, last.id));
        // The state before the oldest change is a state too (what the files were then).
        let before = parent.unwrap_or_else(|| self::oid(change[0].at_ms - 1));
        if !mine.is_empty() {
            out.push((end, commit_json(&mine, end, &oid, &before)));
        }
        parent = Some(oid);
    }
    out.reverse();
    out
}

/// One commit: a change, its oid the state after it, its parent the state before it.
fn commit_json(change: &[&Recorded], end: i64, oid: &str, parent: &str) -> Value {
    let first = change[0];
    let who = first.entry.cmd.clone().unwrap_or_else(|| "vikingfs".into());
    let email = match first.entry.pid {
        Some(pid) => format!("pid-{pid}@vikingfs"),
        None => "vikingfs@localhost".into(),
    };
    let signature = json!({ "name": who, "email": email, "time": rfc3339(end) });
    let message = match change {
        [one] => format!("{} viking://{}", one.entry.op, one.entry.path),
        many => {
            let mut ops: Vec<&str> = many.iter().map(|r| r.entry.op.as_str()).collect();
            ops.sort();
            ops.dedup();
            format!(
                "{} changes ({}) from viking://{}",
                many.len(),
                ops.join(", "),
                first.entry.path
            )
        }
    };
    json!({
        "oid": oid,
        "tree": oid,
        "parents": [parent],
        "author": signature,
        "committer": signature,
        "message": message,
        "time": rfc3339(end),
        "paths": change.iter().map(|r| format!("viking://{}", r.entry.path)).collect::<Vec<_>>(),
    })
}

/// Every entry of the history, in the order recorded.
fn all_entries(api: &Api) -> Result<Vec<Recorded>, ApiError> {
    let mut all = api
        .ops
        .history(None, 0)
        .map_err(|e| ApiError::internal(crate::error::Chain(&e).to_string()))?;
    all.sort_by_key(|r| r.id);
    Ok(all)
}

/// The commit the state at `at` is (`None`: the newest), among those `who` sees under `under`.
fn commit_at(
    api: &Api,
    who: &Identity,
    under: &[VPath],
    at: Option<i64>,
) -> Result<Option<Value>, ApiError> {
    let all = all_entries(api)?;
    Ok(commits(&all, under, who)
        .into_iter()
        .find(|(end, _)| at.is_none_or(|t| *end <= t))
        .map(|(_, c)| c))
}

#[derive(Deserialize)]
struct CommitBody {
    #[allow(dead_code)]
    message: String,
    #[serde(default)]
    paths: Vec<String>,
    #[serde(default = "main_branch")]
    branch: String,
}

fn main_branch() -> String {
    "main".into()
}

/// Everything is kept as it changes: a commit has nothing to add, and answers the newest.
async fn commit(
    State(api): State<Arc<Api>>,
    who: Identity,
    Body(b): Body<CommitBody>,
) -> ApiResult {
    check_branch(&b.branch)?;
    let under = scoped(&who, &b.paths, "commit")?;
    blocking(move || {
        let head = commit_at(&api, &who, &under, None)?;
        ok(head.unwrap_or_else(
            || json!({ "oid": oid(crate::sql::now_ms()), "parents": [], "message": "" }),
        ))
    })
    .await
}

#[derive(Deserialize)]
struct LogQuery {
    #[serde(default = "main_branch")]
    branch: String,
    #[serde(default = "twenty")]
    limit: usize,
}

fn twenty() -> usize {
    20
}

async fn log(
    State(api): State<Arc<Api>>,
    who: Identity,
    Params(q): Params<LogQuery>,
    RawQuery(raw): RawQuery,
) -> ApiResult {
    check_branch(&q.branch)?;
    if !(1..=500).contains(&q.limit) {
        return Err(ApiError::invalid("limit must be between 1 and 500"));
    }
    let uris = repeated(&raw, "paths");
    if uris.len() > MAX_LOG_FILTER_PATHS {
        return Err(ApiError::invalid(format!(
            "at most {MAX_LOG_FILTER_PATHS} paths filter a log"
        )));
    }
    let under = scoped(&who, &uris, "log")?;
    blocking(move || {
        let all = all_entries(&api)?;
        let c: Vec<Value> = commits(&all, &under, &who)
            .into_iter()
            .take(q.limit)
            .map(|(_, c)| c)
            .collect();
        ok(c)
    })
    .await
}

/// The bytes `p` held at `at` (`None`: now), or `None` when it was no file then. Read as
/// every route reads for a remote caller: no symlink followed anywhere on the way (one made
/// through the mount, or kept in a tree, must not hand the caller the host's files).
fn read_at(api: &Api, at: Option<i64>, p: &VPath, limit: u64) -> Result<Option<Vec<u8>>, ApiError> {
    let ws = api.ops.workspace();
    let file = match at {
        Some(t) => PastView::new(api.ops.locked().clone())
            .then(t, p)
            .map_err(|e| ApiError::internal(format!("history: {e}")))?,
        None => Some(ws.fs_path(p)),
    };
    // The live tree and the kept content both lie below the workspace's root.
    let Some(rel) = file.as_deref().and_then(|f| f.strip_prefix(ws.root()).ok()) else {
        return Ok(None);
    };
    let io = |e: std::io::Error| ApiError::internal(format!("read {}: {e}", p.uri()));
    let root = crate::sys::DataRoot::open(ws.root()).map_err(io)?;
    // Only a regular file is opened at all (a FIFO or device node there is no content).
    let (mut file, st) = match root.open_regular_beneath(rel.as_os_str().as_encoded_bytes()) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(super::fs::symlink(p)),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOENT | libc::ENOTDIR | libc::EISDIR | libc::ENXIO)
            ) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(io(e)),
    };
    if st.st_size as u64 > limit {
        return Err(ApiError::new(
            Code::ResourceExhausted,
            format!("snapshot file size limit exceeded ({limit} bytes)"),
        )
        .with_details(json!({ "limit_bytes": limit, "path": p.uri() })));
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut file, &mut bytes).map_err(io)?;
    Ok(Some(bytes))
}

fn blob_not_found(uri: &str) -> ApiError {
    ApiError::new(Code::NotFound, format!("Resource not found: {uri}"))
        .with_details(json!({ "resource": uri, "resource_type": "git_blob" }))
}

#[derive(Deserialize)]
struct ShowQuery {
    target_ref: String,
    path: Option<String>,
}

async fn show(
    State(api): State<Arc<Api>>,
    who: Identity,
    Params(q): Params<ShowQuery>,
) -> Result<Response, ApiError> {
    let at = point_of(&q.target_ref)?;
    let Some(uri) = q.path.clone() else {
        // A commit's metadata names every path it touched: a user key must name one.
        let under = scoped(&who, &[], "show")?;
        let target = q.target_ref.clone();
        let c = blocking(move || {
            commit_at(&api, &who, &under, at)?.ok_or_else(|| ref_not_found(&target))
        })
        .await?;
        return Ok(axum::Json(json!({ "status": "ok", "result": c })).into_response());
    };
    let p = who.path(&uri)?;
    let bytes = blocking(move || read_at(&api, at, &p, u64::MAX)).await?;
    let bytes = bytes.ok_or_else(|| blob_not_found(&uri))?;
    let size = bytes.len().to_string();
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (
                header::HeaderName::from_static("x-snapshot-oid"),
                oid(at.unwrap_or_else(crate::sql::now_ms)),
            ),
            (header::HeaderName::from_static("x-snapshot-size"), size),
        ],
        bytes,
    )
        .into_response())
}

#[derive(Deserialize)]
struct DiffQuery {
    path: String,
    from: Option<String>,
    to: String,
}

async fn diff(
    State(api): State<Arc<Api>>,
    who: Identity,
    Params(q): Params<DiffQuery>,
) -> ApiResult {
    let p = who.path(&q.path)?;
    let from = q.from.as_deref().map(point_of).transpose()?;
    let to = point_of(&q.to)?;
    blocking(move || {
        let before = match from {
            Some(at) => read_at(&api, at, &p, DIFF_MAX_FILE_BYTES)?,
            None => None,
        };
        let after = read_at(&api, to, &p, DIFF_MAX_FILE_BYTES)?;
        if before.is_none() && after.is_none() {
            return Err(blob_not_found(&q.path));
        }
        let change_type = match (&before, &after) {
            (None, Some(_)) => "added",
            (Some(_), None) => "deleted",
            (Some(a), Some(b)) if a == b => "unchanged",
            _ => "modified",
        };
        let text =
            |b: &Option<Vec<u8>>| String::from_utf8_lossy(b.as_deref().unwrap_or(&[])).into_owned();
        let (a, b) = (text(&before), text(&after));
        let from_oid = from
            .map(|at| oid(at.unwrap_or_else(crate::sql::now_ms)))
            .unwrap_or_default();
        let to_oid = oid(to.unwrap_or_else(crate::sql::now_ms));
        let diff_text = similar::TextDiff::from_lines(&a, &b)
            .unified_diff()
            .header(
                &format!("{}@{from_oid}", q.path),
                &format!("{}@{to_oid}", q.path),
            )
            .to_string();
        ok(json!({
            "path": q.path,
            "from_commit": from_oid,
            "to_commit": to_oid,
            "change_type": change_type,
            "diff_text": diff_text,
        }))
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RestoreBody {
    project_dir: Option<String>,
    source_commit: Option<String>,
    path: Option<String>,
    #[allow(dead_code)]
    restore_version: Option<String>,
    #[allow(dead_code)]
    current_version: Option<String>,
    #[serde(default = "main_branch")]
    branch: String,
    #[serde(default)]
    dry_run: bool,
    #[allow(dead_code)]
    message: Option<String>,
    #[allow(dead_code)]
    author_name: Option<String>,
    #[allow(dead_code)]
    author_email: Option<String>,
}

/// A forward restore: `project_dir` (a user key must name one; root may rewind every scope)
/// back to `source_commit` by the locked rewind, itself recorded and undoable.
async fn restore(
    State(api): State<Arc<Api>>,
    who: Identity,
    Body(b): Body<RestoreBody>,
) -> ApiResult {
    if b.path.is_some() {
        return Err(ApiError::new(
            Code::Unimplemented,
            "restoring a Compile output version is not served: restore its directory with source_commit",
        ));
    }
    check_branch(&b.branch)?;
    let source = b
        .source_commit
        .as_deref()
        .ok_or_else(|| ApiError::invalid("source_commit is required"))?;
    let Some(at) = point_of(source)? else {
        return ok(json!({ "result": "noop", "oid": oid(crate::sql::now_ms()) }));
    };
    let dirs: Vec<String> = b.project_dir.clone().into_iter().collect();
    let mut under = scoped(&who, &dirs, "restore")?;
    if under.is_empty() {
        under = crate::uri::SCOPES
            .iter()
            .filter_map(|s| VPath::from_rel(s).ok())
            .collect();
    }
    // A directory holding other users' trees is rewound only where the caller sees it whole:
    // a rewind of `viking://user` by one user is a rewind of its own tree, and names (and
    // changes) nothing of the others'.
    let under: Vec<VPath> = under.iter().flat_map(|p| who.visible_trees(p)).collect();
    let dry_run = b.dry_run;
    blocking(move || {
        let (mut written, mut deleted, mut conflicts) = (Vec::new(), Vec::new(), Vec::new());
        for p in &under {
            let r = api
                .ops
                .rewind(p, at, dry_run)
                .map_err(|e| ApiError::from_ops(&p.uri(), e))?;
            written.extend(r.restored.into_iter().map(|(u, _)| u));
            written.extend(r.moved.iter().map(|(_, back)| back.clone()));
            deleted.extend(r.removed);
            deleted.extend(r.moved.into_iter().map(|(from, _)| from));
            conflicts.extend(
                r.conflicts
                    .into_iter()
                    .map(|(u, why)| json!({"uri": u, "reason": why})),
            );
        }
        let result = match (dry_run, written.is_empty() && deleted.is_empty()) {
            (_, true) => "noop",
            (true, false) => "dry_run",
            (false, false) => "applied",
        };
        let mut v = json!({
            "result": result,
            "source_commit": oid(at),
            "oid": oid(crate::sql::now_ms()),
            "conflicts": conflicts,
        });
        if dry_run {
            v["to_write"] = json!(written);
            v["to_delete"] = json!(deleted);
        } else {
            v["written_paths"] = json!(written);
            v["deleted_paths"] = json!(deleted);
        }
        ok(v)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_oids_differ_in_their_first_digits_and_read_back() {
        let ms = 1_765_000_000_000;
        let (a, b, c) = (commit_oid(ms, 7), commit_oid(ms, 8), commit_oid(ms + 1, 7));
        for o in [&a, &b, &c] {
            assert_eq!(o.len(), 40, "{o}");
            assert_eq!(
                point_of(o).unwrap(),
                Some(
                    o.get(16..28)
                        .map(|t| i64::from_str_radix(t, 16).unwrap())
                        .unwrap()
                )
            );
        }
        // What `ov snapshot log` shows: the first 12 digits, distinct, not zeros.
        let shown: std::collections::HashSet<&str> =
            [&a, &b, &c].iter().map(|o| &o[..12]).collect();
        assert_eq!(shown.len(), 3, "{a} {b} {c}");
        assert!(!a.starts_with("000000"), "{a}");
        assert_eq!(point_of(&a).unwrap(), Some(ms));
        // An older vikingfs's oid (the time, zero-padded) still names its time.
        assert_eq!(point_of(&format!("{ms:040x}")).unwrap(), Some(ms));
    }
}
