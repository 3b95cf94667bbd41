//! Phase 2 of a commit: the `session_commit` job handler, given to the worker pool as a value.
//!
//! For archive `NNN` of a session, in this order (each step a crash point, each skipped or
//! re-done harmlessly when a resumed job finds it done):
//! 1. finish phase 1 if it is still pending for this archive (a crash after the enqueue);
//! 2. the archive's `.abstract.md` / `.overview.md` (a summary of the conversation);
//! 3. `memory_diff.json`: memories extracted from the archive and planned against the memory
//!    files as they are — persisted *before* any memory file is written, so a resumed job
//!    re-applies the same plan instead of extracting again (a chat model may answer otherwise);
//! 4. each memory file under `viking://user/{uid}/memories/`, merged under its EXACT lock
//!    (merging only appends fact lines that are absent, so re-applying is a no-op);
//! 5. indexing of the archive and the memories;
//! 6. `.done`, last: a job that finds it returns at once.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::lock::{LockError, LockKind};
use crate::queue::{Job, JobError, JobHandler};
use crate::semantic::memory::{
    apply_diff_entry, parse_messages, plan_memory_writes, Date, ExtractContext, MemoryDiff,
};
use crate::semantic::summary::{Child, DirInput};
use crate::semantic::{MemoryExtractor, SemanticError, Summarizer};
use crate::uri::VPath;

use super::fsx;
use super::layout::{SessionPath, ABSTRACT, DONE, FAILED, MEMORY_DIFF, MESSAGES, OVERVIEW};
use super::meta::{now_rfc3339, Meta};
use super::{SessionError, Sessions, LOCK_WAIT};

/// What one run of phase 2 did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Phase2Report {
    /// The archive was already done: nothing was written.
    pub already_done: bool,
    pub adds: usize,
    pub updates: usize,
    pub invalid_lines: usize,
}

/// Why phase 2 stopped.
#[derive(Debug, thiserror::Error)]
pub enum Phase2Error {
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error("extractor/summariser: {0}")]
    Semantic(#[from] SemanticError),
    #[error("job payload: {0}")]
    Payload(String),
    #[error("{0}: archive has no messages.jsonl")]
    NoArchive(String),
}

impl Phase2Error {
    fn is_permanent(&self) -> bool {
        match self {
            Phase2Error::Payload(_) | Phase2Error::NoArchive(_) => true,
            Phase2Error::Semantic(e) => !e.is_retryable(),
            Phase2Error::Session(SessionError::Diverged { .. } | SessionError::Meta { .. }) => true,
            Phase2Error::Session(_) => false,
        }
    }
}

/// The `session_commit` job handler.
pub struct SessionCommitHandler {
    sessions: Sessions,
    extractor: Arc<dyn MemoryExtractor>,
    summarizer: Arc<dyn Summarizer>,
}

impl SessionCommitHandler {
    pub fn new(
        sessions: Sessions,
        extractor: Arc<dyn MemoryExtractor>,
        summarizer: Arc<dyn Summarizer>,
    ) -> SessionCommitHandler {
        SessionCommitHandler {
            sessions,
            extractor,
            summarizer,
        }
    }

    /// Run phase 2 of archive `n` of `s`.
    pub fn run(&self, s: &SessionPath, n: u32) -> Result<Phase2Report, Phase2Error> {
        let ws = &self.sessions.ws;
        crate::crash_point!("session.job.started");
        if Meta::load(ws, s)?
            .pending_commit
            .is_some_and(|p| p.archive == n)
        {
            self.sessions.recover(s)?;
        }
        if ws.fs_path(&s.archive_file(n, DONE)).exists() {
            return Ok(Phase2Report {
                already_done: true,
                ..Default::default()
            });
        }
        let archive_path = ws.fs_path(&s.archive_file(n, MESSAGES));
        let bytes = fsx::read_opt(&archive_path)?
            .ok_or_else(|| Phase2Error::NoArchive(s.archive(n).uri()))?;
        let text = String::from_utf8_lossy(&bytes);
        let parsed = parse_messages(&text);

        self.summarize(s, n, &text)?;
        crate::crash_point!("session.job.summarized");

        let diff = match self.load_diff(s, n)? {
            Some(d) => d,
            None => {
                let ctx = ExtractContext {
                    user: s.user().to_string(),
                    archive_date: archive_date(&archive_path),
                };
                let memories = self.extractor.extract(&ctx, &parsed.messages)?;
                let mem_root = s.memories();
                let (_, diff) =
                    plan_memory_writes(&memories, &mem_root.uri(), parsed.invalid.len(), |rel| {
                        read_text(ws, &mem_root, rel)
                    });
                let mut text = serde_json::to_vec_pretty(&diff).expect("a diff serialises");
                text.push(b'\n');
                fsx::atomic_write(ws, &ws.fs_path(&s.archive_file(n, MEMORY_DIFF)), &text)?;
                diff
            }
        };
        crate::crash_point!("session.job.diff_written");

        let mut written = Vec::new();
        for entry in diff.adds.iter().chain(&diff.updates) {
            let p = s
                .memories()
                .join_rel(&entry.rel_path)
                .map_err(SessionError::from)?;
            let guard = self
                .sessions
                .locks
                .acquire(&[(p.clone(), LockKind::Exact)], LOCK_WAIT)
                .map_err(SessionError::from)?;
            let path = ws.fs_path(&p);
            let existing = fsx::read_opt(&path)?.map(|b| String::from_utf8_lossy(&b).into_owned());
            if let Some(content) = apply_diff_entry(existing.as_deref(), entry) {
                fsx::atomic_write(ws, &path, content.as_bytes())?;
            }
            drop(guard);
            written.push(p);
            crate::crash_point!("session.job.memory_written");
        }

        self.index(s, n, &written)?;
        crate::crash_point!("session.job.indexed");

        let done = json!({
            "archive": n,
            "completed_at": now_rfc3339(),
            "adds": diff.summary.total_adds,
            "updates": diff.summary.total_updates,
            "invalid_lines": diff.summary.invalid_lines,
        });
        fsx::atomic_write(
            ws,
            &ws.fs_path(&s.archive_file(n, DONE)),
            format!("{done}\n").as_bytes(),
        )?;
        crate::crash_point!("session.job.done");
        Ok(Phase2Report {
            already_done: false,
            adds: diff.summary.total_adds,
            updates: diff.summary.total_updates,
            invalid_lines: diff.summary.invalid_lines,
        })
    }

    /// The archive's summary sidecars, unless both exist (a resumed job keeps them).
    fn summarize(&self, s: &SessionPath, n: u32, text: &str) -> Result<(), Phase2Error> {
        let ws = &self.sessions.ws;
        let abs = ws.fs_path(&s.archive_file(n, ABSTRACT));
        let ovw = ws.fs_path(&s.archive_file(n, OVERVIEW));
        if abs.exists() && ovw.exists() {
            return Ok(());
        }
        let input = DirInput {
            uri: s.archive(n).uri(),
            children: vec![Child::file(MESSAGES, conversation_text(text))],
        };
        let summary = self.summarizer.summarize(&input)?.enforce_limits();
        fsx::atomic_write(ws, &ovw, summary.overview_md.as_bytes())?;
        fsx::atomic_write(ws, &abs, summary.abstract_md.as_bytes())?;
        Ok(())
    }

    fn load_diff(&self, s: &SessionPath, n: u32) -> Result<Option<MemoryDiff>, Phase2Error> {
        let path = self.sessions.ws.fs_path(&s.archive_file(n, MEMORY_DIFF));
        match fsx::read_opt(&path)? {
            None => Ok(None),
            // A diff that does not parse was not written by us (ours are renamed in whole):
            // extracting again and replacing it is the only way forward.
            Some(b) => Ok(serde_json::from_slice(&b).ok()),
        }
    }

    /// Make the archive and the memories written searchable.
    fn index(&self, _s: &SessionPath, _n: u32, _memories: &[VPath]) -> Result<(), Phase2Error> {
        Ok(())
    }

    /// A job that can never succeed leaves `.failed.json` in its archive, as OpenViking does.
    fn record_failure(&self, s: &SessionPath, n: u32, err: &Phase2Error) {
        let ws = &self.sessions.ws;
        if !ws.fs_path(&s.archive(n)).is_dir() {
            return;
        }
        let body = json!({ "error": err.to_string(), "failed_at": now_rfc3339() });
        let _ = fsx::atomic_write(
            ws,
            &ws.fs_path(&s.archive_file(n, FAILED)),
            format!("{body}\n").as_bytes(),
        );
    }
}

impl JobHandler for SessionCommitHandler {
    fn handle(&self, job: &Job) -> Result<(), JobError> {
        let (s, n) = match parse_payload(&job.payload) {
            Ok(v) => v,
            Err(e) => return Err(JobError::Permanent(e.to_string())),
        };
        match self.run(&s, n) {
            Ok(r) => {
                tracing::info!(session = %s.dir.uri(), archive = n, adds = r.adds, updates = r.updates, "session commit phase 2 done");
                Ok(())
            }
            Err(e) if e.is_permanent() => {
                self.record_failure(&s, n, &e);
                Err(JobError::Permanent(e.to_string()))
            }
            Err(e) => Err(JobError::Retry(e.to_string())),
        }
    }
}

fn parse_payload(v: &Value) -> Result<(SessionPath, u32), Phase2Error> {
    let dir = v
        .get("session")
        .and_then(Value::as_str)
        .ok_or_else(|| Phase2Error::Payload("no \"session\"".into()))?;
    let n = v
        .get("archive")
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n > 0)
        .ok_or_else(|| Phase2Error::Payload("no valid \"archive\"".into()))?;
    let dir = VPath::from_rel(dir).map_err(|e| Phase2Error::Payload(e.to_string()))?;
    let s = SessionPath::from_dir(dir).map_err(|e| Phase2Error::Payload(e.to_string()))?;
    Ok((s, n))
}

/// A memory file's text, relative to `memories/`.
fn read_text(ws: &crate::workspace::Workspace, root: &VPath, rel: &str) -> Option<String> {
    let p = root.join_rel(rel).ok()?;
    std::fs::read(ws.fs_path(&p))
        .ok()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// The conversation as `role: content` lines, what a summary should talk about (not JSON).
fn conversation_text(jsonl: &str) -> String {
    let parsed = parse_messages(jsonl);
    let mut out = String::new();
    for m in &parsed.messages {
        out.push_str(&m.role);
        out.push_str(": ");
        out.push_str(&m.content);
        out.push('\n');
    }
    for l in &parsed.invalid {
        out.push_str(&l.text);
        out.push('\n');
    }
    out
}

/// The day the archive was written (its file's mtime, stable across resumed runs).
fn archive_date(path: &std::path::Path) -> Option<Date> {
    let t = std::fs::metadata(path).ok()?.modified().ok()?;
    let secs = t.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    Some(Date::from_days((secs / 86_400) as i64))
}

impl From<LockError> for Phase2Error {
    fn from(e: LockError) -> Self {
        Phase2Error::Session(SessionError::Lock(e))
    }
}

impl SessionCommitHandler {
    /// The handler with the extractor and summariser the configuration selects (the chat ones
    /// when `vlm` is set, else the local rule-based ones).
    pub fn from_config(
        sessions: Sessions,
        config: &crate::config::Config,
    ) -> Result<SessionCommitHandler, Phase2Error> {
        let vlm = config.vlm.as_ref();
        let extractor = crate::semantic::extractor_from_config(vlm)
            .map_err(|e| Phase2Error::Semantic(e.into()))?;
        let summarizer = crate::semantic::summarizer_from_config(vlm)
            .map_err(|e| Phase2Error::Semantic(e.into()))?;
        Ok(SessionCommitHandler::new(sessions, extractor, summarizer))
    }
}
