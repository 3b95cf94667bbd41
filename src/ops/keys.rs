//! The jobs' vocabulary: each queue's coalescing key and payload, and which directories get
//! summaries. The one place the locked operations (which queue work) and the derivers (which
//! run it) agree on what a job is; a leaf of `ops`.

use serde_json::json;

use crate::index::Level;
use crate::queue;
use crate::uri::VPath;

pub use crate::uri::{ABSTRACT_FILE, OVERVIEW_FILE};

/// `embed:{uri}`.
pub fn embed_key(p: &VPath) -> String {
    format!("embed:{}", p.uri())
}

/// `semantic:{uri}`.
pub fn semantic_key(dir: &VPath) -> String {
    format!("semantic:{}", dir.uri())
}

/// A job as `Queue::enqueue_many` takes it.
pub use crate::queue::NewJob;

pub fn embed_job(p: &VPath, lifecycle: Option<&str>) -> NewJob {
    NewJob::new(
        queue::EMBEDDING,
        Some(embed_key(p)),
        json!({ "uri": p.uri(), "lifecycle": lifecycle }),
    )
}

/// `dense:{level}:{uri}`.
pub fn dense_key(p: &VPath, level: Level) -> String {
    format!("dense:{}:{}", level.as_str(), p.uri())
}

pub fn dense_job(p: &VPath, level: Level) -> NewJob {
    NewJob::new(
        queue::DENSE,
        Some(dense_key(p, level)),
        json!({ "uri": p.uri(), "level": level as u8 }),
    )
}

pub fn semantic_job(dir: &VPath, lifecycle: Option<&str>) -> NewJob {
    NewJob::new(
        queue::SEMANTIC,
        Some(semantic_key(dir)),
        json!({ "dir": dir.uri(), "lifecycle": lifecycle }),
    )
}

/// Does a directory get a summary? Every directory but those that hold several users' trees
/// (the namespace root and `user`): a summary quotes its children's text and names, and one
/// user must never read another's through a shared parent.
pub(crate) fn has_summary(dir: &VPath) -> bool {
    !dir.holds_user_trees()
}

/// `rederive:{uri}`.
pub fn rederive_key(dir: &VPath) -> String {
    format!("rederive:{}", dir.uri())
}

pub fn rederive_job(dir: &VPath) -> NewJob {
    NewJob::new(
        queue::REDERIVE,
        Some(rederive_key(dir)),
        json!({ "dir": dir.uri() }),
    )
}
