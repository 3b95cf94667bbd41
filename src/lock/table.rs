//! The in-process table of held and pending locks.
//!
//! Threads of one process settle their conflicts here, under one mutex, before touching the
//! disk: a waiter sleeps on the manager's condvar and wakes when a guard is released, and two
//! threads never race each other through the on-disk protocol.
//!
//! Foreground requests that are blocked are listed as *waiting*; a background request (a job's
//! write-back) does not get past a waiting foreground request it conflicts with, so a stream
//! of short background locks below a directory cannot starve a user's `rm -r` of it.

use std::sync::Arc;

use super::{conflicts, LockKind};
use crate::uri::VPath;

#[derive(Debug)]
pub(crate) struct Entry {
    pub path: VPath,
    pub kind: LockKind,
    /// Owner handle: entries of the same handle never conflict (nested locks).
    pub handle: u64,
    /// The guard that will remove the entry.
    pub guard: u64,
    pub owner: Arc<str>,
}

#[derive(Debug, Default)]
pub(crate) struct Table {
    entries: Vec<Entry>,
    /// Blocked foreground requests (their `guard` is the id the request will hold).
    waiting: Vec<Entry>,
}

impl Table {
    /// The first entry of another handle that conflicts with any request.
    pub fn conflict(&self, reqs: &[(VPath, LockKind)], handle: u64) -> Option<&Entry> {
        self.entries.iter().find(|e| {
            e.handle != handle && reqs.iter().any(|(p, k)| conflicts(p, *k, &e.path, e.kind))
        })
    }

    /// The first blocked foreground request of another handle that conflicts with any request.
    pub fn conflict_waiting(&self, reqs: &[(VPath, LockKind)], handle: u64) -> Option<&Entry> {
        self.waiting.iter().find(|e| {
            e.handle != handle && reqs.iter().any(|(p, k)| conflicts(p, *k, &e.path, e.kind))
        })
    }

    /// List a foreground request as blocked, until [`Table::stop_waiting`].
    pub fn wait(&mut self, reqs: &[(VPath, LockKind)], handle: u64, guard: u64, owner: &Arc<str>) {
        self.waiting.extend(reqs.iter().map(|(p, k)| Entry {
            path: p.clone(),
            kind: *k,
            handle,
            guard,
            owner: owner.clone(),
        }));
    }

    pub fn stop_waiting(&mut self, guard: u64) {
        self.waiting.retain(|e| e.guard != guard);
    }

    pub fn insert(
        &mut self,
        reqs: &[(VPath, LockKind)],
        handle: u64,
        guard: u64,
        owner: &Arc<str>,
    ) {
        self.entries.extend(reqs.iter().map(|(p, k)| Entry {
            path: p.clone(),
            kind: *k,
            handle,
            guard,
            owner: owner.clone(),
        }));
    }

    pub fn remove_guard(&mut self, guard: u64) {
        self.entries.retain(|e| e.guard != guard);
    }
}
