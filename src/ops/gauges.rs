//! What the stores say, for the metrics endpoint ([`crate::metrics::Gauges`]): queue depth
//! and dead jobs per queue, the index's size, the state of each derived store, a full disk.
//! Read at each scrape; a store that cannot be read leaves its gauges as they were.

use crate::metrics::{Gauges, Metrics};
use crate::workspace::Workspace;

use super::Ops;

/// Why the filesystem holding `ws` takes (almost) no more: too few bytes (writes answer
/// ENOSPC, the reserve serves rm, rmdir and truncate), or no inodes (creates answer ENOSPC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// The free bytes left.
    Bytes(u64),
    Inodes,
}

/// Whether the filesystem holding `ws` is full, and of what.
pub fn disk_full(ws: &Workspace) -> Option<Full> {
    let dir = ws.internal_dir();
    let (free, total) = super::reserve::room(&dir)?;
    if free < (16 << 20).min(total / 50) {
        return Some(Full::Bytes(free));
    }
    // A filesystem with a fixed inode table (ext4) can run out of them with bytes to spare.
    // Almost none, as for bytes: the lock files of work in flight come and go, so the last
    // few are free one moment and taken the next.
    let st = crate::sys::statvfs(&dir).ok()?;
    let few = (st.f_files / 50).clamp(1, 1024);
    (st.f_files > 0 && st.f_favail < few).then_some(Full::Inodes)
}

const STATES: [&str; 3] = ["ok", "rebuilding", "damaged"];

impl Gauges for Ops {
    fn refresh(&self, m: &Metrics) {
        if let Ok(stats) = self.queue().stats() {
            let set = |queue: &str, state: &str, n: u64| {
                m.queue_jobs
                    .with_label_values(&[queue, state])
                    .set(i64::try_from(n).unwrap_or(i64::MAX))
            };
            // Every queue has its gauges from the first scrape (0 until it has had a job, and
            // again once it is empty: the queue's stats name only queues with rows).
            for q in crate::queue::KNOWN_QUEUES {
                for state in ["pending", "running", "dead"] {
                    set(q, state, 0);
                }
            }
            for q in stats {
                set(&q.queue, "pending", q.pending);
                set(&q.queue, "running", q.running + q.expired);
                set(&q.queue, "dead", q.dead);
            }
        }
        if let Ok(st) = self.index().stats() {
            m.index_records
                .set(i64::try_from(st.records).unwrap_or(i64::MAX));
        }
        let ws = self.workspace();
        m.index_bytes
            .set(i64::try_from(crate::db::size_on_disk(&ws.index_db())).unwrap_or(i64::MAX));
        for (store, path, rebuilding) in [
            ("index", ws.index_db(), self.rebuilding()),
            ("queue", ws.queue_db(), false),
        ] {
            let now = if crate::db::damage(&path).is_some() {
                "damaged"
            } else if rebuilding {
                "rebuilding"
            } else {
                "ok"
            };
            for s in STATES {
                m.store_state
                    .with_label_values(&[store, s])
                    .set(i64::from(s == now));
            }
        }
        m.disk_full.set(i64::from(disk_full(ws).is_some()));
    }
}
