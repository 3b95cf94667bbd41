//! The thread pool FUSE requests run on, so the loop that reads /dev/fuse never waits: a
//! request stuck on a busy lock holds one worker, and every other path keeps answering.

use std::thread::JoinHandle;

use crossbeam_channel::{unbounded, Sender};
use parking_lot::Mutex;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A fixed set of worker threads fed from one queue.
pub struct Pool {
    tx: Mutex<Option<Sender<Job>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Pool {
    pub fn new(n: usize) -> Self {
        let (tx, rx) = unbounded::<Job>();
        let threads = (0..n.max(1))
            .map(|i| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name(format!("vikingfs-op-{i}"))
                    .spawn(move || {
                        while let Ok(job) = rx.recv() {
                            job();
                        }
                    })
                    .expect("spawn worker thread")
            })
            .collect();
        Pool {
            tx: Mutex::new(Some(tx)),
            threads: Mutex::new(threads),
        }
    }

    /// Run `job` on a worker; after [`Pool::finish`] it runs on the caller's thread.
    pub fn spawn(&self, job: impl FnOnce() + Send + 'static) {
        let tx = self.tx.lock().clone();
        match tx {
            Some(tx) => {
                if let Err(e) = tx.send(Box::new(job)) {
                    (e.into_inner())();
                }
            }
            None => job(),
        }
    }

    /// Let queued and running requests finish, then stop the workers.
    pub fn finish(&self) {
        self.tx.lock().take();
        let threads = std::mem::take(&mut *self.threads.lock());
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_blocked_job_does_not_stall_others() {
        let pool = Pool::new(2);
        let (block_tx, block_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel();
        pool.spawn(move || {
            block_rx.recv().unwrap();
        });
        let d = done_tx.clone();
        pool.spawn(move || d.send(1).unwrap());
        assert_eq!(
            done_rx.recv_timeout(std::time::Duration::from_secs(60)),
            Ok(1)
        );
        block_tx.send(()).unwrap();
        pool.finish();
    }
}
