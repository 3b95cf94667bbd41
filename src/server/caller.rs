//! Who a request is for, as the history's entries name it. The daemon does the work of every
//! caller, so its own pid and command line would say nothing: a request over the Unix socket
//! (the CLI) is done on behalf of the peer process (`SO_PEERCRED`), whose command line the
//! entries keep; one over TCP names the caller instead — `api: user U (role), METHOD PATH`.
//!
//! The middleware scopes a [`Caller`] around each request's task; the caller's identity
//! fills in its user once authenticated ([`note_user`]); [`super::blocking`] carries it onto
//! the blocking thread the operation runs on ([`crate::process::on_behalf_of`],
//! [`crate::process::for_caller`]).

use std::sync::Arc;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use parking_lot::Mutex;

/// The peer process of a Unix-socket connection.
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub u32);

/// One request's caller.
#[derive(Debug, Default)]
pub struct Caller {
    peer: Option<u32>,
    what: String,
    who: Option<String>,
}

tokio::task_local! {
    static CALLER: Arc<Mutex<Caller>>;
}

/// Scope the request's [`Caller`] around it.
pub async fn scope(req: Request, next: Next) -> Response {
    let c = Caller {
        peer: req.extensions().get::<Peer>().map(|p| p.0),
        what: format!("{} {}", req.method(), req.uri().path()),
        who: None,
    };
    CALLER.scope(Arc::new(Mutex::new(c)), next.run(req)).await
}

/// The request's caller is `user` with `role`.
pub fn note_user(user: &str, role: &str) {
    let _ = CALLER.try_with(|c| c.lock().who = Some(format!("user {user} ({role})")));
}

/// What the blocking work of this request runs as: (the peer process, the caller's name).
pub fn current() -> (Option<u32>, Option<String>) {
    CALLER
        .try_with(|c| {
            let c = c.lock();
            match c.peer {
                // The CLI's own command line says it all.
                Some(pid) => (Some(pid), None),
                None => {
                    let who = c.who.as_deref().unwrap_or("unauthenticated");
                    (None, Some(format!("api: {who}, {}", c.what)))
                }
            }
        })
        .unwrap_or((None, None))
}

/// Run `f` as the caller `current` said.
pub fn run_as<T>(caller: (Option<u32>, Option<String>), f: impl FnOnce() -> T) -> T {
    let (peer, name) = caller;
    let inner = move || crate::process::for_caller(name, f);
    match peer {
        Some(pid) => crate::process::on_behalf_of(pid, inner),
        None => inner(),
    }
}
