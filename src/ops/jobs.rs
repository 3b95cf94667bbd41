//! The background jobs that derive the index and the summaries from the files, as
//! [`JobHandler`] values for the worker pool: `embedding` (one file's content record: its
//! text, searchable lexically at once), `semantic` (a directory's `.abstract.md` /
//! `.overview.md` and their records) and, when a model is configured, `dense` (one record's
//! vectors, one per passage of its source up to `vikingfs.index.max_file_bytes`
//! ([`crate::index::passages`]), computed after its text is indexed).
//!
//! Every job reads its source and computes outside any lock, then takes the EXACT lock of what
//! it writes and checks, under it, that the job is still the current version of its key
//! (`Queue::is_current`: coalescing) and that the source still has the version it read
//! ([`super::source_version`]). So a job never writes a record for a file that rm removed or a
//! name that mv left, and an old result never overwrites a newer one. A `dense` job takes no
//! lock: it only sets the vectors of a record that still has the version it embedded
//! ([`crate::index::Index::set_vectors`]), and never creates one. Every job is idempotent.

use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{is_source_name, source_version, Ops, OpsError};
use crate::config::WorkerConfig;
use crate::content::Content;
use crate::errno::ToErrno;
use crate::index::{Level, PassageVector, Record};
use crate::queue::{self, Cause, HandlerSpec, Job, JobError, JobHandler, PoolOptions, Progress};
use crate::semantic::summary::{Child, DirInput, TermWeights};
use crate::uri::VPath;

/// Passages embedded in one call of the model (it batches them by length itself); between
/// calls the job checks that its record was not rewritten meanwhile.
const DENSE_BATCH: usize = 64;
const SNIPPET_CHARS: usize = 200;
/// How much of each child a directory summary reads.
const CHILD_HEAD_BYTES: u64 = 8 * 1024;

pub(crate) use super::keys::has_summary;
pub use super::keys::{
    dense_job, dense_key, embed_job, embed_key, semantic_job, semantic_key, NewJob, ABSTRACT_FILE,
    OVERVIEW_FILE,
};
pub(crate) use super::lifecycle::JobLock;

/// A failure the job tries again after its back-off (or, on a full disk, waits out).
fn retry(e: impl Into<OpsError>) -> JobError {
    JobError::from(e.into())
}

/// The files at `path` could not be read (or listed, or stat'ed).
fn retry_io(path: PathBuf, e: std::io::Error) -> JobError {
    retry(OpsError::io(path, e))
}

/// The verdict and the log level the error carries: a busy lock is retried quietly, a full
/// disk is waited out, a damaged index is an error.
/// A memory file's text without its fields block (`semantic::memory::fields`: the commits
/// its facts came from), which is bookkeeping, not what the memory says: not searched.
fn without_memory_fields(p: &VPath, text: String) -> String {
    let mut c = p.components();
    let memory = c.next() == Some("user") && c.next().is_some() && c.next() == Some("memories");
    if !memory {
        return text;
    }
    match crate::semantic::memory::fields::split(&text) {
        (body, Some(_)) => body.to_string(),
        _ => text,
    }
}

impl From<OpsError> for JobError {
    fn from(e: OpsError) -> Self {
        let level = e.level();
        match e {
            e if e.is_disk_full() => JobError::Wait(Cause::new(e, level)),
            OpsError::Uri(_) | OpsError::Derived(_) => JobError::Permanent(Cause::new(e, level)),
            e => JobError::Retry(Cause::new(e, level)),
        }
    }
}

/// A payload that names no valid path: written by a bug or damaged, so it never succeeds.
pub(crate) fn bad_payload(e: OpsError) -> JobError {
    JobError::Permanent(Cause::new(e, tracing::Level::WARN))
}

impl From<crate::index::IndexError> for JobError {
    fn from(e: crate::index::IndexError) -> Self {
        OpsError::from(e).into()
    }
}

impl From<crate::queue::QueueError> for JobError {
    fn from(e: crate::queue::QueueError) -> Self {
        OpsError::from(e).into()
    }
}

/// What a job's payload names.
struct Target {
    path: VPath,
    lifecycle: Option<String>,
}

fn target(ops: &Ops, job: &Job, field: &str) -> Result<Target, JobError> {
    let uri = job
        .payload
        .get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| {
            JobError::Permanent(format!("payload has no {field:?}: {}", job.payload).into())
        })?;
    let path = ops.parse(uri).map_err(bad_payload)?;
    let lifecycle = job
        .payload
        .get("lifecycle")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(Target { path, lifecycle })
}

/// What a job found at a source path.
enum Head {
    /// A regular file's leading text, the version it was read at, and whether the file is
    /// longer than what was read.
    Text {
        text: String,
        version: String,
        partial: bool,
    },
    /// A regular file that is not text ([`crate::content::sniff`]): its kind and size.
    Binary {
        kind: String,
        size: u64,
    },
    /// A directory (its summaries are another job's).
    Dir,
    /// A symlink or special file: never indexed (a FIFO would block a reader, a symlink may
    /// point outside the workspace).
    Other,
    /// A regular file that cannot be opened, for a reason retrying will not cure.
    Unreadable(String),
    Gone,
}

impl Ops {
    /// Read at most `max` bytes of file `p` and judge them, with the version of what was
    /// read. Only a regular file is opened (a FIFO, socket or device node is never touched:
    /// opening one can block, fail or have effects), relative to the data root (so a path
    /// near the kernel's limits through the mount is no longer than that), and judged by
    /// fstat, so what is read is what is versioned. A file that cannot be opened for a reason
    /// retrying cannot cure is [`Head::Unreadable`].
    fn read_head(&self, p: &VPath, max: u64) -> std::io::Result<Head> {
        match self.root.lstat(p)? {
            None => return Ok(Head::Gone),
            Some(st) if st.is_dir() => return Ok(Head::Dir),
            Some(st) if !st.is_file() => return Ok(Head::Other),
            Some(_) => {}
        }
        let f = match self.root.open_read(p) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Head::Gone),
            Err(e) => match e.raw_os_error() {
                Some(libc::ENOTDIR) => return Ok(Head::Gone),
                Some(libc::EISDIR) => return Ok(Head::Dir),
                // Replaced by a symlink or a special file since the lstat.
                Some(libc::ELOOP | libc::ENXIO | libc::ENODEV) => return Ok(Head::Other),
                Some(libc::EACCES | libc::EPERM | libc::ENAMETOOLONG | libc::EINVAL) => {
                    return Ok(Head::Unreadable(e.to_string()))
                }
                _ => return Err(e),
            },
        };
        let meta = f.metadata()?;
        if meta.is_dir() {
            return Ok(Head::Dir);
        }
        if !meta.is_file() {
            return Ok(Head::Other);
        }
        let mut buf = Vec::with_capacity(meta.len().min(max) as usize);
        (&f).take(max).read_to_end(&mut buf)?;
        let partial = meta.len() > buf.len() as u64;
        // A document is derived from the text a reader sees in it (`content::document`). A
        // container (PDF, zip) is read whole, and only when it is within the index's limit:
        // the limit of the text wanted (`max`, a summary's short head) cuts the text, not the
        // file. What does not read as a document is named by its kind below.
        if let Some(kind) = crate::content::document::Kind::of(&buf) {
            let limit = self.derive.max_file_bytes.max(max);
            if !kind.whole() || meta.len() <= limit {
                if kind.whole() && partial {
                    (&f).take(limit - buf.len() as u64).read_to_end(&mut buf)?;
                }
                match crate::content::document::text(kind, &buf, max as usize) {
                    Ok((text, more)) => {
                        return Ok(Head::Text {
                            text,
                            version: source_version(&meta),
                            partial: more || (partial && !kind.whole()),
                        })
                    }
                    Err(why) => tracing::debug!(uri = %p.uri(), "not read as a document: {why}"),
                }
            }
        }
        // Compressed text is derived from the text it holds (up to the same limit); a stream
        // that does not decompress, or holds no text, is named by its own kind.
        if let Some(codec) = crate::content::compressed::Codec::of(&buf) {
            let inner =
                crate::content::compressed::decompress(codec, buf.as_slice().chain(&f), max);
            if let Ok((text, more)) = inner {
                if let Content::Text(text) = crate::content::sniff(text) {
                    return Ok(Head::Text {
                        text,
                        version: source_version(&meta),
                        partial: more,
                    });
                }
            }
        }
        Ok(match crate::content::sniff(buf) {
            Content::Text(text) => Head::Text {
                text: without_memory_fields(p, text),
                version: source_version(&meta),
                partial,
            },
            Content::Binary(kind) => Head::Binary {
                kind,
                size: meta.len(),
            },
        })
    }

    /// A regular file's indexable head (up to `max` bytes), its version and whether it was
    /// cut; `None` for anything else (a binary, a directory, a special file) or nothing.
    pub(crate) fn read_text(
        &self,
        p: &VPath,
        max: u64,
    ) -> Result<Option<(String, String, bool)>, OpsError> {
        match self.read_head(p, max) {
            Ok(Head::Text {
                text,
                version,
                partial,
            }) => Ok(Some((text, version, partial))),
            Ok(_) => Ok(None),
            Err(e) => Err(OpsError::io(self.backing(p), e)),
        }
    }
}

/// The record of `uri` at `level` from `text` as read at `version`, without its vector.
pub(crate) fn new_record(
    uri: VPath,
    level: Level,
    text: String,
    version: String,
    partial: bool,
) -> Record {
    Record {
        uri,
        level,
        snippet: snippet(&text),
        text,
        vector: None,
        source_version: version,
        partial,
    }
}

fn snippet(text: &str) -> String {
    let head: String = text.chars().take(SNIPPET_CHARS * 4).collect();
    crate::content::quotable(&head)
        .chars()
        .take(SNIPPET_CHARS)
        .collect()
}

impl Ops {
    fn job_finished(&self, job: &Job, lifecycle: Option<&str>) -> Result<(), JobError> {
        if let (Some(h), Some(key)) = (lifecycle, job.key.as_deref()) {
            self.lifecycle_job_done(h, key)?;
        }
        Ok(())
    }

    /// The `embedding` job: (re)build the content record of one file.
    ///
    /// Read and embed outside the lock; then, under the file's lock, write back only if this
    /// job is still current and the file is exactly what was read. A file that is gone is
    /// only concluded gone under the lock too (a writer may be between its enqueue and its
    /// write). When the file changed in between, go round again with what it holds now.
    pub fn run_embedding(&self, job: &Job) -> Result<(), JobError> {
        let t = target(self, job, "uri")?;
        let lc = t.lifecycle.as_deref();
        let p = &t.path;
        if !is_source_name(p.name()) {
            return self.job_finished(job, lc);
        }
        // A writer that keeps its file open (a log, a lock file) is patience, not poison:
        // wait without spending an attempt; the close queues the file again.
        if self.open_for_write(p) {
            return Err(JobError::Wait(Cause::message(
                format!(
                    "{} is open for writing through the mount; indexed after it is closed",
                    p.uri()
                ),
                tracing::Level::DEBUG,
            )));
        }
        let fs = self.backing(p);
        let _working = lc.map(|h| self.lifecycle_work(h));
        crate::crash_point!("job.embed.start");
        for _round in 0..3 {
            // An ignored path is read for nothing: only a leftover record is dropped.
            let head = if self.derive.derives(p, false) {
                match self
                    .read_head(p, self.derive.max_file_bytes)
                    .map_err(|e| retry_io(fs.clone(), e))?
                {
                    Head::Unreadable(why) => {
                        tracing::info!(uri = %p.uri(), "not indexed: {why}");
                        Head::Other
                    }
                    h => h,
                }
            } else {
                Head::Other
            };
            // Index only what the index does not hold yet.
            let fresh = match &head {
                Head::Text { version, .. } => {
                    self.index
                        .version_of(p, Level::Content)
                        .map_err(retry)?
                        .as_deref()
                        != Some(version.as_str())
                }
                _ => false,
            };
            crate::crash_point!("job.embed.computed");
            // Its directory gone: whoever removed or moved it dealt with its record.
            let JobLock::Held(_g) = self.job_lock(std::slice::from_ref(p), lc)? else {
                return self.job_finished(job, lc);
            };
            if !self.queue.is_current(job).map_err(retry)? {
                // A newer version of this key is queued (or our lease was handed on): it
                // will write the record.
                return Ok(());
            }
            let now = self.root.lstat(p).map_err(|e| retry_io(fs.clone(), e))?;
            // Checked again under the lock: a rule file changed since the read is obeyed
            // (its `rederive` job removes records under this same lock).
            let head = if self.derive.derives(p, false) {
                head
            } else {
                Head::Other
            };
            match (head, now) {
                (Head::Gone, None)
                | (Head::Other, Some(_))
                | (Head::Other, None)
                | (Head::Binary { .. }, Some(_)) => {
                    // Gone for good (whoever removed or moved it dealt with its record),
                    // never indexable, not text or ignored: drop a leftover record — by
                    // version, so a record rebuilt meanwhile survives.
                    if let Some(v) = self.index.version_of(p, Level::Content).map_err(retry)? {
                        self.index
                            .delete_if_version(p, Level::Content, &v)
                            .map_err(retry)?;
                    }
                    return self.job_finished(job, lc);
                }
                (Head::Dir, Some(m)) if m.is_dir() => return self.job_finished(job, lc),
                (
                    Head::Text {
                        text,
                        version,
                        partial,
                    },
                    Some(m),
                ) if super::stat_version(&m) == version => {
                    if fresh {
                        self.put_record(p, Level::Content, &text, version, partial)?;
                        crate::crash_point!("job.embed.indexed");
                    } else {
                        self.queue_missing_vector(p, Level::Content)?;
                    }
                    return self.job_finished(job, lc);
                }
                // Changed between the read and the lock: read again.
                _ => continue,
            }
        }
        Err(JobError::Retry(Cause::message(
            "source kept changing while it was being embedded",
            tracing::Level::INFO,
        )))
    }

    /// Write the record of `uri` at `level` from `text` as read at `version` (its terms are
    /// searchable once this returns) and queue its vector when a model is configured.
    /// Called under the source's lock, after checking the source still has `version`.
    pub(crate) fn put_record(
        &self,
        uri: &VPath,
        level: Level,
        text: &str,
        version: String,
        partial: bool,
    ) -> Result<(), OpsError> {
        self.put_records(vec![new_record(
            uri.clone(),
            level,
            text.to_string(),
            version,
            partial,
        )])
    }

    /// [`Ops::put_record`] for many records at once ([`new_record`]): one index commit, one
    /// queue commit for their vectors.
    pub(crate) fn put_records(&self, recs: Vec<Record>) -> Result<(), OpsError> {
        if recs.is_empty() {
            return Ok(());
        }
        self.index.upsert_many(&recs)?;
        if self.embedder.is_some() {
            crate::crash_point!("job.dense.record_written");
            let jobs: Vec<_> = recs.iter().map(|r| dense_job(&r.uri, r.level)).collect();
            self.queue.submit(&jobs)?;
        }
        Ok(())
    }

    /// Queue the vector of a record a job found already current, if it has none. The record
    /// and its `dense` job are two stores' commits: a run that died between them (the process
    /// killed from any other thread) left a record no job will embed, and this re-run is the
    /// one that knows. Queueing again is harmless: the job coalesces by key.
    fn queue_missing_vector(&self, uri: &VPath, level: Level) -> Result<(), OpsError> {
        if self.embedder.is_none() {
            return Ok(());
        }
        if let Some((_, false)) = self.index.vector_state(uri, level)? {
            self.queue.submit(&[dense_job(uri, level)])?;
        }
        Ok(())
    }

    /// Where the text of the record (uri, level) lives: the file, or a summary sidecar.
    fn record_source(&self, uri: &VPath, level: Level) -> Result<VPath, OpsError> {
        Ok(match level {
            Level::Content => uri.clone(),
            Level::Abstract => uri.join(ABSTRACT_FILE)?,
            Level::Overview => uri.join(OVERVIEW_FILE)?,
        })
    }

    /// The `dense` job: the vector of one record, from its source as it is now, set only if
    /// the record still has the version read (see the module doc: no lock needed).
    pub fn run_dense(&self, job: &Job) -> Result<(), JobError> {
        let Some(embedder) = self.embedder.clone() else {
            return Ok(()); // No model configured (any more): nothing to compute.
        };
        let t = target(self, job, "uri")?;
        let level = job
            .payload
            .get("level")
            .and_then(Value::as_i64)
            .and_then(Level::from_i64)
            .ok_or_else(|| {
                JobError::Permanent(format!("payload has no level: {}", job.payload).into())
            })?;
        let (version, has_vector) = match self.index.vector_state(&t.path, level).map_err(retry)? {
            Some(s) => s,
            None => return Ok(()), // No record (removed or moved): nothing to embed.
        };
        if has_vector {
            return Ok(());
        }
        let src = self.record_source(&t.path, level)?;
        let Head::Text {
            text, version: v, ..
        } = self
            .read_head(&src, self.derive.max_file_bytes)
            .map_err(|e| retry_io(self.backing(&src), e))?
        else {
            return Ok(());
        };
        if v != version {
            // The source changed since its record was written: its `embedding` (or
            // `semantic`) job rewrites the record and queues a new vector.
            return Ok(());
        }
        // What the record's terms are made of, passage by passage (a memory's fields block
        // is bookkeeping: not embedded, as it is not indexed).
        let text = match level {
            Level::Content => without_memory_fields(&t.path, text),
            _ => text,
        };
        let passages = crate::index::passages::split(src.name(), &text);
        let mut parts = Vec::with_capacity(passages.len());
        for (i, batch) in passages.chunks(DENSE_BATCH).enumerate() {
            // A long file takes a while: stop when a newer version made this one moot.
            if i > 0 && self.index.version_of(&t.path, level).map_err(retry)? != Some(v.clone()) {
                return Ok(());
            }
            let texts: Vec<&str> = batch.iter().map(|p| &text[p.start..p.end]).collect();
            let vectors = embedder.embed(&texts).map_err(retry)?;
            if vectors.len() != texts.len() {
                return Err(JobError::Retry(
                    format!(
                        "embedder returned {} vectors for {}",
                        vectors.len(),
                        texts.len()
                    )
                    .into(),
                ));
            }
            parts.extend(batch.iter().zip(vectors).map(|(p, vector)| PassageVector {
                lines: p.lines,
                vector,
            }));
        }
        crate::crash_point!("job.dense.computed");
        self.index
            .set_vectors(&t.path, level, &v, &parts)
            .map_err(retry)?;
        Ok(())
    }

    /// Queue the vectors the index is missing (after a model was configured or changed, or
    /// a job was lost to a move). Returns how many were queued.
    pub fn backfill_vectors(&self) -> super::Result<usize> {
        if self.embedder.is_none() || !self.index.has_dense() {
            return Ok(0);
        }
        let jobs: Vec<NewJob> = self
            .index
            .missing_vectors()?
            .iter()
            .map(|(uri, level)| dense_job(uri, *level))
            .collect();
        for chunk in jobs.chunks(1000) {
            self.queue.enqueue_many(chunk)?;
        }
        Ok(jobs.len())
    }

    /// The children a directory summary is built from. Every call is relative to the data
    /// root, so a directory deeper than PATH_MAX as a backing path is summarised too.
    fn summary_input(&self, dir: &VPath) -> Result<DirInput, JobError> {
        let mut children = Vec::new();
        let names = self
            .root
            .names(dir)
            .map_err(|e| retry_io(self.backing(dir), e))?;
        for name in names {
            let Some(name) = name.to_str().map(str::to_string) else {
                continue;
            };
            if !is_source_name(&name) {
                continue;
            }
            let Ok(p) = dir.join(&name) else { continue };
            let Ok(Some(st)) = self.root.lstat(&p) else {
                continue;
            };
            // What is ignored is not the directory's content, to its summary either.
            if !self.derive.derives(&p, st.is_dir()) {
                continue;
            }
            if st.is_dir() {
                let abs = p
                    .join(ABSTRACT_FILE)
                    .ok()
                    .and_then(|a| self.read_small(&a))
                    .unwrap_or_default();
                children.push(Child::dir(name, abs));
            } else if st.is_file() {
                children.push(match self.read_head(&p, CHILD_HEAD_BYTES) {
                    Ok(Head::Text { text, .. }) => Child::file(name, text),
                    Ok(Head::Binary { kind, size }) => Child::binary(name, kind, size),
                    _ => Child::file(name, String::new()),
                });
            }
        }
        let mut input = DirInput {
            uri: dir.uri(),
            children,
            weights: None,
        };
        // Keywords are weighed against the rest of the workspace: how many files outside this
        // directory use each candidate word (the chat summariser ignores this).
        let terms = input.keyword_candidates();
        let terms: Vec<&str> = terms.iter().map(String::as_str).collect();
        let (docs, df) = self.index.doc_freq(&terms, Some(dir))?;
        input.weights = Some(TermWeights::from_doc_freq(docs, terms.into_iter().zip(df)));
        Ok(input)
    }

    /// The whole of a small file (a sidecar) as text; `None` when it is missing or not text.
    fn read_small(&self, p: &VPath) -> Option<String> {
        let mut f = self.root.open_read(p).ok()?;
        let mut s = String::new();
        f.read_to_string(&mut s).ok()?;
        Some(s)
    }

    /// Whether `p` is a directory now (relative to the data root: no PATH_MAX limit).
    fn is_dir_now(&self, p: &VPath) -> Result<bool, JobError> {
        Ok(self
            .root
            .lstat(p)
            .map_err(|e| retry_io(self.backing(p), e))?
            .is_some_and(|st| st.is_dir()))
    }

    /// The version of `p` as a record carries it ([`source_version`]), or "" when missing.
    fn version_now(&self, p: &VPath) -> Result<String, JobError> {
        Ok(self
            .root
            .lstat(p)
            .map_err(|e| retry_io(self.backing(p), e))?
            .map(|st| super::stat_version(&st))
            .unwrap_or_default())
    }

    /// The `semantic` job: regenerate a directory's summaries, index them, and propagate to
    /// the parent when the abstract changed.
    pub fn run_semantic(&self, job: &Job) -> Result<(), JobError> {
        let t = target(self, job, "dir")?;
        let lc = t.lifecycle.as_deref();
        let dir = &t.path;
        let _working = lc.map(|h| self.lifecycle_work(h));
        crate::crash_point!("job.semantic.start");
        let is_dir = self.is_dir_now(dir)?;
        if is_dir && has_summary(dir) && !self.derive.derives(dir, true) {
            // Ignored (a rule file changed after this job was queued): nothing derived.
            self.drop_records_under(dir)?;
            self.drop_sidecars_of(dir)?;
            return self.job_finished(job, lc);
        }
        if is_dir && !has_summary(dir) {
            // A directory holding several users' trees (`user`): an older vikingfs summarised
            // it, quoting every user's abstract. What it wrote goes, under the lock it was
            // written under.
            return self.unsummarise(dir, job, lc);
        }
        if !self.derive.summarised(dir) || !is_dir {
            // Gone (or never a directory): drop summary records built from it, by version, so
            // a directory re-created meanwhile keeps its fresh ones.
            for level in [Level::Abstract, Level::Overview] {
                if let Some(v) = self.index.version_of(dir, level).map_err(retry)? {
                    if !self.is_dir_now(dir)? {
                        self.index
                            .delete_if_version(dir, level, &v)
                            .map_err(retry)?;
                    }
                }
            }
            return self.job_finished(job, lc);
        }
        let input = self.summary_input(dir)?;
        let summary = self.summarizer.summarize(&input).map_err(|e| {
            // The model's trouble, not the files': a warning either way.
            if e.is_retryable() {
                JobError::Retry(Cause::new(e, tracing::Level::WARN))
            } else {
                JobError::Permanent(Cause::new(e, tracing::Level::WARN))
            }
        })?;
        // Whatever the summariser (a chat model may not listen), the sidecars keep their limits.
        let summary = summary.enforce_limits();
        let (abs, ov) = (summary.abstract_md, summary.overview_md);
        crate::crash_point!("job.semantic.computed");
        let abs_path = dir.join(ABSTRACT_FILE).map_err(OpsError::from)?;
        let ov_path = dir.join(OVERVIEW_FILE).map_err(OpsError::from)?;
        {
            // The directory gone: rm or mv took its records.
            let JobLock::Held(_g) = self.job_lock(&[abs_path.clone(), ov_path.clone()], lc)? else {
                return self.job_finished(job, lc);
            };
            if !self.queue.is_current(job).map_err(retry)? {
                return Ok(());
            }
            // Ignored since the job started (a rule file changed): its rederive job
            // removes what was written before.
            if !self.is_dir_now(dir)? || !self.derive.summarised(dir) {
                return self.job_finished(job, lc);
            }
            let old_abs = self.read_small(&abs_path);
            let old_ov = self.read_small(&ov_path);
            let write = |p: &VPath, text: &str| {
                self.root
                    .write_summary(p, text.as_bytes())
                    .map_err(|e| OpsError::io(self.backing(p), e))
            };
            // Overview first: the abstract is what the parent reads, so it lands last.
            if old_ov.as_deref() != Some(ov.as_str()) {
                write(&ov_path, &ov)?;
            }
            let abs_changed = old_abs.as_deref() != Some(abs.as_str());
            if abs_changed {
                write(&abs_path, &abs)?;
            }
            crate::crash_point!("job.semantic.written");
            let abs_v = self.version_now(&abs_path)?;
            let ov_v = self.version_now(&ov_path)?;
            let indexed = self.index.version_of(dir, Level::Abstract).map_err(retry)?
                == Some(abs_v.clone())
                && self.index.version_of(dir, Level::Overview).map_err(retry)?
                    == Some(ov_v.clone());
            // Propagate when the abstract changed — or when a previous run of this job died
            // after writing it (its records are not up to date), which may have been before
            // it propagated.
            if abs_changed || !indexed {
                self.propagate(dir, lc)?;
            }
            crate::crash_point!("job.semantic.propagated");
            for (level, text, version) in
                [(Level::Abstract, abs, abs_v), (Level::Overview, ov, ov_v)]
            {
                if indexed {
                    self.queue_missing_vector(dir, level)?;
                } else {
                    self.put_record(dir, level, &text, version, false)?;
                }
            }
            crate::crash_point!("job.semantic.indexed");
        }
        self.job_finished(job, lc)
    }

    /// Remove the summary of `dir`, a directory that gets none (its sidecars and their
    /// records), under the lock the semantic job writes them under.
    fn unsummarise(&self, dir: &VPath, job: &Job, lc: Option<&str>) -> Result<(), JobError> {
        let paths = [
            dir.join(ABSTRACT_FILE).map_err(OpsError::from)?,
            dir.join(OVERVIEW_FILE).map_err(OpsError::from)?,
        ];
        if let JobLock::Held(_g) = self.job_lock(&paths, lc)? {
            for level in [Level::Abstract, Level::Overview] {
                if let Some(v) = self.index.version_of(dir, level).map_err(retry)? {
                    self.index
                        .delete_if_version(dir, level, &v)
                        .map_err(retry)?;
                }
            }
            for p in &paths {
                match std::fs::remove_file(self.backing(p)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(OpsError::io(self.backing(p), e).into())
                    }
                    _ => {}
                }
            }
        }
        self.job_finished(job, lc)
    }

    /// Queue the removal of summaries an older vikingfs wrote where none belongs (`user`, which
    /// holds every user's tree: see [`has_summary`]), when there are any: run at every open of
    /// the engine, so a workspace upgraded in place loses them at its next daemon's start.
    pub(crate) fn forget_shared_summaries(&self) -> Result<(), OpsError> {
        let user = VPath::root().join("user")?;
        let mut left = false;
        for (file, level) in [
            (ABSTRACT_FILE, Level::Abstract),
            (OVERVIEW_FILE, Level::Overview),
        ] {
            left |= std::fs::symlink_metadata(self.backing(&user.join(file)?)).is_ok()
                || self.index.version_of(&user, level)?.is_some();
        }
        if left {
            tracing::info!(
                "removing the summary of viking://user an older vikingfs wrote (it quoted \
                 every user's tree)"
            );
            self.queue.enqueue_many(&[semantic_job(&user, None)])?;
        }
        Ok(())
    }

    /// Enqueue the parent's summary; inside a resource whose lifecycle is open, as part of it.
    fn propagate(&self, dir: &VPath, lifecycle: Option<&str>) -> Result<(), JobError> {
        let Some(parent) = dir.parent().filter(|d| self.derive.summarised(d)) else {
            return Ok(());
        };
        let mut lc = None;
        if let Some(h) = lifecycle {
            if let Some(l) = self.journal.lifecycle(h).map_err(retry)? {
                if parent.starts_with(&l.target)
                    && self
                        .journal
                        .lifecycle_add_key(h, &semantic_key(&parent))
                        .map_err(retry)?
                {
                    lc = Some(h);
                }
            }
        }
        self.queue
            .enqueue_many(&[semantic_job(&parent, lc)])
            .map_err(retry)?;
        Ok(())
    }

    /// Work the queues in this process until they are drained or `timeout` passes (for
    /// `--wait` commands and `vikingfs wait` when no daemon runs), then release lifecycles
    /// that can no longer finish. Returns whether everything was drained.
    pub fn drain(
        self: &Arc<Self>,
        workers: &WorkerConfig,
        timeout: Duration,
        progress: impl FnMut(&Progress),
    ) -> super::Result<bool> {
        let done = queue::drain_with(
            &self.queue,
            handlers(self, workers),
            pool_options(),
            timeout,
            progress,
        )?;
        if done {
            self.sweep_lifecycles()?;
        }
        Ok(done)
    }
}

impl Ops {
    /// [`drain_with_extra`](Self::drain_with_extra) of some queues only (`queues` among this
    /// layer's, plus every one of `extra`): for a command that waits for its own kind of work
    /// (a session commit: its phase 2 and the records of what it wrote), not for every queue.
    pub fn drain_some(
        self: &Arc<Self>,
        workers: &WorkerConfig,
        queues: &[&str],
        extra: Vec<HandlerSpec>,
        timeout: Duration,
        progress: impl FnMut(&Progress),
    ) -> super::Result<bool> {
        let mut specs = handlers(self, workers);
        specs.retain(|s| queues.contains(&s.queue.as_str()));
        specs.extend(extra);
        Ok(queue::drain_with(
            &self.queue,
            specs,
            pool_options(),
            timeout,
            progress,
        )?)
    }

    /// [`drain`](Self::drain) with more queues worked by the same pool: the handlers of a layer
    /// above (sessions' `session_commit`), which this layer cannot name.
    pub fn drain_with_extra(
        self: &Arc<Self>,
        workers: &WorkerConfig,
        extra: Vec<HandlerSpec>,
        timeout: Duration,
        progress: impl FnMut(&Progress),
    ) -> super::Result<bool> {
        let done = self.drain_some(workers, queue::KNOWN_QUEUES, extra, timeout, progress)?;
        if done {
            self.sweep_lifecycles()?;
        }
        Ok(done)
    }
}

/// The worker pool's handler for the `embedding` queue.
pub struct EmbeddingHandler(pub Arc<Ops>);
/// The worker pool's handler for the `semantic` queue.
pub struct SemanticHandler(pub Arc<Ops>);
/// The worker pool's handler for the `dense` queue.
pub struct DenseHandler(pub Arc<Ops>);

impl JobHandler for DenseHandler {
    fn handle(&self, job: &Job) -> Result<(), JobError> {
        self.0.run_dense(job)
    }
}

impl JobHandler for EmbeddingHandler {
    fn handle(&self, job: &Job) -> Result<(), JobError> {
        self.0.run_embedding(job)
    }
}

/// The `history_hash` queue's handler ([`Stores::hash_history`](super::Stores)).
struct HashHandler(Arc<Ops>);

impl JobHandler for HashHandler {
    fn handle(&self, _job: &Job) -> Result<(), JobError> {
        match self.0.hash_history() {
            Ok(n) => {
                tracing::debug!(entries = n, "history hashed");
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}

impl JobHandler for SemanticHandler {
    fn handle(&self, job: &Job) -> Result<(), JobError> {
        self.0.run_semantic(job)
    }
}

/// The handlers of this layer's queues, with the configured thread counts, for
/// `WorkerPool::start` and `queue::drain`.
pub fn handlers(ops: &Arc<Ops>, workers: &WorkerConfig) -> Vec<HandlerSpec> {
    vec![
        HandlerSpec::new(
            queue::EMBEDDING,
            Arc::new(EmbeddingHandler(ops.clone())),
            workers.embedding.max(1),
        ),
        HandlerSpec::new(
            queue::SEMANTIC,
            Arc::new(SemanticHandler(ops.clone())),
            workers.semantic.max(1),
        ),
        HandlerSpec::new(
            queue::DENSE,
            Arc::new(DenseHandler(ops.clone())),
            workers.dense.max(1),
        ),
        // A rule file's change walks one tree: one worker is plenty.
        HandlerSpec::new(
            queue::REDERIVE,
            Arc::new(super::rederive::RederiveHandler(ops.clone())),
            1,
        ),
        // Hashing kept content is background work: one worker, whatever the backlog.
        HandlerSpec::new(queue::HISTORY_HASH, Arc::new(HashHandler(ops.clone())), 1),
    ]
}

/// Pool options; `VIKINGFS_JOB_LEASE_MS` shortens the lease (the crash tests use it so a job
/// whose worker was killed is handed on quickly).
pub fn pool_options() -> PoolOptions {
    match std::env::var("VIKINGFS_JOB_LEASE_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&ms| ms > 0)
    {
        Some(ms) => PoolOptions::with_lease(Duration::from_millis(ms)),
        None => PoolOptions::default(),
    }
}
