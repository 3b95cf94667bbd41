//! [`Light`]: the part of the store kernel that takes path locks and queues derived work,
//! opened without the index, the journal or recovery, for faces whose commands only lock,
//! write files and queue jobs (a session's append, list and show). A face reaches the queue
//! and the lock manager through this (or through [`Stores::light`]), never by itself. Which
//! jobs a change queues is the kernel's one rule ([`Derivation`]), ignore rules included.

use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::lock::{LockError, LockGuard, LockKind, LockManager};
use crate::queue::{Queue, QueueError};
use crate::uri::VPath;
use crate::workspace::Workspace;

use super::derive::Derivation;
use super::keys::{embed_job, semantic_job, NewJob};
use super::{Result, Stores};

/// A workspace's path locks and job queue (cheap to clone: both are shared handles).
#[derive(Clone)]
pub struct Light {
    locks: Arc<LockManager>,
    queue: Queue,
    derive: Arc<Derivation>,
}

impl Light {
    /// The locks and the queue of `ws` as `config` says (the queue where `storage.backend`
    /// keeps it), and nothing else.
    pub fn open(ws: &Workspace, config: &Config) -> Result<Light> {
        super::check_backend(ws, &config.backend)?;
        Ok(Light {
            locks: LockManager::new(ws, config.lock.clone())?,
            queue: super::open_queue_of(ws, &config.backend)?,
            derive: Arc::new(Derivation::new(&ws.data_root(), &config.index)?),
        })
    }

    /// Take `reqs` (each path with its kind) together, waiting up to `wait` for a holder.
    pub fn lock(
        &self,
        reqs: &[(VPath, LockKind)],
        wait: Duration,
    ) -> std::result::Result<LockGuard, LockError> {
        self.locks.acquire_brief(reqs, wait)
    }

    /// Files changed: queue their embeddings and their directories' summaries, in one
    /// transaction (pending jobs of the same keys coalesce).
    pub fn files_written(&self, files: &[VPath]) -> std::result::Result<(), QueueError> {
        let mut jobs: Vec<NewJob> = files
            .iter()
            .flat_map(|f| self.derive.jobs_for_change(f))
            .collect();
        jobs.sort_by(|a, b| a.key.cmp(&b.key));
        jobs.dedup_by(|a, b| a.key.is_some() && a.key == b.key && a.queue == b.queue);
        self.queue.enqueue_many(&jobs)
    }

    /// Files changed in a directory whose summary the caller writes itself: queue their
    /// embeddings only.
    pub fn files_written_quiet(&self, files: &[VPath]) -> std::result::Result<(), QueueError> {
        let jobs: Vec<NewJob> = files
            .iter()
            .filter(|f| self.derive.derives(f, false))
            .map(|f| embed_job(f, None))
            .collect();
        self.queue.enqueue_many(&jobs)
    }

    /// Directories whose summaries must be regenerated.
    pub fn dirs_changed(&self, dirs: &[VPath]) -> std::result::Result<(), QueueError> {
        let jobs: Vec<NewJob> = dirs
            .iter()
            .filter(|d| self.derive.summarised(d))
            .map(|d| semantic_job(d, None))
            .collect();
        self.queue.enqueue_many(&jobs)
    }

    /// Queue one job of `queue` (keyed by `key`, so a pending repeat coalesces); its id.
    pub fn enqueue(
        &self,
        queue: &str,
        key: Option<&str>,
        payload: &serde_json::Value,
    ) -> std::result::Result<i64, QueueError> {
        self.queue.enqueue(queue, key, payload)
    }

    /// Bring the dead jobs of `queue` back to life (a superseded one goes).
    pub fn retry_dead(&self, queue: &str) -> std::result::Result<usize, QueueError> {
        self.queue.retry_dead(Some(queue))
    }
}

impl Stores {
    /// This kernel's locks, queue and rules as a [`Light`].
    pub fn light(&self) -> Light {
        Light {
            locks: self.locks.clone(),
            queue: self.queue.clone(),
            derive: self.derive.clone(),
        }
    }
}
