//! Adding lines to a session's live `messages.jsonl`, and reading it back.
//!
//! An append takes the EXACT locks of the file and of `.meta.json` (so it never interleaves
//! with a commit, which holds the session's TREE lock), opens the file with `O_APPEND` and
//! writes the whole line in one `write(2)`, so concurrent appenders through the mount or a
//! plain `>>` never tear each other's lines; then it counts itself in `.meta.json`. Before
//! appending, it finishes any commit a crash left pending, so that recovery never has to tell
//! its own half-done trim from lines appended after the crash (see `trim.rs`).

use std::io::Write;

use crate::lock::LockKind;
use crate::semantic::memory::{parse_messages, Message, ParsedMessages};

use super::fsx;
use super::layout::SessionPath;
use super::meta::{now_rfc3339, Meta};
use super::{SessionError, Sessions};

/// A new message line with a fresh `id` and the current `time`.
pub fn new_message(role: &str, content: &str) -> Result<Message, SessionError> {
    if role.trim().is_empty() {
        return Err(SessionError::BadMessage("empty role".into()));
    }
    let mut m = Message::new(role, content);
    m.id = Some(format!("msg_{}", uuid::Uuid::new_v4().simple()));
    m.time = Some(now_rfc3339());
    Ok(m)
}

impl Sessions {
    /// Append one message line (no newline inside; one is added). The line must be a valid
    /// message: an append never introduces an invalid line itself.
    pub fn append_line(&self, s: &SessionPath, line: &str) -> Result<(), SessionError> {
        let line = line.strip_suffix('\n').unwrap_or(line);
        if line.contains('\n') {
            return Err(SessionError::BadMessage(
                "one message per line: the text holds a newline".into(),
            ));
        }
        Message::parse_line(line).map_err(SessionError::BadMessage)?;
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        let path = self.ws.fs_path(&s.messages());
        for _ in 0..5 {
            if Meta::load(&self.ws, s)?.pending_commit.is_some() {
                self.recover(s)?;
            }
            // EXACT on `.meta.json` too: the append counts itself in the metadata.
            let guard =
                self.lock(&[(s.messages(), LockKind::Exact), (s.meta(), LockKind::Exact)])?;
            // A commit may have crashed between our check and our lock.
            if Meta::load(&self.ws, s)?.pending_commit.is_some() {
                continue;
            }
            Meta::create_if_missing(&self.ws, s)?;
            // Queued before the write, under our locks: a job that runs at once waits for
            // them and reads the new line; a crash after the write cannot leave it unqueued.
            self.notify_written(&[s.messages(), s.meta()])?;
            let mut f = fsx::open_append(&self.ws, &s.messages())?;
            crate::crash_point!("session.add.before_write");
            let n = f.write(&buf).map_err(|e| SessionError::io(&path, e))?;
            if n != buf.len() {
                // (Disk full.) The partial line stays: it is archived verbatim as an invalid
                // line rather than cut, since a foreign writer may have appended after it.
                return Err(SessionError::io(
                    &path,
                    std::io::Error::other(format!("short write: {n} of {} bytes", buf.len())),
                ));
            }
            f.sync_data().map_err(|e| SessionError::io(&path, e))?;
            // The line is durable; the counters are advisory (a crash here leaves them one
            // short, and the next commit recounts `message_count`).
            let mut meta = Meta::load(&self.ws, s)?;
            meta.message_count += 1;
            meta.total_message_count = meta.total_message_count.map(|n| n + 1);
            meta.store_counts(&self.ws, s)?;
            drop(guard);
            return Ok(());
        }
        Err(SessionError::Diverged {
            path,
            reason: "a commit of this session keeps being left pending".into(),
        })
    }

    /// Create session `s` (its directory and `.meta.json`) and queue the metadata's record, as
    /// a first append would. False when it existed already (OpenViking's `create` answers
    /// that as "already exists"); racing creators cannot both get true.
    pub fn create(&self, s: &SessionPath) -> Result<bool, SessionError> {
        let guard = self.lock(&[(s.meta(), LockKind::Exact)])?;
        let created = Meta::create_if_missing(&self.ws, s)?;
        if created {
            self.notify_written(&[s.meta()])?;
        }
        drop(guard);
        Ok(created)
    }

    /// Append a message.
    pub fn add_message(&self, s: &SessionPath, m: &Message) -> Result<(), SessionError> {
        self.append_line(s, &m.to_line())
    }

    /// The live messages (valid ones and, separately, invalid lines verbatim).
    pub fn live_messages(&self, s: &SessionPath) -> Result<ParsedMessages, SessionError> {
        let bytes = fsx::read_opt(&self.ws, &s.messages())?.unwrap_or_default();
        Ok(parse_messages(&String::from_utf8_lossy(&bytes)))
    }
}
