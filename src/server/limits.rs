//! What keeps slow or numerous clients from starving the others: a deadline on each request's
//! body, and a share of the server per peer address.
//!
//! - A body must be whole within `server.body_timeout_secs` plus the time its length takes at
//!   `server.min_body_bytes_per_sec`, counted from when its request is admitted ([`Deadline`]):
//!   one trickling a byte a second is cut off with 408 in the envelope and its connection
//!   closed. (tower-http's `RequestBodyTimeout` resets at every frame, so a trickle outlives
//!   it; the request's own timeout is minutes.)
//! - A TCP connection belongs to its peer's address ([`Peers`]): at most
//!   `server.max_connections_per_peer` of a peer's requests are served at once and the rest
//!   wait for one of its slots (bounded by the request timeout); a peer holds at most
//!   [`HOLD_PER_SLOT`] times that many connections, and one beyond is closed at accept. One
//!   address therefore cannot take the slots of another, and the total stays under
//!   [`max_connections`].
//! - `/health` and `/ready` never wait for a slot: a probe is answered while its peer's slots
//!   are all taken (by its own slow uploads too).
//! - The Unix socket is owner-only: its connections have no peer share.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::Frame;
use parking_lot::Mutex;
use tokio::sync::Semaphore;

use super::reply::ApiError;

/// Connections a peer may hold per request slot (waiting ones included).
pub const HOLD_PER_SLOT: usize = 8;

/// Connections served at once, all peers together: half the descriptors the process may open
/// (the mount's descriptor cache takes the other half), less a reserve for its files, within
/// [256, 16384]. More wait in the kernel's backlog.
pub fn max_connections() -> usize {
    let soft = crate::sys::nofile_limit();
    ((soft / 2).saturating_sub(256)).clamp(256, 16384) as usize
}

/// The connections of each peer address, and its request slots.
pub struct Peers {
    slots: usize,
    hold: usize,
    table: Mutex<HashMap<IpAddr, Peer>>,
}

struct Peer {
    held: usize,
    slots: Arc<Semaphore>,
}

/// A request's peer's slots (an extension of each request of a TCP connection).
#[derive(Clone)]
pub struct Slots(Arc<Semaphore>);

/// One connection of a peer, counted until dropped.
pub struct PeerConn {
    peers: Arc<Peers>,
    ip: IpAddr,
    pub slots: Slots,
}

impl Peers {
    /// `slots` requests of a peer at once; at most `hold` connections of a peer (at least
    /// `slots`).
    pub fn new(slots: usize, hold: usize) -> Arc<Peers> {
        Arc::new(Peers {
            slots,
            hold: hold.max(slots),
            table: Mutex::new(HashMap::new()),
        })
    }

    /// A new connection from `ip`, or `None` when that peer holds as many as it may.
    pub fn connect(self: &Arc<Self>, ip: IpAddr) -> Option<PeerConn> {
        let mut t = self.table.lock();
        let p = t.entry(ip).or_insert_with(|| Peer {
            held: 0,
            slots: Arc::new(Semaphore::new(self.slots)),
        });
        if p.held >= self.hold {
            return None;
        }
        p.held += 1;
        Some(PeerConn {
            peers: self.clone(),
            ip,
            slots: Slots(p.slots.clone()),
        })
    }
}

impl Drop for PeerConn {
    fn drop(&mut self) {
        let mut t = self.peers.table.lock();
        if let Some(p) = t.get_mut(&self.ip) {
            p.held -= 1;
            if p.held == 0 {
                t.remove(&self.ip);
            }
        }
    }
}

/// Probes answered whatever the load.
fn is_probe(path: &str) -> bool {
    matches!(path, "/health" | "/ready")
}

/// Middleware: a request runs holding one of its peer's slots (module doc).
pub async fn admit(req: Request, next: Next) -> Response {
    let slots = req.extensions().get::<Slots>().cloned();
    let Some(Slots(sem)) = slots.filter(|_| !is_probe(req.uri().path())) else {
        return next.run(req).await;
    };
    let Ok(permit) = sem.acquire_owned().await else {
        return ApiError::framework(StatusCode::SERVICE_UNAVAILABLE, "server stopping")
            .into_response();
    };
    let resp = next.run(req).await;
    drop(permit);
    resp
}

/// The body deadline's settings (`server.body_timeout_secs`, `server.min_body_bytes_per_sec`).
#[derive(Clone, Copy, Debug)]
pub struct BodyPace {
    pub grace: Duration,
    pub min_rate: u64,
}

/// Middleware: the request's body held to its deadline (module doc); a body cut off answers
/// 408 and closes the connection, whatever the route made of the broken body.
pub async fn body_deadline(State(pace): State<BodyPace>, req: Request, next: Next) -> Response {
    let cut = Arc::new(AtomicBool::new(false));
    let req = req.map(|b| Body::new(Deadline::new(b, pace, cut.clone())));
    let resp = next.run(req).await;
    if !cut.load(Ordering::Relaxed) {
        return resp;
    }
    let mut resp = ApiError::framework(
        StatusCode::REQUEST_TIMEOUT,
        format!(
            "request body not received in time: it must arrive within {} s plus one second \
             per {} bytes (server.body_timeout_secs, server.min_body_bytes_per_sec)",
            pace.grace.as_secs_f64(),
            pace.min_rate
        ),
    )
    .into_response();
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// A body that fails once it is later than its pace allows.
struct Deadline {
    inner: Body,
    pace: BodyPace,
    start: tokio::time::Instant,
    received: u64,
    sleep: Pin<Box<tokio::time::Sleep>>,
    cut: Arc<AtomicBool>,
}

impl Deadline {
    fn new(inner: Body, pace: BodyPace, cut: Arc<AtomicBool>) -> Deadline {
        let start = tokio::time::Instant::now();
        Deadline {
            inner,
            pace,
            start,
            received: 0,
            sleep: Box::pin(tokio::time::sleep_until(start + pace.grace)),
            cut,
        }
    }

    /// When the body must be whole by, given what has come.
    fn due(&self) -> tokio::time::Instant {
        let paced = Duration::from_secs_f64(self.received as f64 / self.pace.min_rate as f64);
        self.start + self.pace.grace + paced
    }

    fn expired(&mut self) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        self.cut.store(true, Ordering::Relaxed);
        Poll::Ready(Some(Err(axum::Error::new(
            "request body not received in time",
        ))))
    }
}

impl http_body::Body for Deadline {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if this.cut.load(Ordering::Relaxed) {
            return this.expired();
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    this.received += d.len() as u64;
                    if this.due() <= tokio::time::Instant::now() {
                        return this.expired();
                    }
                }
                return Poll::Ready(Some(Ok(frame)));
            }
            Poll::Ready(other) => return Poll::Ready(other),
            Poll::Pending => {}
        }
        // The timer is moved on only when it fires (what came since has earned time), not
        // at every frame: a body trickling in byte by byte costs no timer work per byte.
        loop {
            match this.sleep.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(()) => {
                    let due = this.due();
                    if due <= tokio::time::Instant::now() {
                        return this.expired();
                    }
                    this.sleep.as_mut().reset(due);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_holds_at_most_its_share_and_gives_it_back() {
        let peers = Peers::new(2, 3);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let held: Vec<_> = (0..3).map(|_| peers.connect(a).unwrap()).collect();
        assert!(peers.connect(a).is_none(), "a fourth connection of a");
        // Another address is not hurt.
        let other = peers.connect(b).unwrap();
        assert_eq!(other.slots.0.available_permits(), 2);
        drop(held);
        assert!(peers.connect(a).is_some());
        drop(other);
        assert!(
            peers.table.lock().is_empty(),
            "emptied when their connections end"
        );
    }
}
