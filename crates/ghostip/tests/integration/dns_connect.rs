//! TCP connect probes against real loopback sockets: accepted, refused, timed out, and paced by a budget.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use ghostip::clock::SystemClock;
use ghostip::layers::dns::budget::Budget;
use ghostip::layers::dns::connect::{ConnectOutcome, ConnectProber, connect};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[tokio::test]
async fn listening_endpoint_accepts() {
    let listener = TcpListener::bind(addr("127.0.30.1:0")).await.unwrap();
    let target = listener.local_addr().unwrap();

    let probe = connect(target, Duration::from_millis(500), &SystemClock).await;

    assert_eq!(probe.outcome, ConnectOutcome::Accepted);
    assert!(probe.outcome.is_accepting());
    assert_eq!(probe.target, target);
    assert!(probe.latency < Duration::from_millis(500));
}

#[tokio::test]
async fn closed_port_refuses() {
    let listener = TcpListener::bind(addr("127.0.30.2:0")).await.unwrap();
    let target = listener.local_addr().unwrap();
    drop(listener); // the pod's process exited: the IP answers with RST

    let probe = connect(target, Duration::from_millis(500), &SystemClock).await;

    assert_eq!(probe.outcome, ConnectOutcome::Refused);
    assert_eq!(probe.outcome.label(), "refused");
    assert!(!probe.outcome.is_accepting());
}

#[tokio::test]
async fn unanswered_syn_times_out() {
    // A listener whose accept queue is full drops further SYNs, like a dead IP behind a bridge.
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(addr("127.0.30.3:0")).unwrap();
    let listener = socket.listen(0).unwrap();
    let target = listener.local_addr().unwrap();
    let _queued = TcpStream::connect(target).await.unwrap();

    let probe = connect(target, Duration::from_millis(200), &SystemClock).await;

    assert_eq!(probe.outcome, ConnectOutcome::Timeout);
    assert!(probe.latency >= Duration::from_millis(200));
    drop(listener);
}

#[tokio::test]
async fn connect_prober_is_paced_by_its_budget() {
    let listener = TcpListener::bind(addr("127.0.30.4:0")).await.unwrap();
    let target = listener.local_addr().unwrap();
    let prober = ConnectProber::new(
        Budget::per_second(NonZeroU32::new(20).unwrap()),
        Duration::from_millis(500),
        SystemClock,
    );
    let accept = tokio::spawn(async move {
        for _ in 0..5 {
            let _ = listener.accept().await;
        }
    });

    let start = tokio::time::Instant::now();
    for _ in 0..5 {
        assert_eq!(prober.probe(target).await.outcome, ConnectOutcome::Accepted);
    }

    assert!(
        start.elapsed() >= Duration::from_millis(200),
        "5 probes at 20/s take 4 periods: {:?}",
        start.elapsed()
    );
    accept.await.unwrap();
}
