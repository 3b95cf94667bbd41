//! Background tasks as OpenViking's task tracker shows them (`GET /api/v1/tasks/{id}`,
//! `GET /api/v1/tasks`): a request that starts work it does not wait for (a session commit
//! with `wait=false`, an added resource's processing) returns a `task_id`, and the task's
//! record says `pending` → `running` → `completed` (with its result) or `failed` (with its
//! error). Records live in the daemon's memory and expire an hour after they end, as
//! OpenViking's in-memory tracker does; the work itself is durable in the queue, so a restart
//! loses only the record, never the work.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde_json::{json, Value};

use super::auth::Identity;
use super::reply::ApiError;

/// How long an ended task's record is kept.
const KEEP: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone)]
pub struct Task {
    pub id: String,
    pub kind: String,
    pub status: &'static str,
    pub resource_id: Option<String>,
    pub account: String,
    pub user: String,
    pub created: f64,
    pub updated: f64,
    pub started: Option<f64>,
    pub result: Option<Value>,
    pub error: Option<String>,
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Python's `datetime.isoformat()` of a UTC time, as OpenViking writes `*_at_iso`.
fn iso(t: f64) -> String {
    jiff::Timestamp::from_microsecond((t * 1e6) as i64)
        .map(|ts| ts.strftime("%Y-%m-%dT%H:%M:%S%.6f+00:00").to_string())
        .unwrap_or_default()
}

impl Task {
    pub fn is_terminal(&self) -> bool {
        matches!(self.status, "completed" | "failed" | "cancelled")
    }

    /// OpenViking's `TaskRecord.to_dict()`: `processing_seconds` is null until the work
    /// starts, and `stage` is null until the task ends, then its status.
    pub fn to_json(&self) -> Value {
        let processing = match self.started {
            Some(s) if self.is_terminal() => Some(self.updated - s),
            Some(s) => Some(now() - s),
            None => None,
        };
        let stage = self.is_terminal().then_some(self.status);
        json!({
            "task_id": self.id,
            "task_type": self.kind,
            "status": self.status,
            "created_at": self.created,
            "updated_at": self.updated,
            "processing_seconds": processing,
            "resource_id": self.resource_id,
            "meta": {},
            "stage": stage,
            "result": self.result,
            "error": self.error,
            "created_at_iso": iso(self.created),
            "updated_at_iso": iso(self.updated),
        })
    }
}

#[derive(Default, Clone)]
pub struct Tasks {
    inner: Arc<Mutex<HashMap<String, Task>>>,
}

impl Tasks {
    /// Start `work` on a thread of its own; the task's id at once.
    pub fn spawn(
        &self,
        kind: &str,
        resource_id: Option<String>,
        who: &Identity,
        work: impl FnOnce() -> Result<Value, ApiError> + Send + 'static,
    ) -> String {
        let id = uuid::Uuid::new_v4().to_string();
        let t = now();
        let task = Task {
            id: id.clone(),
            kind: kind.to_string(),
            status: "pending",
            resource_id,
            account: who.account.clone(),
            user: who.user.clone(),
            created: t,
            updated: t,
            started: None,
            result: None,
            error: None,
        };
        {
            let mut all = self.inner.lock();
            all.retain(|_, t| !t.is_terminal() || now() - t.updated < KEEP.as_secs_f64());
            all.insert(id.clone(), task);
        }
        let me = self.clone();
        let tid = id.clone();
        let spawned = std::thread::Builder::new()
            .name("vikingfs-task".into())
            .spawn(move || {
                me.update(&tid, |t| {
                    t.status = "running";
                    t.started = Some(now());
                });
                let out = work();
                me.update(&tid, |t| match out {
                    Ok(v) => {
                        t.status = "completed";
                        t.result = Some(v);
                    }
                    Err(e) => {
                        t.status = "failed";
                        t.error = Some(e.message);
                    }
                });
            });
        if let Err(e) = spawned {
            self.update(&id, |t| {
                t.status = "failed";
                t.error = Some(format!("could not start the task: {e}"));
            });
        }
        id
    }

    fn update(&self, id: &str, f: impl FnOnce(&mut Task)) {
        if let Some(t) = self.inner.lock().get_mut(id) {
            f(t);
            t.updated = now().max(t.updated);
        }
    }

    /// The task `id`, if `who` may see it (root: any; others: their own).
    pub fn get(&self, id: &str, who: &Identity) -> Option<Task> {
        let all = self.inner.lock();
        let t = all.get(id)?;
        let mine = t.account == who.account && t.user == who.user;
        (mine || who.role == super::auth::Role::Root).then(|| t.clone())
    }

    /// `who`'s tasks, newest first, filtered like OpenViking's list.
    pub fn list(
        &self,
        who: &Identity,
        kind: Option<&str>,
        status: Option<&str>,
        resource_id: Option<&str>,
        limit: usize,
    ) -> Vec<Task> {
        let all = self.inner.lock();
        let mut v: Vec<Task> = all
            .values()
            .filter(|t| {
                (who.role == super::auth::Role::Root
                    || (t.account == who.account && t.user == who.user))
                    && kind.is_none_or(|k| t.kind == k)
                    && status.is_none_or(|s| t.status == s)
                    && resource_id.is_none_or(|r| t.resource_id.as_deref() == Some(r))
            })
            .cloned()
            .collect();
        v.sort_by(|a, b| b.created.total_cmp(&a.created));
        v.truncate(limit);
        v
    }

    /// Tasks not yet ended (for `system/wait`).
    pub fn active(&self) -> usize {
        self.inner
            .lock()
            .values()
            .filter(|t| !t.is_terminal())
            .count()
    }
}
