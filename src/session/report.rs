//! What `vikingfs session list|show|commit` report, as JSON, built once for both faces: read
//! by a one-shot process or by the daemon the CLI asks over the workspace's socket. The CLI
//! prints its text from the same values, so both paths print the same.

use serde_json::{json, Value};

use super::layout::{self, SessionPath, DONE, FAILED, MEMORY_DIFF};
use super::meta::Meta;
use super::{fsx, SessionError, Sessions};

/// One row per session of `user`: `{session, uri, live_messages, live_invalid_lines,
/// archives, pending_commit}`.
pub fn list(sessions: &Sessions, user: &str) -> Result<Vec<Value>, SessionError> {
    let mut rows = Vec::new();
    for s in layout::list_sessions(&sessions.ws, user)? {
        let live = sessions.live_messages(&s)?;
        let archives = layout::archives_on_disk(&sessions.ws, &s)?;
        let meta = Meta::load(&sessions.ws, &s)?;
        rows.push(json!({
            "session": s.sid,
            "uri": s.dir.uri(),
            "live_messages": live.messages.len(),
            "live_invalid_lines": live.invalid.len(),
            "archives": archives.len(),
            "pending_commit": meta.pending_commit.map(|p| p.archive),
        }));
    }
    Ok(rows)
}

/// A session's live messages and its archives: `{session, uri, messages, invalid_lines,
/// archives: [{archive, uri, done, failed, memory_summary}], pending_commit}`.
pub fn show(sessions: &Sessions, s: &SessionPath) -> Result<Value, SessionError> {
    let ws = &sessions.ws;
    if !fsx::is_dir(ws, &s.dir)? {
        return Err(SessionError::NoSuchSession(s.dir.uri()));
    }
    let live = sessions.live_messages(s)?;
    let mut archives = Vec::new();
    for n in layout::archives_on_disk(ws, s)? {
        let done = fsx::exists(ws, &s.archive_file(n, DONE))?;
        let failed = fsx::exists(ws, &s.archive_file(n, FAILED))?;
        let diff = memory_diff(sessions, s, n);
        archives.push(json!({
            "archive": layout::archive_name(n),
            "uri": s.archive(n).uri(),
            "done": done,
            "failed": failed && !done,
            "memory_summary": diff.map(|d| d["summary"].clone()),
        }));
    }
    let meta = Meta::load(ws, s)?;
    Ok(json!({
        "session": s.sid,
        "uri": s.dir.uri(),
        "messages": live.messages,
        "invalid_lines": live.invalid,
        "archives": archives,
        "pending_commit": meta.pending_commit,
    }))
}

/// Archive `n` of `s` after its phase 2 ran (or did not): `{memory_diff, failed}`, `failed`
/// being `{error, path}` when phase 2 gave up on it.
pub fn archive_outcome(sessions: &Sessions, s: &SessionPath, n: u32) -> Value {
    let failed_p = s.archive_file(n, FAILED);
    let failed = sessions.ws.fs_path(&failed_p);
    let failure = fsx::read_opt(&sessions.ws, &failed_p)
        .ok()
        .flatten()
        .map(|b| {
            let v: Value = serde_json::from_slice(&b).unwrap_or_default();
            json!({
                "error": v["error"].as_str().unwrap_or("unknown error"),
                "path": failed,
            })
        });
    json!({
        "memory_diff": memory_diff(sessions, s, n),
        "failed": failure,
    })
}

/// The `memory_diff.json` phase 2 wrote for archive `n`, when it did.
fn memory_diff(sessions: &Sessions, s: &SessionPath, n: u32) -> Option<Value> {
    fsx::read_opt(&sessions.ws, &s.archive_file(n, MEMORY_DIFF))
        .ok()
        .flatten()
        .and_then(|b| serde_json::from_slice(&b).ok())
}
