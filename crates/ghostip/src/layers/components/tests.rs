//! Scrapes of a local HTTP server on 127.0.0.1 serving kube-proxy's exposition text, and the
//! failures a scrape tells apart.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use ghostip_session::components::KubeProxyMetrics;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use super::scrape::{MAX_BODY, MetricsUrl, ScrapeError, TIMEOUT, scrape};

/// Written in kube-proxy v1.31's exposition format (its bucket bounds, `[ALPHA]` help, Go's
/// float formatting): the fixture corpus holds no captured kube-proxy `/metrics`.
const KUBE_PROXY: &str =
    include_str!("../../../tests/fixtures/kube-proxy/metrics_v1.31_iptables_WRITTEN.txt");

/// Serves `answer` (raw HTTP) to each of `n` connections, after reading the request; returns
/// the address and the requests it read.
async fn serve(answer: Vec<u8>, n: usize) -> (String, tokio::task::JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        let mut requests = Vec::new();
        for _ in 0..n {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let mut got = 0;
            while !buf[..got].windows(4).any(|w| w == b"\r\n\r\n") && got < buf.len() {
                let k = s.read(&mut buf[got..]).await.unwrap();
                if k == 0 {
                    break;
                }
                got += k;
            }
            requests.push(String::from_utf8_lossy(&buf[..got]).into_owned());
            let _ = s.write_all(&answer).await;
            let _ = s.shutdown().await;
        }
        requests
    });
    (addr, task)
}

fn ok(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn scrapes_kube_proxy_text_from_a_local_server() {
    let (addr, server) = serve(ok(KUBE_PROXY), 1).await;
    let url = MetricsUrl::parse(&format!("http://{addr}/metrics")).unwrap();
    let text = scrape(&url, TIMEOUT, MAX_BODY).await.unwrap();
    assert_eq!(text, KUBE_PROXY);
    let requests = server.await.unwrap();
    assert!(
        requests[0].starts_with("GET /metrics HTTP/1.0\r\n"),
        "{requests:?}"
    );
    assert!(!requests[0].to_ascii_lowercase().contains("accept-encoding"));
    let m = KubeProxyMetrics::from_text(&text).unwrap();
    assert_eq!(m.last_sync, Some(1_759_226_402.1));
    let programming = m.programming.unwrap();
    assert_eq!((programming.count, programming.buckets.len()), (97.0, 81));
    // 97 × 0.99 = 96.03: past the 96 up to 6 s, in the (6, 7] bucket.
    assert_eq!(programming.bucket_bound(0.99), Some(7.0));
    let sync = m.sync_duration.unwrap();
    assert_eq!(sync.count, 1893.0);
    // 99 % of 1893 syncs took up to 128 ms.
    assert_eq!(sync.bucket_bound(0.99), Some(0.128));
}

#[tokio::test]
async fn a_closed_port_is_refused_and_told_apart() {
    // Bind, learn the port, close it: nothing listens there now.
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().to_string()
    };
    let url = MetricsUrl::parse(&format!("http://{addr}/metrics")).unwrap();
    let e = scrape(&url, TIMEOUT, MAX_BODY).await.unwrap_err();
    assert!(e.is_refused(), "{e}");
    assert_eq!(
        e.to_string(),
        format!("connection to {addr} refused: nothing listens there")
    );
}

#[tokio::test]
async fn a_silent_server_times_out_and_is_not_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    // Accepts (the kernel's backlog does) and never answers.
    let url = MetricsUrl::parse(&format!("http://{addr}/metrics")).unwrap();
    let e = scrape(&url, Duration::from_millis(200), MAX_BODY)
        .await
        .unwrap_err();
    assert_eq!(e, ScrapeError::Timeout(Duration::from_millis(200)));
    assert!(!e.is_refused());
    drop(listener);
}

#[tokio::test]
async fn an_answer_over_the_cap_an_error_status_or_chunked_body_fails() {
    let (addr, _s) = serve(ok(KUBE_PROXY), 1).await;
    let url = MetricsUrl::parse(&format!("http://{addr}/metrics")).unwrap();
    assert_eq!(
        scrape(&url, TIMEOUT, 1024).await.unwrap_err(),
        ScrapeError::TooLarge(1024)
    );
    for (answer, what) in [
        (
            "HTTP/1.0 503 Service Unavailable\r\n\r\nbusy",
            "status line `HTTP/1.0 503 Service Unavailable`",
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            "transfer-encoding chunked",
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n\x1f",
            "content-encoding gzip",
        ),
        ("HTTP/1.0 200 OK\r\n", "no end of headers"),
    ] {
        let (addr, _s) = serve(answer.as_bytes().to_vec(), 1).await;
        let url = MetricsUrl::parse(&format!("http://{addr}/")).unwrap();
        assert_eq!(
            scrape(&url, TIMEOUT, MAX_BODY).await.unwrap_err(),
            ScrapeError::Http(what.into()),
            "{answer:?}"
        );
    }
}

#[test]
fn metrics_urls() {
    let u = MetricsUrl::parse("http://127.0.0.1:10249/metrics").unwrap();
    assert_eq!(
        (u.authority.as_str(), u.path.as_str()),
        ("127.0.0.1:10249", "/metrics")
    );
    let u = MetricsUrl::parse("http://[::1]:10249/metrics").unwrap();
    assert_eq!(u.authority, "[::1]:10249");
    let u = MetricsUrl::parse("http://[::1]").unwrap();
    assert_eq!((u.authority.as_str(), u.path.as_str()), ("[::1]:80", "/"));
    assert_eq!(u.to_string(), "http://[::1]:80/");
    for bad in [
        "https://127.0.0.1:10249/metrics",
        "127.0.0.1:10249",
        "http:///metrics",
        "http://u:p@h/",
        "http://h/a b",
    ] {
        assert!(MetricsUrl::parse(bad).is_err(), "{bad}");
    }
}
