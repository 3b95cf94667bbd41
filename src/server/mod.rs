//! The daemon's server face: OpenViking 0.5.2's HTTP API (and MCP at `/mcp`) over TCP, and the
//! same router on the workspace's owner-only Unix socket (`WORKSPACE/.vikingfs/daemon.sock`),
//! which the `vikingfs` command talks to when a daemon serves its workspace.
//!
//! - Every route is a thin adapter: it checks the caller ([`auth`]), parses ([`extract`]),
//!   calls the same `ops` operation the mount and the CLI call, in the blocking pool
//!   ([`blocking`]), and answers in OpenViking's envelope ([`reply`]). No route has rules of
//!   its own about locks, jobs or the index.
//! - The server costs nothing when idle: a two-thread runtime parked on its listeners.
//! - Abuse: bodies over `server.max_body_bytes` answer 413, a client that sends its headers
//!   too slowly is cut off after `server.header_timeout_secs` (10 s by default;
//!   an idle kept-alive connection too), a body too slowly 408 ([`limits`]), a request running
//!   longer than `server.request_timeout_secs` answers 504; one peer address is served
//!   `server.max_connections_per_peer` requests at once, `/health` whatever the load, and at
//!   most [`limits::max_connections`] connections are served at once (more wait in the
//!   kernel's backlog).

pub mod auth;
pub mod caller;
pub mod extract;
pub mod limits;
pub mod local;
pub mod mcp;
pub mod reply;
pub mod routes;
pub mod tasks;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{watch, Semaphore};

use crate::config::ServerConfig;
use crate::ops::Ops;
use crate::session::Sessions;
use auth::{Auth, Identity};
use reply::ApiError;

/// The socket's name in the workspace's internal directory.
pub const SOCKET_NAME: &str = "daemon.sock";

/// What every route works with: the daemon's engine, its sessions, who may call.
pub struct Api {
    pub ops: Arc<Ops>,
    pub sessions: Sessions,
    pub auth: Auth,
    pub tasks: tasks::Tasks,
    pub config: ServerConfig,
    pub started: Instant,
}

impl Api {
    pub fn new(ops: Arc<Ops>, config: ServerConfig) -> Arc<Api> {
        let ws = ops.workspace().clone();
        Arc::new(Api {
            sessions: Sessions::from_ops(&ops),
            auth: Auth::new(&ws, config.root_api_key.clone()),
            tasks: tasks::Tasks::default(),
            ops,
            config,
            started: Instant::now(),
        })
    }
}

/// Run `f` (an operation: locks, SQLite, files) on the blocking pool.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    // As the request's caller: the history names it (`caller`).
    let caller = caller::current();
    tokio::task::spawn_blocking(move || caller::run_as(caller, f))
        .await
        .unwrap_or_else(|e| Err(ApiError::internal(format!("request task: {e}"))))
}

/// Requests on the Unix socket carry this: the socket is owner-only, so its callers are root.
#[derive(Clone, Copy, Debug)]
pub struct Local;

/// Where to listen.
#[derive(Debug, Clone, Default)]
pub struct Listen {
    pub tcp: Option<SocketAddr>,
    pub unix: Option<PathBuf>,
}

impl Listen {
    /// Refuse to serve an open API (no key configured) beyond loopback.
    pub fn check(&self, auth: &Auth) -> anyhow::Result<()> {
        if let Some(a) = self.tcp {
            if !a.ip().is_loopback() && auth.is_open() {
                anyhow::bail!(
                    "server.host {} is not loopback and no API key is configured: set \
                     server.root_api_key (or add a key with `vikingfs key add`), or serve on \
                     127.0.0.1",
                    a.ip()
                );
            }
        }
        Ok(())
    }
}

/// A running server: stops (and waits for its requests) when dropped.
pub struct Server {
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
    tcp: Option<SocketAddr>,
    /// The socket this server bound, with its inode: removed on stop only while the name is
    /// still ours (the next daemon of the workspace may have bound its own there).
    unix: Option<(PathBuf, u64)>,
}

impl Server {
    /// Bind every listener, then serve on a runtime of its own. An address in use fails here,
    /// before the daemon reports itself ready.
    pub fn start(api: Arc<Api>, listen: &Listen) -> anyhow::Result<Server> {
        listen.check(&api.auth)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("vikingfs-api")
            .enable_all()
            .build()
            .context("start the server's runtime")?;
        let (stop, stopped) = watch::channel(false);
        let mut tcp_addr = None;
        let mut tasks = Vec::new();
        let app = routes::router(api.clone());
        if let Some(addr) = listen.tcp {
            let l = runtime
                .block_on(async { bind_tcp(addr) })
                .with_context(|| format!("listen on {addr}"))?;
            tcp_addr = l.local_addr().ok();
            if !addr.ip().is_loopback() {
                api.auth.expose();
            } else if api.auth.is_open() {
                tracing::warn!(
                    addr = %tcp_addr.unwrap_or(addr),
                    "no API key is configured: the HTTP API serves loopback only, open to \
                     every local user (set server.root_api_key or add keys with `vikingfs key \
                     add` to serve beyond loopback)"
                );
            }
            // A peer never holds more than half of all connections.
            let half = limits::max_connections() / 2;
            let per_peer = api.config.max_connections_per_peer;
            let peers = limits::Peers::new(
                per_peer.min(half),
                per_peer.saturating_mul(limits::HOLD_PER_SLOT).min(half),
            );
            tasks.push(runtime.spawn(accept_loop(
                Listener::Tcp(l, peers),
                app.clone(),
                api.config.header_timeout,
                stopped.clone(),
            )));
        }
        let mut unix = None;
        if let Some(path) = &listen.unix {
            if let Some(l) = runtime.block_on(bind_unix(path, api.ops.workspace()))? {
                let local = app.clone().layer(axum::Extension(Local));
                tasks.push(runtime.spawn(accept_loop(
                    Listener::Unix(l),
                    local,
                    api.config.header_timeout,
                    stopped.clone(),
                )));
                use std::os::unix::fs::MetadataExt;
                let ino = std::fs::metadata(path).map_or(0, |m| m.ino());
                unix = Some((path.clone(), ino));
            }
        }
        let thread = std::thread::Builder::new()
            .name("vikingfs-api".into())
            .spawn(move || {
                runtime.block_on(async {
                    for t in tasks {
                        let _ = t.await;
                    }
                });
                // Requests still in the blocking pool get a moment to finish.
                runtime.shutdown_timeout(Duration::from_secs(5));
            })
            .context("start the server's thread")?;
        Ok(Server {
            stop,
            thread: Some(thread),
            tcp: tcp_addr,
            unix,
        })
    }

    /// The TCP address it listens on (the port chosen when 0 was asked for).
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some((p, ino)) = self.unix.take() {
            use std::os::unix::fs::MetadataExt;
            if std::fs::metadata(&p).is_ok_and(|m| m.ino() == ino) {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The kernel's queue of connections not yet accepted, as deep as `net.core.somaxconn` lets
/// it be: a burst of connections (a thousand clients at once) waits there for a slot instead
/// of overflowing into resets, as it did at tokio's default of 1024 for SYNs and accepts.
const BACKLOG: u32 = 65535;

fn bind_tcp(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let s = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    // As TcpListener::bind does: a restarted daemon binds its port again at once.
    s.set_reuseaddr(true)?;
    s.bind(addr)?;
    s.listen(BACKLOG)
}

/// The socket at `path`, owner-only: a socket left by a dead daemon is replaced; a live
/// daemon's is left to it (`None`: two daemons serving one socket would split its clients,
/// and a second mount of a workspace is allowed). Live is what the daemon registry says: a
/// killed daemon's socket may still accept for a moment while its threads exit.
async fn bind_unix(
    path: &Path,
    ws: &crate::workspace::Workspace,
) -> anyhow::Result<Option<tokio::net::UnixListener>> {
    if path.exists() {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            let me = std::process::id();
            let other = crate::daemon::running(ws)
                .unwrap_or_default()
                .into_iter()
                .find(|d| d.pid != me && d.host == crate::process::host_id());
            if let Some(d) = other {
                tracing::warn!(
                    socket = %path.display(),
                    "the daemon pid {} serves this workspace's socket: the CLI's commands ask it",
                    d.pid
                );
                return Ok(None);
            }
        }
        let _ = std::fs::remove_file(path);
    }
    // Bound under a private name, made owner-only, then renamed into place: no moment at which
    // another user could connect.
    let tmp = path.with_extension(format!("sock.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let l = tokio::net::UnixListener::bind(&tmp)
        .with_context(|| format!("listen on {}", tmp.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("listen on {}", path.display()))?;
    Ok(Some(l))
}

enum Listener {
    Tcp(tokio::net::TcpListener, Arc<limits::Peers>),
    Unix(tokio::net::UnixListener),
}

/// Accept connections until told to stop, each served by hyper's HTTP/1 with a header timeout;
/// on stop, the connections finish their requests in flight (graceful shutdown).
async fn accept_loop(
    l: Listener,
    app: Router,
    header_timeout: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits::max_connections()));
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = stopped.changed() => break,
        };
        let accepted = tokio::select! {
            a = accept(&l) => a,
            _ = stopped.changed() => break,
        };
        match accepted {
            Ok(Io::Tcp(io, peer)) => {
                let Listener::Tcp(_, peers) = &l else {
                    unreachable!("a TCP connection from the TCP listener")
                };
                // A peer holding its share already: closed at once, others unhurt.
                let Some(conn) = peers.connect(peer.ip()) else {
                    tracing::debug!(%peer, "connection refused: its address holds its share");
                    continue;
                };
                let slots = conn.slots.clone();
                let svc = tower::ServiceExt::map_request(
                    app.clone(),
                    move |mut req: axum::http::Request<hyper::body::Incoming>| {
                        req.extensions_mut().insert(slots.clone());
                        req
                    },
                );
                serve_connection(io, svc, header_timeout, &graceful, (permit, Some(conn)))
            }
            Ok(Io::Unix(io, peer)) => {
                // Each connection's requests are done on behalf of its peer process.
                let app = match peer {
                    Some(pid) => app.clone().layer(axum::Extension(caller::Peer(pid))),
                    None => app.clone(),
                };
                serve_connection(io, app, header_timeout, &graceful, (permit, None))
            }
            Err(e) => {
                // EMFILE and the like: back off instead of spinning.
                tracing::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(10), graceful.shutdown()).await;
}

/// Serve one connection; `held` (its slot among all connections, its peer's share) is given
/// back when it ends.
fn serve_connection<I, S>(
    io: I,
    svc: S,
    header_timeout: Duration,
    graceful: &hyper_util::server::graceful::GracefulShutdown,
    held: (tokio::sync::OwnedSemaphorePermit, Option<limits::PeerConn>),
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: tower::Service<
            axum::http::Request<hyper::body::Incoming>,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let svc = hyper_util::service::TowerToHyperService::new(svc);
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(io, svc);
    let conn = graceful.watch(conn);
    tokio::spawn(async move {
        let _ = conn.await;
        drop(held);
    });
}

enum Io {
    Tcp(TokioIo<tokio::net::TcpStream>, SocketAddr),
    Unix(TokioIo<tokio::net::UnixStream>, Option<u32>),
}

async fn accept(l: &Listener) -> std::io::Result<Io> {
    Ok(match l {
        Listener::Tcp(l, _) => {
            let (s, peer) = l.accept().await?;
            let _ = s.set_nodelay(true);
            Io::Tcp(TokioIo::new(s), peer)
        }
        Listener::Unix(l) => {
            let s = l.accept().await?.0;
            let peer = s
                .peer_cred()
                .ok()
                .and_then(|c| c.pid())
                .and_then(|p| u32::try_from(p).ok());
            Io::Unix(TokioIo::new(s), peer)
        }
    })
}

impl Identity {
    /// Who calls, from the request's headers and whether it came over the Unix socket.
    pub fn of(api: &Api, parts: &axum::http::request::Parts) -> Result<Identity, ApiError> {
        let local = parts.extensions.get::<Local>().is_some();
        api.auth.resolve(&parts.headers, local)
    }
}

impl axum::extract::FromRequestParts<Arc<Api>> for Identity {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        api: &Arc<Api>,
    ) -> Result<Identity, ApiError> {
        let who = Identity::of(api, parts)?;
        caller::note_user(&who.user, who.role.name());
        Ok(who)
    }
}
