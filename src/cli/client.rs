//! The command's client of a live daemon: HTTP/1.1 (hyper's client) over the workspace's
//! owner-only Unix socket (`WORKSPACE/.vikingfs/daemon.sock`), on a current-thread runtime.
//! A command that finds one asks it ([`super::remote`]) instead of opening the stores: the
//! stores are open once, the model is loaded once, and the configuration in force is the
//! daemon's.
//!
//! - [`Daemon::find`]: no socket, or a socket nobody accepts on (a dead daemon's), is no
//!   daemon; the command then works as without one.
//! - [`Daemon::call`]: one request; the envelope's error becomes a [`RemoteError`] carrying
//!   the operation's own message (the command prints it as it would its own error) and its
//!   code (`CONFLICT`: a busy lock, exit 75).

use std::cell::RefCell;
use std::path::PathBuf;

use anyhow::{bail, Context};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::Value;

use super::Ctx;
use crate::server::auth::USER_HEADER;
use crate::server::SOCKET_NAME;

/// A daemon's answer that is an error: OpenViking's code and the message.
#[derive(Debug, Clone)]
pub struct RemoteError {
    pub code: String,
    pub message: String,
}

impl std::fmt::Display for RemoteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RemoteError {}

impl RemoteError {
    /// A lock held by someone else (the command exits 75, as without a daemon).
    pub fn is_busy(&self) -> bool {
        self.code == "CONFLICT"
    }
}

/// Whether `e` is a daemon's answer that a lock is busy.
pub fn is_busy(e: &anyhow::Error) -> bool {
    e.downcast_ref::<RemoteError>()
        .is_some_and(RemoteError::is_busy)
}

/// A connection to the daemon serving the command's workspace.
pub struct Daemon {
    runtime: tokio::runtime::Runtime,
    sender: RefCell<SendRequest<Full<Bytes>>>,
    /// Who the requests are for (`X-OpenViking-User`): the command's configured user.
    user: String,
    pub pid: u32,
    /// How the daemon's configuration names its model ([`crate::embed::describe`]).
    pub model: String,
}

impl Daemon {
    /// The daemon serving `ctx`'s workspace, if one is live; a note on stderr when its model
    /// is not the one this command's configuration names (the daemon's is in force).
    pub fn find(ctx: &Ctx) -> anyhow::Result<Option<Daemon>> {
        let socket = ctx
            .workspace_path
            .join(crate::workspace::INTERNAL_DIR)
            .join(SOCKET_NAME);
        let Some(d) = Self::connect(socket, &ctx.config.user)? else {
            return Ok(None);
        };
        let own = crate::embed::describe(&ctx.config.embedding);
        if d.model != own {
            eprintln!(
                "vikingfs: note: the daemon (pid {}) serves this workspace with model {}; this \
                 command's configuration names {own}, which is not used",
                d.pid, d.model
            );
        }
        Ok(Some(d))
    }

    /// Connect to `socket` and greet the daemon there; `None` when nothing serves it.
    fn connect(socket: PathBuf, user: &str) -> anyhow::Result<Option<Daemon>> {
        if std::fs::symlink_metadata(&socket).is_err() {
            return Ok(None);
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .context("the daemon's client")?;
        let stream = match runtime.block_on(tokio::net::UnixStream::connect(&socket)) {
            Ok(s) => s,
            // A dead daemon's socket (refused), or one removed meanwhile.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ECONNREFUSED | libc::ENOENT | libc::ENOTSOCK)
                ) =>
            {
                return Ok(None)
            }
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "the daemon's socket {} (it is its owner's only: run as that user)",
                    socket.display()
                )))
            }
        };
        let (sender, conn) = runtime
            .block_on(hyper::client::conn::http1::handshake(TokioIo::new(stream)))
            .context("the daemon's socket")?;
        // Polled whenever a request is (a current-thread runtime runs it inside block_on).
        runtime.spawn(conn);
        let mut d = Daemon {
            runtime,
            sender: RefCell::new(sender),
            user: user.to_string(),
            pid: 0,
            model: String::new(),
        };
        let hello = match d.call("GET", "/vikingfs/v1/hello", None) {
            Ok(v) => v,
            // An older daemon without the command's routes: work without it.
            Err(e)
                if e.downcast_ref::<RemoteError>()
                    .is_some_and(|r| r.code == "NOT_FOUND") =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        d.pid = hello["pid"].as_u64().unwrap_or(0) as u32;
        d.model = hello["model"].as_str().unwrap_or_default().to_string();
        Ok(Some(d))
    }

    /// `method path` with `body` as JSON; the envelope's `result`, or its error as a
    /// [`RemoteError`].
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let bytes = match body {
            Some(v) => serde_json::to_vec(v)?,
            None => Vec::new(),
        };
        self.send(method, path, "application/json", bytes)
    }

    /// `method path` with `bytes` as its body (of `content_type`).
    pub fn send(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        bytes: Vec<u8>,
    ) -> anyhow::Result<Value> {
        let req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, "localhost")
            .header(hyper::header::CONTENT_TYPE, content_type)
            .header(USER_HEADER, &self.user)
            .body(Full::new(Bytes::from(bytes)))
            .context("the daemon's request")?;
        let mut sender = self.sender.borrow_mut();
        let (status, body) = self
            .runtime
            .block_on(async {
                sender.ready().await?;
                let resp = sender.send_request(req).await?;
                let status = resp.status();
                let body = resp.into_body().collect().await?.to_bytes();
                Ok::<_, hyper::Error>((status, body))
            })
            .context("the daemon stopped answering")?;
        let v: Value = serde_json::from_slice(&body).with_context(|| {
            format!(
                "the daemon's answer ({status}): {}",
                String::from_utf8_lossy(&body)
            )
        })?;
        if v["status"] == "ok" {
            return Ok(v["result"].clone());
        }
        let err = &v["error"];
        if err.is_null() {
            bail!("the daemon's answer ({status}) is not OpenViking's envelope: {v}");
        }
        Err(RemoteError {
            code: err["code"].as_str().unwrap_or("UNKNOWN").to_string(),
            message: err["message"].as_str().unwrap_or_default().to_string(),
        }
        .into())
    }
}

/// `s` as a query string's value (RFC 3986's unreserved characters kept).
pub fn query_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
