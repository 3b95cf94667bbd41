//! Keeping the lifecycle locks ([`super::lifecycle`]) of the jobs this process runs fresh:
//! a job registers its lifecycle while it works ([`Ops::lifecycle_work`]), and one thread
//! refreshes every registered lock each `lock_expire / 3`, however long a job takes.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::Ops;
use crate::error::Chain;

/// While alive, a job of this process is working for a lifecycle (see [`Ops::lifecycle_work`]).
pub(crate) struct Working<'a> {
    ops: &'a Ops,
    handle: String,
}

impl Drop for Working<'_> {
    fn drop(&mut self) {
        let mut w = self.ops.working.lock();
        if let Some(n) = w.get_mut(&self.handle) {
            *n -= 1;
            if *n == 0 {
                w.remove(&self.handle);
            }
        }
    }
}

/// Refresh the lifecycle locks this process works for every `lock_expire / 3`, for as long as
/// the `Ops` lives.
pub(crate) fn start_refresher(ops: &Arc<Ops>) {
    let weak: Weak<Ops> = Arc::downgrade(ops);
    let period = (ops.locks.config().expire / 3).max(Duration::from_millis(10));
    let spawned = std::thread::Builder::new()
        .name("vikingfs-lifecycle-refresh".into())
        .spawn(move || loop {
            std::thread::sleep(period);
            let Some(ops) = weak.upgrade() else { return };
            let handles: Vec<String> = ops.working.lock().keys().cloned().collect();
            for h in handles {
                if let Err(e) = ops.lifecycle_keep(&h) {
                    tracing::warn!(handle = h, "refreshing a lifecycle lock: {}", Chain(&e));
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("no lifecycle refresh thread: {e}");
    }
}

impl Ops {
    /// Register a job of lifecycle `handle` as running in this process until the returned
    /// guard drops; meanwhile its lock is refreshed in the background.
    pub(crate) fn lifecycle_work(&self, handle: &str) -> Working<'_> {
        *self.working.lock().entry(handle.to_string()).or_insert(0) += 1;
        Working {
            ops: self,
            handle: handle.to_string(),
        }
    }
}
