//! Serves a router over HTTP/1.1 with bounded connections, request time and request size, so a slow or hostile client cannot take the endpoint away from others.
//!
//! [`Limits`] (the defaults for every ghostip endpoint):
//! - 64 connections at once, shared fairly between client addresses
//!   ([`super::admission`]): up to 16 from one address while the server is at most half
//!   full, beyond that `max(2, 64 / (distinct addresses + 1))`; 2 more slots only for
//!   connections from this host (the kubelet's `/healthz` and `/readyz` probes); when full,
//!   the oldest idle connection of the address holding the most slots is closed for a
//!   newcomer. A connection refused gets `503` and is closed at once, without reading it;
//! - request heads: at most 16 KiB (`431` beyond) and 64 fields, read within 5 s of the
//!   connection waiting for one (after it opened, or after its last response): a probe or
//!   a scrape sends its head in one segment at once, and 5 s leave room for two
//!   retransmissions of it (1 s, then 2 s more); a client that trickles its headers or
//!   keeps an idle connection open is disconnected;
//! - request bodies: none (`413` for a request that announces one): every endpoint is a
//!   `GET`;
//! - a handler answers within 10 s (`503` otherwise);
//! - a connection lives at most 60 s: it is then closed after the request in progress, or
//!   10 s later if that request does not finish (a client that reads its response slowly).
//!
//! [`bind`] makes the listener: `[::]:PORT` (from `:PORT`) takes both families where the
//! node has IPv6, and only IPv4 (`0.0.0.0:PORT`) where it has none.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use super::admission::{Admission, ConnId, Decision, Refusal, Rules};

/// The bounds of one HTTP server.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections open at once (from anywhere).
    pub max_connections: usize,
    /// Connections open at once from one client address while the server is at most half
    /// full; beyond that the share shrinks with the number of addresses (see
    /// [`super::admission`]).
    pub max_connections_per_client: usize,
    /// Smallest share of one client address when the server is more than half full.
    pub min_share: usize,
    /// Slots above `max_connections` for connections from this host (the kubelet's probes).
    pub reserved_for_this_host: usize,
    /// Size of a request's head (request line and headers); at least 8 KiB.
    pub max_header_bytes: usize,
    /// Header fields of one request.
    pub max_headers: usize,
    /// Time to read a request's head, from the moment the connection waits for one.
    pub header_timeout: Duration,
    /// Time a handler has to answer.
    pub request_timeout: Duration,
    /// Age at which a connection is closed after its request in progress (which then has
    /// `request_timeout` to finish).
    pub max_connection_age: Duration,
}

impl Limits {
    /// The admission rule's numbers.
    pub fn rules(&self) -> Rules {
        Rules {
            max_connections: self.max_connections,
            per_client: self.max_connections_per_client,
            min_share: self.min_share,
            reserved_for_this_host: self.reserved_for_this_host,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 64,
            max_connections_per_client: 16,
            min_share: 2,
            reserved_for_this_host: 2,
            max_header_bytes: 16 * 1024,
            max_headers: 64,
            header_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            max_connection_age: Duration::from_secs(60),
        }
    }
}

/// Binds `addr`; the unspecified IPv6 address takes IPv4 too, and falls back to
/// `0.0.0.0` on a host without IPv6.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let open = |addr: SocketAddr| -> io::Result<TcpListener> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
        if addr.is_ipv6() && addr.ip().is_unspecified() {
            socket.set_only_v6(false)?;
        }
        socket.set_reuse_address(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        socket.listen(1024)?;
        TcpListener::from_std(socket.into())
    };
    match open(addr) {
        Err(e)
            if addr.is_ipv6()
                && addr.ip().is_unspecified()
                && matches!(
                    e.raw_os_error(),
                    Some(libc::EAFNOSUPPORT | libc::EADDRNOTAVAIL)
                ) =>
        {
            tracing::info!(error = %e, "no IPv6 on this host; listening on IPv4 only");
            open(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                addr.port(),
            ))
        }
        r => r,
    }
}

/// Serves `app` on `listener` within `limits` until `cancel`; connections in progress then
/// get one second to finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    cancel: CancellationToken,
) -> io::Result<()> {
    let app = bounded(app, limits);
    let table = Arc::new(Mutex::new(Table {
        admission: Admission::new(limits.rules()),
        evict: HashMap::new(),
    }));
    let mut conns = JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            () = cancel.cancelled() => break,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        while conns.try_join_next().is_some() {}
        // Made from this host: its source address is the address it reached.
        let from_this_host = stream
            .local_addr()
            .is_ok_and(|l| l.ip().to_canonical() == peer.ip().to_canonical());
        let slot = match Slot::take(&table, peer.ip(), from_this_host) {
            Ok(slot) => slot,
            Err(why) => {
                refuse(&stream, peer, why);
                continue;
            }
        };
        let app = app.clone();
        let cancel = cancel.clone();
        conns.spawn(async move {
            serve_connection(stream, peer, app, limits, cancel, &slot).await;
            drop(slot);
        });
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    conns.abort_all();
    Ok(())
}

/// The router with the per-request bounds: no bodies, a time limit on the handler.
fn bounded(app: Router, limits: Limits) -> Router {
    app.layer(middleware::from_fn(move |req: Request, next: Next| {
        limit_request(req, next, limits.request_timeout)
    }))
}

async fn limit_request(req: Request, next: Next, timeout: Duration) -> Response {
    let has_body = req.headers().contains_key(header::TRANSFER_ENCODING)
        || req
            .headers()
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0");
    if has_body {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            "request bodies are not accepted\n",
        )
            .into_response();
    }
    match tokio::time::timeout(timeout, next.run(req)).await {
        Ok(r) => r,
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the request took too long\n",
        )
            .into_response(),
    }
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: Limits,
    cancel: CancellationToken,
    slot: &Slot,
) {
    let _ = stream.set_nodelay(true);
    // Each request marks the connection busy until its response body is sent whole (or
    // dropped): only an idle connection may be evicted.
    let table = Arc::clone(&slot.table);
    let id = slot.id;
    let svc = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        let busy = Busy::start(&table, id);
        let app = app.clone();
        async move {
            let response = match app.oneshot(req.map(Body::new)).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            Ok::<_, Infallible>(response.map(|body| {
                Body::new(body.map_frame(move |frame| {
                    let _held = &busy;
                    frame
                }))
            }))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .max_headers(limits.max_headers);
    let conn = builder.serve_connection(TokioIo::new(stream), svc);
    tokio::pin!(conn);
    let age = tokio::time::sleep(limits.max_connection_age);
    tokio::select! {
        _ = conn.as_mut() => return,
        () = age => {}
        () = cancel.cancelled() => {}
        () = slot.evicted.cancelled() => {
            // Idle, and its slot given to a newcomer: closed now.
            tracing::debug!(%peer, "idle connection closed for a newcomer");
            return;
        }
    }
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(limits.request_timeout, conn).await;
}

/// Answers a refused connection with 503 and closes it, without reading or waiting.
fn refuse(stream: &TcpStream, peer: SocketAddr, why: Refusal) {
    tracing::debug!(%peer, ?why, "connection refused");
    let _ = stream.try_write(
        b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 22\r\n\r\ntoo many connections\r\n",
    );
}

/// The admission table and how to close each connection it may evict.
struct Table {
    admission: Admission,
    evict: HashMap<ConnId, CancellationToken>,
}

fn lock(table: &Mutex<Table>) -> MutexGuard<'_, Table> {
    table.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One connection's place in the table, given back when dropped.
struct Slot {
    table: Arc<Mutex<Table>>,
    id: ConnId,
    /// Cancelled when the connection is evicted for a newcomer.
    evicted: CancellationToken,
}

impl Slot {
    fn take(
        table: &Arc<Mutex<Table>>,
        client: IpAddr,
        from_this_host: bool,
    ) -> Result<Slot, Refusal> {
        let mut t = lock(table);
        match t
            .admission
            .admit(client, from_this_host, crate::clock::monotonic_now())
        {
            Decision::Refuse(why) => Err(why),
            Decision::Admit { id, evict } => {
                if let Some(token) = evict.and_then(|victim| t.evict.remove(&victim)) {
                    token.cancel();
                }
                let evicted = CancellationToken::new();
                t.evict.insert(id, evicted.clone());
                Ok(Slot {
                    table: Arc::clone(table),
                    id,
                    evicted,
                })
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut t = lock(&self.table);
        t.admission.close(self.id);
        t.evict.remove(&self.id);
    }
}

/// A request in progress on a connection; its end makes the connection idle again.
struct Busy {
    table: Arc<Mutex<Table>>,
    id: ConnId,
}

impl Busy {
    fn start(table: &Arc<Mutex<Table>>, id: ConnId) -> Busy {
        lock(table).admission.request_started(id);
        Busy {
            table: Arc::clone(table),
            id,
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        lock(&self.table)
            .admission
            .request_ended(self.id, crate::clock::monotonic_now());
    }
}
