//! The HTTP server's bounds against real sockets on loopback: a client that holds
//! connections with unfinished requests, or never reads its responses, cannot take the
//! endpoint away from other clients; headers, bodies and connection lifetimes are bounded.
//!
//! Clients use distinct loopback addresses (127.0.0.2, 127.0.0.3, ...) as distinct hosts; the
//! server listens on 127.0.0.1, so a client on 127.0.0.1 is this host (as the kubelet probing a
//! hostNetwork pod). Every wait is bounded, and so is every attack (in time and connections).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use ghostip::http::serve::{Limits, bind, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;

fn app() -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        // Larger than the socket buffers of both ends, for a client that does not read.
        .route("/big", get(|| async { vec![b'x'; 32 << 20] }))
}

struct Server {
    addr: SocketAddr,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    fn start(limits: Limits) -> Server {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(serve(listener, app(), limits, cancel.clone()));
        Server { addr, cancel, task }
    }

    async fn stop(self) {
        self.cancel.cancel();
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("the server stops within 5 s")
            .unwrap()
            .unwrap();
    }
}

/// A connection from `from` (a loopback address) to the server.
async fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(format!("{from}:0").parse().unwrap()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), s.connect(to))
        .await
        .expect("connect within 5 s")
        .unwrap()
}

/// Everything the server sends until it closes, or until `limit`.
async fn read_all(s: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut out = Vec::new();
    match tokio::time::timeout(limit, s.read_to_end(&mut out)).await {
        Ok(_) => Some(String::from_utf8_lossy(&out).into_owned()),
        Err(_) => None,
    }
}

/// One complete GET from `from`: the status line.
async fn get_from(from: &str, to: SocketAddr, path: &str) -> String {
    let mut s = connect_from(from, to).await;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let out = read_all(&mut s, Duration::from_secs(5))
        .await
        .expect("an answer within 5 s");
    out.lines().next().unwrap_or_default().to_string()
}

/// `GET /healthz` from `from` until it is served, at most 40 times 50 ms apart (the server
/// notices closed connections at once, the client may be a little ahead): the last status.
async fn served_soon(from: &str, to: SocketAddr) -> String {
    let mut status = String::new();
    for _ in 0..40 {
        status = get_from(from, to, "/healthz").await;
        if status == "HTTP/1.1 200 OK" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    status
}

/// Opens `n` connections from `from`, each with a request whose headers never end.
async fn slowloris(from: &str, to: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for _ in 0..n {
        let mut s = connect_from(from, to).await;
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await
            .unwrap();
        held.push(s);
    }
    held
}

#[tokio::test]
async fn a_client_holding_unfinished_requests_does_not_lock_out_others() {
    let limits = Limits::default();
    let server = Server::start(limits);
    // One host opens far more connections than it may hold, and never finishes a request.
    let mut held = slowloris("127.0.0.1", server.addr, 100).await;
    // Another host is served at once.
    let started = Instant::now();
    assert_eq!(
        get_from("127.0.0.2", server.addr, "/healthz").await,
        "HTTP/1.1 200 OK"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // The first host's connections over its share were answered 503 and closed; the ones it
    // holds get no answer yet.
    let mut refused = 0;
    for s in held.iter_mut().skip(limits.max_connections_per_client) {
        let out = read_all(s, Duration::from_secs(2))
            .await
            .expect("a refused connection is closed at once");
        assert!(out.starts_with("HTTP/1.1 503"), "{out}");
        refused += 1;
    }
    assert_eq!(refused, 100 - limits.max_connections_per_client);
    let mut one = [0u8; 1];
    assert!(
        tokio::time::timeout(Duration::from_millis(200), held[0].read(&mut one))
            .await
            .is_err(),
        "a held connection is still open"
    );
    server.stop().await;
}

#[tokio::test]
async fn held_connections_are_dropped_after_the_header_timeout_and_free_their_slots() {
    let limits = Limits {
        max_connections: 8,
        max_connections_per_client: 4,
        header_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let server = Server::start(limits);
    // One host holds its share with unfinished requests; its next connection is refused...
    let mut held = slowloris("127.0.0.2", server.addr, 4).await;
    assert!(
        get_from("127.0.0.2", server.addr, "/healthz")
            .await
            .starts_with("HTTP/1.1 503")
    );
    // ...until the header timeout closes them.
    let started = Instant::now();
    for s in &mut held {
        read_all(s, Duration::from_secs(5))
            .await
            .expect("closed after the header timeout");
    }
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "{took:?}");
    // The slots are free again.
    assert_eq!(
        served_soon("127.0.0.2", server.addr).await,
        "HTTP/1.1 200 OK"
    );
    server.stop().await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_header_timeout() {
    let limits = Limits {
        header_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let server = Server::start(limits);
    let mut s = connect_from("127.0.0.1", server.addr).await;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let out = read_all(&mut s, Duration::from_secs(5))
        .await
        .expect("closed after the header timeout");
    assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    server.stop().await;
}

#[tokio::test]
async fn a_client_that_does_not_read_its_responses_is_cut_at_the_connection_age() {
    let limits = Limits {
        max_connections_per_client: 2,
        request_timeout: Duration::from_millis(300),
        max_connection_age: Duration::from_millis(700),
        ..Limits::default()
    };
    let server = Server::start(limits);
    // Two requests for 32 MiB each, never read: the server's writes block.
    let mut stuck = Vec::new();
    for _ in 0..2 {
        let mut s = connect_from("127.0.0.1", server.addr).await;
        s.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        stuck.push(s);
    }
    // The same host is at its cap now...
    assert!(
        get_from("127.0.0.1", server.addr, "/healthz")
            .await
            .starts_with("HTTP/1.1 503")
    );
    // ...and gets its slots back once the connections are cut at 0.7 s + 0.3 s.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        served_soon("127.0.0.1", server.addr).await,
        "HTTP/1.1 200 OK"
    );
    drop(stuck);
    server.stop().await;
}

#[tokio::test]
async fn oversized_headers_and_request_bodies_are_refused() {
    let server = Server::start(Limits::default());
    let mut s = connect_from("127.0.0.1", server.addr).await;
    let big = "a".repeat(32 * 1024);
    s.write_all(format!("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let out = read_all(&mut s, Duration::from_secs(5)).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 431"), "{out}");

    let mut s = connect_from("127.0.0.1", server.addr).await;
    s.write_all(
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello",
    )
    .await
    .unwrap();
    let out = read_all(&mut s, Duration::from_secs(5)).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 413"), "{out}");

    let mut s = connect_from("127.0.0.1", server.addr).await;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
        .await
        .unwrap();
    let out = read_all(&mut s, Duration::from_secs(5)).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 413"), "{out}");
    server.stop().await;
}

#[tokio::test]
async fn every_address_listens_on_both_families() {
    let listener = bind(ghostip::cli::parse_listen(":0").unwrap()).unwrap();
    let port = listener.local_addr().unwrap().port();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(serve(listener, app(), Limits::default(), cancel.clone()));
    let v4: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    assert_eq!(
        get_from("127.0.0.1", v4, "/healthz").await,
        "HTTP/1.1 200 OK"
    );
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        let mut s = tokio::time::timeout(
            Duration::from_secs(5),
            TcpStream::connect(format!("[::1]:{port}")),
        )
        .await
        .unwrap()
        .unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let out = read_all(&mut s, Duration::from_secs(5)).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
    } else {
        eprintln!("no IPv6 loopback here: only the IPv4 side was checked");
    }
    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
}

/// Whether the server is done with `s`, without waiting: it closed it, reset it or answered
/// (a refusal; an unfinished request gets no other answer).
fn closed(s: &TcpStream) -> bool {
    let mut one = [0u8; 1];
    match s.try_read(&mut one) {
        Ok(_) => true,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// One attacking address: keeps `n` connections open with unfinished requests, opening a new
/// one as soon as one is closed or refused, every 50 ms until `until`; at most 400 connects.
async fn renewing_slowloris(from: &'static str, to: SocketAddr, n: usize, until: Instant) -> usize {
    let mut held: Vec<TcpStream> = Vec::new();
    let mut connects = 0;
    while Instant::now() < until && connects < 400 {
        held.retain(|s| !closed(s));
        while held.len() < n && connects < 400 {
            held.extend(slowloris(from, to, 1).await);
            connects += 1;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    connects
}

/// Addresses in `attackers` each keep 4 unfinished requests open on a server of 16
/// connections, 4 per address (the defaults scaled down by four), renewing them for 3 s as
/// soon as one is closed. The header timeout (the default) is longer than the attack, so only
/// the admission rule can let others in. While it runs, an honest client on another address
/// and a probe from this host (its source address is the listening address) are answered,
/// every time.
async fn others_are_served_during(attackers: &[&'static str]) {
    let limits = Limits {
        max_connections: 16,
        max_connections_per_client: 4,
        ..Limits::default()
    };
    let server = Server::start(limits);
    let until = Instant::now() + Duration::from_secs(3);
    let attacks: Vec<_> = attackers
        .iter()
        .map(|from| tokio::spawn(renewing_slowloris(from, server.addr, 4, until)))
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for round in 0..3 {
        assert_eq!(
            get_from("127.0.0.99", server.addr, "/healthz").await,
            "HTTP/1.1 200 OK",
            "honest client, round {round}"
        );
        assert_eq!(
            get_from("127.0.0.1", server.addr, "/healthz").await,
            "HTTP/1.1 200 OK",
            "probe from this host, round {round}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        Instant::now() < until,
        "the checks ran while the attack did"
    );
    for a in attacks {
        tokio::time::timeout(Duration::from_secs(5), a)
            .await
            .expect("the attack ends on time")
            .unwrap();
    }
    server.stop().await;
}

/// The reported attack: four addresses, each at the per-address cap, filled every slot and
/// everyone else was refused until they stopped (503 to every other client before the
/// admission rule).
#[tokio::test]
async fn four_addresses_renewing_half_open_connections_do_not_lock_out_others() {
    others_are_served_during(&["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]).await;
}

/// Eight addresses fill every slot even at the smallest share (2 each): a newcomer gets the
/// oldest idle connection of a largest holder, and the evicted address cannot take it back.
#[tokio::test]
async fn eight_addresses_at_the_smallest_share_do_not_lock_out_others() {
    others_are_served_during(&[
        "127.0.0.2",
        "127.0.0.3",
        "127.0.0.4",
        "127.0.0.5",
        "127.0.0.6",
        "127.0.0.7",
        "127.0.0.8",
        "127.0.0.9",
    ])
    .await;
}
