//! `.meta.json`: OpenViking's session metadata, plus the record of a commit in progress.
//!
//! OpenViking's fields (`session_id`, `created_at`, `updated_at`, `created_by_user_id`,
//! `message_count`, `total_message_count`, `commit_count`, `last_commit_at`) keep its names and
//! meanings; fields vikingfs does not know are kept as they were read, so a workspace shared with
//! OpenViking keeps its metadata. The pending commit (`pending_commit`) is what makes phase 1
//! recoverable: it names the archive and the exact bytes of the live file being archived
//! (length and SHA-256 of that prefix), and, once trimming of the live file starts, the
//! [`TrimRecord`] that lets a later run finish it.
//!
//! Writers: a commit under the session's TREE lock, an append under the EXACT lock of
//! `.meta.json` (beside the one of `messages.jsonl`); the two exclude each other.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::workspace::Workspace;

use super::fsx;
use super::layout::SessionPath;
use super::trim::TrimRecord;
use super::SessionError;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by_user_id: Option<String>,
    /// Messages in the live file as of the last append or commit by vikingfs or OpenViking
    /// (lines appended by other writers are only counted at the next commit).
    #[serde(default)]
    pub message_count: u64,
    /// Messages ever added (OpenViking leaves it out for sessions older than the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_message_count: Option<u64>,
    /// Commits whose phase 1 finished.
    #[serde(default)]
    pub commit_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_commit_at: Option<String>,
    /// Memories written by this session's commits, per category and `total` (OpenViking's
    /// counters), recounted from the archives' `memory_diff.json` so a resumed job never
    /// counts twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memories_extracted: Option<std::collections::BTreeMap<String, u64>>,
    /// Lines the last commit left in the live file (OpenViking's `keep_recent_count`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_recent_count: Option<u64>,
    /// The newest archive whose phase 1 finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_archive: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_commit: Option<PendingCommit>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A phase 1 that started and has not been marked ready.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingCommit {
    /// `history/archive_NNN` being written.
    pub archive: u32,
    pub state: PendingState,
    /// Bytes of the live `messages.jsonl` that go into the archive: always its start.
    pub prefix_len: u64,
    pub prefix_sha256: String,
    /// How the live file is being rewritten (set in `trimming`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trim: Option<TrimRecord>,
    pub started_at: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PendingState {
    /// The archive may be partly written; the live file is untouched.
    Preparing,
    /// The archive is complete and its job enqueued; the live file may be partly trimmed.
    Trimming,
}

impl Meta {
    /// Read `.meta.json`; a missing file is an empty record.
    pub fn load(ws: &Workspace, s: &SessionPath) -> Result<Meta, SessionError> {
        match fsx::read_opt(ws, &s.meta())? {
            None => Ok(Meta::default()),
            Some(b) => serde_json::from_slice(&b).map_err(|source| SessionError::Meta {
                path: ws.fs_path(&s.meta()),
                source,
            }),
        }
    }

    /// Replace `.meta.json` atomically. Callers hold the session's TREE lock or the EXACT
    /// lock of `.meta.json`.
    pub fn store(&mut self, ws: &Workspace, s: &SessionPath) -> Result<(), SessionError> {
        self.session_id.get_or_insert_with(|| s.sid.clone());
        self.updated_at = Some(now_rfc3339());
        let mut text = serde_json::to_vec_pretty(self).expect("Meta always serialises");
        text.push(b'\n');
        fsx::atomic_write(ws, &s.meta(), &text)
    }

    /// [`store`](Self::store) for a change only counters depend on (an append): no directory
    /// fsync, so a power loss may bring back the previous counts, never a broken file.
    pub fn store_counts(&mut self, ws: &Workspace, s: &SessionPath) -> Result<(), SessionError> {
        self.updated_at = Some(now_rfc3339());
        let mut text = serde_json::to_vec_pretty(self).expect("Meta always serialises");
        text.push(b'\n');
        fsx::atomic_write_advisory(ws, &s.meta(), &text)
    }

    /// Create `.meta.json` for a new session unless it exists: link(2) of a complete temp file
    /// cannot replace a file another process created meanwhile, so no lock is needed. True
    /// when this call created it (exactly one of several racing creators gets true).
    pub fn create_if_missing(ws: &Workspace, s: &SessionPath) -> Result<bool, SessionError> {
        if fsx::exists(ws, &s.meta())? {
            return Ok(false);
        }
        let now = now_rfc3339();
        let meta = Meta {
            session_id: Some(s.sid.clone()),
            created_at: Some(now.clone()),
            updated_at: Some(now),
            created_by_user_id: Some(s.user().to_string()),
            total_message_count: Some(0),
            ..Meta::default()
        };
        let mut text = serde_json::to_vec_pretty(&meta).expect("Meta always serialises");
        text.push(b'\n');
        fsx::create_dir_durable(ws, &s.dir)?;
        let tmp = tempfile::Builder::new()
            .prefix("session-meta-")
            .tempfile_in(ws.tmp_dir())
            .map_err(|e| SessionError::io(ws.tmp_dir(), e))?;
        std::io::Write::write_all(&mut tmp.as_file(), &text)
            .and_then(|_| tmp.as_file().sync_all())
            .map_err(|e| SessionError::io(tmp.path(), e))?;
        fsx::link_new(ws, tmp.as_file(), &s.meta())
    }
}

/// Now, UTC, as `2026-11-29T21:05:07.123Z`.
pub fn now_rfc3339() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format_rfc3339(d.as_secs(), d.subsec_millis())
}

/// `secs.millis` after the epoch, UTC, in RFC 3339 with milliseconds (OpenViking's format).
pub fn format_rfc3339(secs: u64, millis: u32) -> String {
    let ms = i64::try_from(secs)
        .ok()
        .and_then(|s| s.checked_mul(1000))
        .and_then(|ms| ms.checked_add(i64::from(millis)));
    match ms.and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok()) {
        Some(t) => t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        // Past jiff's range (year 9999): the latest time it can write.
        None => jiff::Timestamp::MAX
            .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_unknown_fields_and_formats_time() {
        let m: Meta = serde_json::from_str(
            r#"{"session_id":"s","user":{"id":"u"},"commit_count":2,"pending_commit":{"archive":3,"state":"trimming","prefix_len":10,"prefix_sha256":"ab","started_at":"t"}}"#,
        )
        .unwrap();
        assert_eq!(m.extra["user"]["id"], "u");
        assert_eq!(
            m.pending_commit.as_ref().unwrap().state,
            PendingState::Trimming
        );
        let back = serde_json::to_value(&m).unwrap();
        assert_eq!(back["user"]["id"], "u");
        assert_eq!(format_rfc3339(1_795_953_600, 7), "2026-11-29T12:00:00.007Z");
    }
}
