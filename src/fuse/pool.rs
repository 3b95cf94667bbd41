//! The thread pool FUSE requests run on, so the loop that reads /dev/fuse never waits: a
//! request stuck on a busy lock holds one worker, and every other path keeps answering.

use std::collections::VecDeque;
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The requests waiting for a worker. A mutex and a condition variable rather than a channel
/// that spins: an idle worker sleeps in the kernel at once instead of calling sched_yield
/// while it waits, which on a small machine took CPU from the request being answered.
#[derive(Default)]
struct Backlog {
    jobs: Mutex<(VecDeque<Job>, bool)>,
    cv: Condvar,
}

impl Backlog {
    /// The next job, or `None` once the pool is closed and drained.
    fn next(&self) -> Option<Job> {
        let mut g = self.jobs.lock();
        loop {
            if let Some(job) = g.0.pop_front() {
                return Some(job);
            }
            if g.1 {
                return None;
            }
            self.cv.wait(&mut g);
        }
    }
}

/// A fixed set of worker threads fed from one queue.
pub struct RequestPool {
    queue: Arc<Backlog>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl RequestPool {
    pub fn new(n: usize) -> Self {
        let queue = Arc::new(Backlog::default());
        let threads = (0..n.max(1))
            .map(|i| {
                let q = queue.clone();
                std::thread::Builder::new()
                    .name(format!("vikingfs-op-{i}"))
                    .spawn(move || {
                        while let Some(job) = q.next() {
                            job();
                        }
                    })
                    .expect("spawn worker thread")
            })
            .collect();
        RequestPool {
            queue,
            threads: Mutex::new(threads),
        }
    }

    /// Run `job` on a worker; after [`RequestPool::finish`] it runs on the caller's thread.
    pub fn spawn(&self, job: impl FnOnce() + Send + 'static) {
        let mut g = self.queue.jobs.lock();
        if g.1 {
            drop(g);
            return job();
        }
        g.0.push_back(Box::new(job));
        drop(g);
        self.queue.cv.notify_one();
    }

    /// Let queued and running requests finish, then stop the workers.
    pub fn finish(&self) {
        self.queue.jobs.lock().1 = true;
        self.queue.cv.notify_all();
        let threads = std::mem::take(&mut *self.threads.lock());
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for RequestPool {
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
        let pool = RequestPool::new(2);
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
