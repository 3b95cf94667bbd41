//! Who a request is for, as the history's entries name it. The daemon does the work of every
//! caller, so its own pid and command line would say nothing: a request over the Unix socket
//! (the CLI) is done on behalf of the peer process (`SO_PEERCRED`), whose command line the
//! entries keep; one over TCP names the caller instead — `api: user U (role), key K, METHOD
//! PATH, request R` — and an MCP tool call names its client and the call — `mcp: client C,
//! tool T, call R; user U (role), key K` — in place of a pid (the entry has none).
//!
//! Invariant: each API request, and each MCP tool call (all the requests it makes), has a name
//! of its own (`R`, random), so that `undo` — which undoes the newest run of one command's
//! entries — takes one request's or one tool call's changes, never every caller's since the
//! daemon started (they all share its pid).
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

/// An MCP tool call that a request is part of (`client C, tool T, call R`, or `user-agent A,
/// …` when the client's name is not known): set by the MCP
/// server on the requests it sends through the router in this process.
#[derive(Clone, Debug)]
pub struct McpCall(pub String);

/// The same over the daemon's owner-only Unix socket (`vikingfs mcp` through a daemon), as a
/// header: believed only from a peer on that socket.
pub const MCP_CALL_HEADER: &str = "x-vikingfs-mcp-call";

/// One request's caller.
#[derive(Debug, Default)]
pub struct Caller {
    peer: Option<u32>,
    what: String,
    who: Option<String>,
    /// The API key's id (`root key` for the root key).
    key: Option<String>,
    /// The MCP tool call this request is part of.
    mcp: Option<String>,
    /// This request's own name.
    request: String,
}

tokio::task_local! {
    static CALLER: Arc<Mutex<Caller>>;
}

/// Scope the request's [`Caller`] around it.
pub async fn scope(req: Request, next: Next) -> Response {
    let peer = req.extensions().get::<Peer>().map(|p| p.0);
    let mcp = req
        .extensions()
        .get::<McpCall>()
        .map(|m| m.0.clone())
        .or_else(|| {
            // Only the owner's socket may say so: anyone else could name any client.
            peer?;
            let v = req.headers().get(MCP_CALL_HEADER)?.to_str().ok()?;
            Some(v.to_string())
        });
    let c = Caller {
        peer,
        what: format!("{} {}", req.method(), req.uri().path()),
        who: None,
        key: None,
        mcp,
        request: new_name(),
    };
    CALLER.scope(Arc::new(Mutex::new(c)), next.run(req)).await
}

/// The request's caller is `user` with `role`.
pub fn note_user(user: &str, role: &str) {
    let _ = CALLER.try_with(|c| c.lock().who = Some(format!("user {user} ({role})")));
}

/// The request's caller used the API key `id` (`root key` for the root key).
pub fn note_key(id: &str) {
    let _ = CALLER.try_with(|c| c.lock().key = Some(id.to_string()));
}

/// A new name for a request or a tool call: 8 random hex digits.
pub fn new_name() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_string()
}

/// What the blocking work of this request runs as: (the peer process, the caller's name).
pub fn current() -> (Option<u32>, Option<String>) {
    CALLER
        .try_with(|c| {
            let c = c.lock();
            let who = c.who.as_deref().unwrap_or("unauthenticated");
            let key = c
                .key
                .as_deref()
                .map(|k| format!(", key {k}"))
                .unwrap_or_default();
            match (&c.mcp, c.peer) {
                // A tool call is one command, whichever requests it makes.
                (Some(call), _) => (None, Some(format!("mcp: {call}; {who}{key}"))),
                // The CLI's own command line says it all.
                (None, Some(pid)) => (Some(pid), None),
                (None, None) => (
                    None,
                    Some(format!(
                        "api: {who}{key}, {}, request {}",
                        c.what, c.request
                    )),
                ),
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
