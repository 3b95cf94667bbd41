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
//! 5. indexing: the archive's files get embedding jobs (the memories got theirs, with their
//!    directories' summaries, as they were written);
//! 6. `.done`, last: a job that finds it only re-queues the archive's embeddings (idempotent)
//!    and returns.
//!
//! The archive's summary is the conversation's, not a generic directory summary: it is written
//! and indexed here (the directory's L0/L1 records) under EXACT locks on the two sidecars, as
//! the semantic job writes any directory's, and the parent `history/` is queued for its own.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::errno::ToErrno;
use crate::error::Chain;
use crate::index::Level;
use crate::lock::{LockError, LockKind};
use crate::ops::{source_version, Ops, OpsError};
use crate::queue::{Cause, Job, JobError, JobHandler};
use crate::semantic::memory::{
    apply_diff_entry, fields, parse_messages, plan_memory_writes, Date, ExtractContext, MemoryDiff,
};
use crate::semantic::summary::{Child, DirInput};
use crate::semantic::{MemoryExtractor, SemanticError, Summarizer};
use crate::uri::VPath;

use super::fsx;
use super::layout::{SessionPath, ABSTRACT, DONE, FAILED, MEMORY_DIFF, MESSAGES, OVERVIEW};
use super::meta::{now_rfc3339, Meta};
use super::{SessionError, Sessions};

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
    #[error("extractor/summariser")]
    Semantic(#[from] SemanticError),
    #[error("job payload: {0}")]
    Payload(&'static str),
    #[error("job payload: session")]
    PayloadSession(#[source] SessionError),
    #[error("{0}: archive has no messages.jsonl")]
    NoArchive(String),
    #[error("indexing")]
    Ops(#[from] OpsError),
}

impl Phase2Error {
    /// How loud a failed phase 2 logs: an indexing failure as its error says (a busy lock is
    /// info, a damaged index an error), a session's busy lock info, anything else a warning.
    fn level(&self) -> tracing::Level {
        match self {
            Phase2Error::Ops(e) => e.level(),
            Phase2Error::Session(e) if e.is_busy() => tracing::Level::INFO,
            _ => tracing::Level::WARN,
        }
    }

    fn is_permanent(&self) -> bool {
        match self {
            Phase2Error::Payload(_)
            | Phase2Error::PayloadSession(_)
            | Phase2Error::NoArchive(_) => true,
            Phase2Error::Semantic(e) => !e.is_retryable(),
            Phase2Error::Session(
                SessionError::Diverged { .. }
                | SessionError::Meta { .. }
                | SessionError::MetaIncomplete { .. },
            ) => true,
            Phase2Error::Session(_) | Phase2Error::Ops(_) => false,
        }
    }
}

/// The `session_commit` job handler.
pub struct SessionCommitHandler {
    sessions: Sessions,
    /// The index and embedder the archive's summary records go to.
    ops: Arc<Ops>,
    extractor: Arc<dyn MemoryExtractor>,
    summarizer: Arc<dyn Summarizer>,
}

impl SessionCommitHandler {
    pub fn new(
        ops: Arc<Ops>,
        extractor: Arc<dyn MemoryExtractor>,
        summarizer: Arc<dyn Summarizer>,
    ) -> SessionCommitHandler {
        SessionCommitHandler {
            sessions: Sessions::from_ops(&ops),
            ops,
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
        if fsx::exists(ws, &s.archive_file(n, DONE))? {
            // A run that died after `.done` may not have queued its embeddings.
            self.index_archive(s, n)?;
            return Ok(Phase2Report {
                already_done: true,
                ..Default::default()
            });
        }
        if !fsx::is_dir(ws, &s.archive(n))? {
            // The session (or this archive) was removed since: nothing left to process.
            tracing::info!(archive = %s.archive(n).uri(), "archive gone; phase 2 skipped");
            return Ok(Phase2Report::default());
        }
        let archive = s.archive_file(n, MESSAGES);
        let bytes = fsx::read_opt(ws, &archive)?
            .ok_or_else(|| Phase2Error::NoArchive(s.archive(n).uri()))?;
        let text = String::from_utf8_lossy(&bytes);
        let parsed = parse_messages(&text);

        self.summarize(s, n, &text)?;
        crate::crash_point!("session.job.summarized");

        let diff = match self.sessions.load_diff(s, n)? {
            Some(d) => d,
            None => {
                let ctx = ExtractContext {
                    user: s.user().to_string(),
                    archive_date: archive_date(ws, &archive),
                };
                let memories = self.extractor.extract(&ctx, &parsed.messages)?;
                let mem_root = s.memories();
                let (_, diff) =
                    plan_memory_writes(&memories, &mem_root.uri(), parsed.invalid.len(), |rel| {
                        read_text(ws, &mem_root, rel)
                    });
                let mut text = serde_json::to_vec_pretty(&diff).expect("a diff serialises");
                text.push(b'\n');
                fsx::atomic_write(ws, &s.archive_file(n, MEMORY_DIFF), &text)?;
                diff
            }
        };
        crate::crash_point!("session.job.diff_written");

        // Each memory file records which commit its facts came from (its provenance, what
        // `session rollback` reads), and the version a commit replaces is kept in the history.
        let id_of = |m: Option<&crate::semantic::memory::Message>| {
            m.and_then(|m| m.id.clone()).unwrap_or_default()
        };
        let source = json!({
            "session": s.sid,
            "archive": n,
            "messages": [id_of(parsed.messages.first()), id_of(parsed.messages.last())],
        });
        let by = format!("session commit {} archive_{n:03}", s.sid);
        for entry in diff.adds.iter().chain(&diff.updates) {
            let p = s
                .memories()
                .join_rel(&entry.rel_path)
                .map_err(SessionError::from)?;
            let guard = self
                .sessions
                .lock(&[(p.clone(), LockKind::Exact)])
                .map_err(SessionError::from)?;
            let existing = fsx::read_opt(ws, &p)?.map(|b| String::from_utf8_lossy(&b).into_owned());
            if let Some(content) = apply_diff_entry(existing.as_deref(), entry) {
                let content = fields::add_source(&content, source.clone());
                if existing.is_some() {
                    self.ops.keep_rewritten(&p, &by);
                }
                fsx::atomic_write(ws, &p, content.as_bytes())?;
            }
            // Queued after the write and under the lock, so the embedding job reads the new
            // content (a job that ran before the file existed would find nothing to index);
            // queued even when the file was complete already, since a run that died here
            // wrote the file but maybe not the job. Repeats coalesce.
            self.sessions.notify_written(std::slice::from_ref(&p))?;
            drop(guard);
            crate::crash_point!("session.job.memory_written");
        }

        self.index_archive(s, n)?;
        self.sessions.count_memories(s)?;
        crate::crash_point!("session.job.indexed");

        // OpenViking's `.done` names the first and last message archived.
        let done = json!({
            "starting_message_id": id_of(parsed.messages.first()),
            "ending_message_id": id_of(parsed.messages.last()),
            "archive": n,
            "completed_at": now_rfc3339(),
            "adds": diff.summary.total_adds,
            "updates": diff.summary.total_updates,
            "invalid_lines": diff.summary.invalid_lines,
        });
        // A failure recorded by an earlier run is resolved now.
        let failed = s.archive_file(n, FAILED);
        if fsx::stat(ws, &failed)?.is_some() {
            fsx::remove_file(ws, &failed)?;
        }
        fsx::atomic_write(ws, &s.archive_file(n, DONE), format!("{done}\n").as_bytes())?;
        self.sessions
            .notify_written_quiet(&[s.archive_file(n, DONE)])?;
        crate::crash_point!("session.job.done");
        Ok(Phase2Report {
            already_done: false,
            adds: diff.summary.total_adds,
            updates: diff.summary.total_updates,
            invalid_lines: diff.summary.invalid_lines,
        })
    }

    /// The archive's summary sidecars and their index records, unless a previous run made
    /// both already. The summariser (maybe a chat model) runs before any lock is taken (the
    /// records' vectors are queued); the write-back holds EXACT on the two sidecars, as a directory summary's does.
    fn summarize(&self, s: &SessionPath, n: u32, text: &str) -> Result<(), Phase2Error> {
        let ws = &self.sessions.ws;
        let dir = s.archive(n);
        let (abs_p, ovw_p) = (s.archive_file(n, ABSTRACT), s.archive_file(n, OVERVIEW));
        let indexed = |path: &VPath, level| -> Result<bool, Phase2Error> {
            let Some(m) = fsx::metadata(ws, path)? else {
                return Ok(false);
            };
            let v = self
                .ops
                .record_version(&dir, level)
                .map_err(OpsError::from)?;
            Ok(v == Some(source_version(&m)))
        };
        if indexed(&abs_p, Level::Abstract)? && indexed(&ovw_p, Level::Overview)? {
            return Ok(());
        }
        // A run that died after writing the sidecars keeps them; otherwise summarise.
        let (abs_text, ovw_text, write) =
            match (fsx::read_opt(ws, &abs_p)?, fsx::read_opt(ws, &ovw_p)?) {
                (Some(a), Some(o)) => match (String::from_utf8(a), String::from_utf8(o)) {
                    (Ok(a), Ok(o)) => (a, o, false),
                    _ => self.summary_of(&dir, text)?,
                },
                _ => self.summary_of(&dir, text)?,
            };
        let _guard = self.sessions.lock(&[
            (abs_p.clone(), LockKind::Exact),
            (ovw_p.clone(), LockKind::Exact),
        ])?;
        if write {
            // Overview first: the abstract is what the parent's summary reads.
            fsx::atomic_write(ws, &ovw_p, ovw_text.as_bytes())?;
            fsx::atomic_write(ws, &abs_p, abs_text.as_bytes())?;
        }
        for (level, path, text) in [
            (Level::Abstract, &abs_p, &abs_text),
            (Level::Overview, &ovw_p, &ovw_text),
        ] {
            let meta = fsx::metadata(ws, path)?.ok_or_else(|| {
                SessionError::io(ws.fs_path(path), std::io::ErrorKind::NotFound.into())
            })?;
            self.ops
                .put_record(&dir, level, text, source_version(&meta), false)?;
        }
        // `history/` summarises its archives: queue its regeneration.
        self.sessions.notify_dirs(&[s.history()])?;
        Ok(())
    }

    /// A fresh summary of archive `dir`'s conversation: (abstract, overview, to be written).
    fn summary_of(&self, dir: &VPath, text: &str) -> Result<(String, String, bool), Phase2Error> {
        let input = DirInput {
            uri: dir.uri(),
            children: vec![Child::file(MESSAGES, conversation_text(text))],
            weights: None,
        };
        let sm = self.summarizer.summarize(&input)?.enforce_limits();
        Ok((sm.abstract_md, sm.overview_md, true))
    }

    /// Queue the embeddings of the archive's files (jobs are keyed, so repeats coalesce, and
    /// an embedding job skips a file whose record is current).
    fn index_archive(&self, s: &SessionPath, n: u32) -> Result<(), Phase2Error> {
        let files: Vec<VPath> = [MESSAGES, MEMORY_DIFF, DONE]
            .iter()
            .map(|f| s.archive_file(n, f))
            .filter(|p| {
                fsx::stat(&self.sessions.ws, p).is_ok_and(|st| st.is_some_and(|st| st.is_file()))
            })
            .collect();
        self.sessions.notify_written_quiet(&files)?;
        Ok(())
    }

    /// A job that can never succeed leaves `.failed.json` in its archive, as OpenViking does.
    fn record_failure(&self, s: &SessionPath, n: u32, err: &Phase2Error) {
        let ws = &self.sessions.ws;
        if !fsx::is_dir(ws, &s.archive(n)).unwrap_or(false) {
            return;
        }
        let body = json!({
            "stage": "memory_extraction",
            "error": Chain(err).to_string(),
            "failed_at": now_rfc3339(),
        });
        let _ = fsx::atomic_write(
            ws,
            &s.archive_file(n, FAILED),
            format!("{body}\n").as_bytes(),
        );
    }
}

impl JobHandler for SessionCommitHandler {
    fn handle(&self, job: &Job) -> Result<(), JobError> {
        let (s, n) = match parse_payload(&job.payload) {
            Ok(v) => v,
            Err(e) => return Err(JobError::Permanent(Cause::new(e, tracing::Level::WARN))),
        };
        match self.run(&s, n) {
            Ok(r) => {
                tracing::info!(session = %s.dir.uri(), archive = n, adds = r.adds, updates = r.updates, "session commit phase 2 done");
                Ok(())
            }
            Err(e) if e.is_permanent() => {
                self.record_failure(&s, n, &e);
                let level = e.level();
                Err(JobError::Permanent(Cause::new(e, level)))
            }
            Err(e) => {
                let level = e.level();
                Err(JobError::Retry(Cause::new(e, level)))
            }
        }
    }
}

fn parse_payload(v: &Value) -> Result<(SessionPath, u32), Phase2Error> {
    let dir = v
        .get("session")
        .and_then(Value::as_str)
        .ok_or(Phase2Error::Payload("no \"session\""))?;
    let n = v
        .get("archive")
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n > 0)
        .ok_or(Phase2Error::Payload("no valid \"archive\""))?;
    let dir = VPath::from_rel(dir).map_err(|e| Phase2Error::PayloadSession(e.into()))?;
    let s = SessionPath::from_dir(dir).map_err(Phase2Error::PayloadSession)?;
    Ok((s, n))
}

/// A memory file's text, relative to `memories/`.
fn read_text(ws: &crate::workspace::Workspace, root: &VPath, rel: &str) -> Option<String> {
    let p = root.join_rel(rel).ok()?;
    fsx::read_opt(ws, &p)
        .ok()
        .flatten()
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
fn archive_date(ws: &crate::workspace::Workspace, p: &VPath) -> Option<Date> {
    let t = fsx::metadata(ws, p).ok()??.modified().ok()?;
    let secs = t.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    Date::from_days((secs / 86_400) as i64)
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
        ops: Arc<Ops>,
        config: &crate::config::Config,
    ) -> Result<SessionCommitHandler, Phase2Error> {
        let vlm = config.vlm.as_ref();
        let extractor = crate::semantic::extractor_from_config(vlm)
            .map_err(|e| Phase2Error::Semantic(e.into()))?;
        let summarizer = crate::semantic::summarizer_from_config(vlm)
            .map_err(|e| Phase2Error::Semantic(e.into()))?;
        Ok(SessionCommitHandler::new(ops, extractor, summarizer))
    }
}

/// The `session_commit` queue's entry for `WorkerPool::start` / `queue::drain`, with the
/// configured number of threads.
pub fn handler_spec(
    ops: Arc<Ops>,
    config: &crate::config::Config,
) -> Result<crate::queue::HandlerSpec, Phase2Error> {
    let h = SessionCommitHandler::from_config(ops, config)?;
    Ok(crate::queue::HandlerSpec::new(
        crate::queue::SESSION_COMMIT,
        Arc::new(h),
        config.workers.session_commit.max(1),
    ))
}

impl Sessions {
    /// Recount `memories_extracted` in `.meta.json` from every archive's `memory_diff.json`
    /// (idempotent, unlike adding this archive's counts), under `.meta.json`'s EXACT lock.
    pub(crate) fn count_memories(&self, s: &SessionPath) -> Result<(), SessionError> {
        let ws = &self.ws;
        let mut counts: std::collections::BTreeMap<String, u64> =
            ["profile", "preferences", "entities", "events"]
                .iter()
                .map(|c| (c.to_string(), 0))
                .collect();
        for a in super::layout::archives_on_disk(ws, s)? {
            if super::rollback::rolled_back(ws, s, a) {
                continue; // its memories were taken out again
            }
            if let Some(d) = self.load_diff(s, a)? {
                for e in d.adds.iter().chain(&d.updates) {
                    let c = serde_json::to_value(e.category)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default();
                    *counts.entry(c).or_default() += 1;
                }
            }
        }
        let total = counts.values().sum();
        counts.insert("total".into(), total);
        let _guard = self.lock(&[(s.meta(), LockKind::Exact)])?;
        let mut meta = Meta::load(ws, s)?;
        if meta.memories_extracted.as_ref() != Some(&counts) {
            meta.memories_extracted = Some(counts);
            // Queued first (the file exists): its job re-reads it once our lock is gone.
            self.notify_written(&[s.meta()])?;
            meta.store_counts(ws, s)?;
        }
        Ok(())
    }

    pub(crate) fn load_diff(
        &self,
        s: &SessionPath,
        n: u32,
    ) -> Result<Option<MemoryDiff>, SessionError> {
        match fsx::read_opt(&self.ws, &s.archive_file(n, MEMORY_DIFF))? {
            None => Ok(None),
            // A diff that does not parse was not written by us (ours are renamed in whole):
            // extracting again and replacing it is the only way forward.
            Some(b) => Ok(serde_json::from_slice(&b).ok()),
        }
    }
}
