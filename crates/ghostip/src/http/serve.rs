//! Serves a router over HTTP/1.1 with bounded connections, request time and request size, so a slow or hostile client cannot take the endpoint away from others.
//!
//! [`Limits`] (the defaults for every ghostip endpoint):
//! - at most 64 connections at once and 16 from one client address; a connection over
//!   either cap gets `503` and is closed at once, without reading it;
//! - request headers: at most 16 KiB (`431` beyond) and 64 fields, read within 10 s of
//!   the connection becoming idle (a client that trickles its headers or keeps an idle
//!   connection open is disconnected);
//! - request bodies: none (`413` for a request that announces one): every endpoint is a
//!   `GET`;
//! - a handler answers within 10 s (`503` otherwise);
//! - a connection lives at most 60 s: it is then closed after the request in progress, or
//!   10 s later if that request does not finish (a client that reads its response slowly).
//!
//! [`bind`] makes the listener: `[::]:PORT` (from `:PORT`) takes both families where the
//! node has IPv6, and only IPv4 (`0.0.0.0:PORT`) where it has none.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::Layer as _;

/// The bounds of one HTTP server.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one client address.
    pub max_connections_per_client: usize,
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

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 64,
            max_connections_per_client: 16,
            max_header_bytes: 16 * 1024,
            max_headers: 64,
            header_timeout: Duration::from_secs(10),
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
    let counts = Arc::new(Mutex::new(Counts::default()));
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
        let Some(slot) = Slot::take(&counts, peer.ip(), &limits) else {
            refuse(&stream, peer);
            continue;
        };
        let app = app.clone();
        let cancel = cancel.clone();
        conns.spawn(async move {
            serve_connection(stream, peer, app, limits, cancel).await;
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
) {
    let _ = stream.set_nodelay(true);
    let svc = TowerToHyperService::new(axum::Extension(ConnectInfo(peer)).layer(app));
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
    }
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(limits.request_timeout, conn).await;
}

/// Answers a connection over the caps with 503 and closes it, without reading or waiting.
fn refuse(stream: &TcpStream, peer: SocketAddr) {
    tracing::debug!(%peer, "too many connections; refused");
    let _ = stream.try_write(
        b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 22\r\n\r\ntoo many connections\r\n",
    );
}

/// Connections open now, in all and per client address.
#[derive(Default)]
struct Counts {
    total: usize,
    per_client: HashMap<IpAddr, usize>,
}

/// One connection's place under the caps, given back when dropped.
struct Slot {
    counts: Arc<Mutex<Counts>>,
    client: IpAddr,
}

impl Slot {
    fn take(counts: &Arc<Mutex<Counts>>, client: IpAddr, limits: &Limits) -> Option<Slot> {
        let mut c = counts.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = c.per_client.get(&client).copied().unwrap_or(0);
        if c.total >= limits.max_connections || mine >= limits.max_connections_per_client {
            return None;
        }
        c.total += 1;
        c.per_client.insert(client, mine + 1);
        Some(Slot {
            counts: Arc::clone(counts),
            client,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.per_client.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.per_client.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn limits(total: usize, per_client: usize) -> Limits {
        Limits {
            max_connections: total,
            max_connections_per_client: per_client,
            ..Limits::default()
        }
    }

    #[test]
    fn slots_are_capped_in_all_and_per_client_and_given_back() {
        let counts = Arc::new(Mutex::new(Counts::default()));
        let l = limits(3, 2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let c: IpAddr = "10.0.0.3".parse().unwrap();
        let a1 = Slot::take(&counts, a, &l).unwrap();
        let a2 = Slot::take(&counts, a, &l).unwrap();
        assert!(Slot::take(&counts, a, &l).is_none(), "per-client cap");
        let b1 = Slot::take(&counts, b, &l).unwrap();
        assert!(Slot::take(&counts, c, &l).is_none(), "total cap");
        drop(a1);
        let c1 = Slot::take(&counts, c, &l).unwrap();
        drop((a2, b1, c1));
        let n = counts.lock().unwrap();
        assert_eq!(n.total, 0);
        assert!(n.per_client.is_empty());
    }
}
