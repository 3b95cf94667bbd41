//! Rebuilding the index from the files when it was lost: created anew (missing, or moved
//! aside as damaged) or recreated (an older format).
//!
//! The rebuild is a [`Ops::reindex`] of the whole namespace, which is idempotent and safe
//! beside live operations (it writes each record under the lock a job's write-back takes and
//! only if the file still has the version it read). Its progress is kept in the index's meta
//! table under [`META_KEY`] as `done/total` files: set before the first file, updated as it
//! goes, cleared at the end — so `vikingfs status` (another process) shows how far it is, and
//! a daemon killed midway finds the key at its next start and rebuilds again.
//!
//! A CLI command rebuilds before it goes on (it needs the index) unless a daemon of the
//! workspace is rebuilding it already; the mount daemon rebuilds in a thread of its own while
//! it serves: `find` answers from what is rebuilt so far, and `vikingfs wait` waits for it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{Ops, Result};
use crate::error::Chain;
use crate::index::Opened;
use crate::uri::VPath;

pub use super::stores::{recorded, META_KEY};

/// How often a running rebuild writes its progress.
const SAVE_EVERY: Duration = Duration::from_secs(1);

/// A rebuild running in this process.
#[derive(Debug, Default)]
pub struct Progress {
    running: AtomicBool,
}

impl Ops {
    /// Whether another process (a daemon with workers, running now) is the one rebuilding:
    /// the index was not just lost by this open, and a rebuild is recorded.
    pub(crate) fn rebuilt_elsewhere(&self) -> bool {
        !matches!(self.index.opened(), Opened::Created | Opened::Recreated)
            && crate::daemon::running(&self.ws)
                .is_ok_and(|ds| ds.iter().any(|d| d.workers && d.pid != std::process::id()))
    }

    /// Wait until no rebuild is recorded, telling `progress` (done, total) as it goes;
    /// `false` when `deadline` came first.
    pub fn wait_rebuilt(&self, deadline: Instant, progress: &mut dyn FnMut(u64, u64)) -> bool {
        while let Some(p) = recorded(&self.index) {
            if let Some((done, total)) = p {
                progress(done, total);
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        true
    }

    /// Whether a rebuild runs in this process now.
    pub fn rebuilding(&self) -> bool {
        self.rebuild.running.load(Ordering::Relaxed)
    }

    /// Rebuild now, telling `progress` (done, total) files.
    pub(crate) fn rebuild_index(&self, progress: &mut dyn FnMut(u64, u64)) -> Result<()> {
        self.rebuild.running.store(true, Ordering::Relaxed);
        let mut saved = Instant::now();
        let r = self.reindex(&VPath::root(), &mut |done, total| {
            crate::crash_point!("index.rebuild.file");
            if done == total || saved.elapsed() >= SAVE_EVERY {
                saved = Instant::now();
                // Progress is for people; a failed write of it changes nothing else.
                let _ = self.index.set_meta(META_KEY, &format!("{done}/{total}"));
            }
            progress(done, total);
        });
        self.rebuild.running.store(false, Ordering::Relaxed);
        let rep = r?;
        self.index.set_meta(META_KEY, "")?;
        tracing::info!(files = rep.files, "rebuilt the index from the files");
        Ok(())
    }

    /// [`Ops::rebuild_index`] in a thread of its own; a failure is logged, and the next start
    /// rebuilds again (the meta key stays).
    pub(crate) fn rebuild_in_background(&self) {
        let ops = self.arc();
        // A new workspace's index is created empty: rebuilding it is routine (info); one
        // recreated (an older format, damaged meta) is worth a warning.
        let routine = matches!(self.index.opened(), Opened::Created);
        self.rebuild.running.store(true, Ordering::Relaxed);
        let spawned = std::thread::Builder::new()
            .name("vfs-rebuild".into())
            .spawn(move || {
                if routine {
                    tracing::info!("building the index from the files in the background");
                } else {
                    tracing::warn!("rebuilding the index from the files in the background");
                }
                let mut logged = Instant::now();
                let r = ops.rebuild_index(&mut |done, total| {
                    if logged.elapsed() >= Duration::from_secs(10) {
                        logged = Instant::now();
                        tracing::info!(done, total, "rebuilding the index from the files");
                    }
                });
                if let Err(e) = r {
                    ops.rebuild.running.store(false, Ordering::Relaxed);
                    tracing::error!(
                        "rebuilding the index: {}; the next start tries again",
                        Chain(&e)
                    );
                }
            });
        if let Err(e) = spawned {
            self.rebuild.running.store(false, Ordering::Relaxed);
            tracing::error!("cannot start the index rebuild: {e}; the next start tries again");
        }
    }
}
