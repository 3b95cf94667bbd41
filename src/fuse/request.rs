//! One FUSE request's bookkeeping, named once: its span, its duration, its errors.

use std::ffi::OsStr;

use fuser::{Errno, INodeNo, Request};
use prometheus::Histogram;
use tracing::field::{display, Empty};
use tracing::Span;

use super::reply::{Answer, AttrTtl};
use crate::error::Chain;
use crate::fs::{FsError, FsResult, ToErrno};

/// A request on its way to its answer.
pub(super) struct Call {
    op: &'static str,
    /// `fuse{op, req, ino, name, pid}`: every log line of the request carries it when debug
    /// logging is on.
    span: Span,
    /// The request's id, inode and pid again, for its error line at any level: a span is
    /// made only at debug (it costs every request), an error line names its request anyway.
    who: (u64, u64, u32),
    took: Histogram,
}

impl Call {
    /// Request `req`, the operation `op` on inode `ino` (for a name in a directory: the
    /// directory).
    pub fn new(op: &'static str, req: &Request, ino: INodeNo) -> Call {
        Call {
            op,
            who: (req.unique().0, ino.0, req.pid()),
            span: tracing::debug_span!(
                "fuse",
                op,
                req = req.unique().0,
                ino = ino.0,
                name = Empty,
                pid = req.pid()
            ),
            took: crate::metrics::get().fuse_requests.with_label_values(&[op]),
        }
    }

    /// The name the request is about (a directory entry, a link, an extended attribute).
    pub fn name(self, name: &OsStr) -> Call {
        if !self.span.is_disabled() {
            self.span.record("name", display(name.to_string_lossy()));
        }
        self
    }

    pub fn enter(&self) -> tracing::span::Entered<'_> {
        self.span.enter()
    }

    /// The process that asked.
    pub fn pid(&self) -> u32 {
        self.who.2
    }

    /// Run `f` and answer with what it returns, both timed.
    pub fn answer<T, R: Answer<T>>(
        &self,
        ttl: &dyn AttrTtl,
        mut reply: R,
        f: impl FnOnce(&mut R) -> FsResult<T>,
    ) {
        crate::metrics::timed(&self.took, || match f(&mut reply) {
            Ok(v) => reply.ok(ttl, v),
            Err(e) => reply.fail(self.errno(e)),
        })
    }

    /// The errno to answer, logged at the level the error carries (a missing name is debug, a
    /// busy lock info, a failing disk a warning, a damaged store an error) and counted.
    fn errno(&self, e: FsError) -> Errno {
        let (op, (req, ino, pid)) = (self.op, self.who);
        crate::error::log_at!(e.level(), op, req, ino, pid, error = %Chain(&e), "request failed");
        let n = e.errno();
        crate::metrics::get()
            .fuse_errors
            .with_label_values(&[op, &crate::metrics::errno_name(n)])
            .inc();
        Errno::from_i32(n)
    }
}
