//! What an operation may finish after its caller has been answered.
//!
//! Once a rename, unlink or create has changed the files (and, for indexed files, the records),
//! what is left — closing the journal intent, releasing the locks, queueing the parents'
//! summaries — changes nothing the caller can observe through the mount, so the mount answers
//! first and does that right after, on the same thread, while the caller goes on with its next
//! call. A caller that touches the same path next simply waits for the lock (in-process waits
//! are woken by the release, not polled), so the order of a program's calls is kept.
//!
//! A face opens an [`AfterReply`] scope around one request; without one (the CLI, recovery,
//! tests) the work runs at once and its error is returned as before. The order inside an
//! operation's tail is kept (an intent is closed before its lock is released). A lock moved
//! into a tail is still released on every path: the scope runs its tails when dropped, and if
//! the thread is unwinding it drops them unrun, which releases their guards.

use std::cell::RefCell;
use std::marker::PhantomData;

type Tail = Box<dyn FnOnce()>;

thread_local! {
    static TAILS: RefCell<Option<Vec<Tail>>> = const { RefCell::new(None) };
}

/// One request's scope: tails deferred while it is open run when it is dropped.
#[must_use = "the tails run when the scope is dropped"]
pub struct AfterReply {
    /// Whether this scope opened the collection (a nested one leaves it to the outer).
    outer: bool,
    /// Bound to its thread: the tails live in a thread-local.
    _not_send: PhantomData<*const ()>,
}

impl AfterReply {
    /// Open the scope on this thread (within an open one, the outer scope keeps collecting).
    pub fn begin() -> Self {
        let outer = TAILS.with(|t| {
            let mut t = t.borrow_mut();
            let outer = t.is_none();
            t.get_or_insert_with(Vec::new);
            outer
        });
        AfterReply {
            outer,
            _not_send: PhantomData,
        }
    }
}

impl Drop for AfterReply {
    fn drop(&mut self) {
        if !self.outer {
            return;
        }
        // Taken first: a tail that defers more work runs it at once.
        let tails = TAILS.with(|t| t.borrow_mut().take()).unwrap_or_default();
        if std::thread::panicking() {
            // Dropping them releases their locks; running them could panic again (abort).
            drop(tails);
            return;
        }
        for tail in tails {
            tail();
        }
    }
}

/// Whether a reply scope is open on this thread: work handed on now is finished after the
/// reply (by this thread's scope, or by a thread of the operation's own).
pub(crate) fn in_scope() -> bool {
    TAILS.with(|t| t.borrow().is_some())
}

/// Run `work` after the reply when a scope is open on this thread (logging its error as
/// `what`: a warning whatever the error, since the request it belongs to succeeded), else
/// now, returning its result.
pub(crate) fn after_reply<E: std::error::Error + 'static>(
    what: &'static str,
    work: impl FnOnce() -> Result<(), E> + 'static,
) -> Result<(), E> {
    let mut work = Some(work);
    let deferred = TAILS.with(|t| match t.borrow_mut().as_mut() {
        Some(tails) => {
            let work = work.take().expect("taken once");
            tails.push(Box::new(move || {
                if let Err(e) = work() {
                    tracing::warn!(
                        what,
                        error = %crate::error::Chain(&e),
                        "finishing an operation after its reply"
                    );
                }
            }));
            true
        }
        None => false,
    });
    match work {
        Some(work) if !deferred => work(),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::rc::Rc;

    #[test]
    fn without_a_scope_work_runs_at_once_and_returns_its_error() {
        let ran = Rc::new(RefCell::new(false));
        let r = ran.clone();
        let out: Result<(), io::Error> = after_reply("t", move || {
            *r.borrow_mut() = true;
            Err(io::Error::other("boom"))
        });
        assert!(*ran.borrow());
        assert_eq!(out.unwrap_err().to_string(), "boom");
    }

    #[test]
    fn in_a_scope_work_runs_in_order_when_it_closes() {
        let log = Rc::new(RefCell::new(Vec::new()));
        {
            let _scope = AfterReply::begin();
            for i in 0..3 {
                let l = log.clone();
                let out: Result<(), io::Error> = after_reply("t", move || {
                    l.borrow_mut().push(i);
                    Ok(())
                });
                assert!(out.is_ok());
            }
            assert!(log.borrow().is_empty(), "deferred while the scope is open");
        }
        assert_eq!(*log.borrow(), vec![0, 1, 2]);
        // The scope is gone: work runs at once again.
        let l = log.clone();
        let _: Result<(), io::Error> = after_reply("t", move || {
            l.borrow_mut().push(9);
            Ok(())
        });
        assert_eq!(log.borrow().last(), Some(&9));
    }

    #[test]
    fn a_panic_drops_the_tails_unrun() {
        struct Flag(Rc<RefCell<&'static str>>);
        impl Drop for Flag {
            fn drop(&mut self) {
                if *self.0.borrow() == "pending" {
                    *self.0.borrow_mut() = "dropped";
                }
            }
        }
        let state = Rc::new(RefCell::new("pending"));
        let s = state.clone();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _scope = AfterReply::begin();
            let flag = Flag(s);
            let _: Result<(), io::Error> = after_reply("t", move || {
                *flag.0.borrow_mut() = "ran";
                Ok(())
            });
            panic!("request handler panicked");
        }));
        assert!(r.is_err());
        assert_eq!(
            *state.borrow(),
            "dropped",
            "dropped (guards released), not run"
        );
        assert!(TAILS.with(|t| t.borrow().is_none()), "scope closed");
    }
}
