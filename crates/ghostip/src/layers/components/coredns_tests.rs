//! The CoreDNS adapter in a pipeline, against local HTTP servers on 127.0.0.1 serving CoreDNS's
//! own exposition text: the pods from the DNS Service's endpoints, scrapes at exact times, the
//! p99 in the model, `/status` and the metrics, a refused pod that does not stop the others.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use ghostip_core::truth::{AddressType, EndpointPort, EndpointRecord, SliceRecord};
use ghostip_core::{PodRef, Protocol, ServiceKey, Time};
use ghostip_session::layers::components::coredns::{CoreDnsModel, HEADLESS_WITH_SELECTOR};
use ghostip_session::{Session, SessionConfig, SyncState};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::coredns::CoreDnsScrapes;
use super::metrics::ComponentMetrics;
use crate::kube::{Received, ResourceKind, TruthEvent, TruthKey, TruthObject};
use crate::layers::LayerAdapter;
use crate::metrics::Metrics;
use crate::pipeline::{Pipeline, ProbeSettings};

/// CoreDNS's own test expectation of its programming histogram (2 headless changes, 1 and
/// 2 s); see crates/ghostip-session/tests/fixtures/coredns/README.md.
const REAL: &str = include_str!(
    "../../../../ghostip-session/tests/fixtures/coredns/dns_programming_metrics_test.txt"
);

fn t(s: i64) -> Time {
    Time::from_second(1_800_000_000 + s).unwrap()
}

/// Serves `bodies` as 200 answers, one per connection, in order.
async fn serve(bodies: Vec<String>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        for body in bodies {
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
            let answer = format!(
                "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(answer.as_bytes()).await;
            let _ = s.shutdown().await;
        }
    });
    port
}

fn dns_slice(name: &str, pod: &str, metrics_port: u16) -> SliceRecord {
    SliceRecord {
        namespace: "kube-system".into(),
        name: name.into(),
        service: "kube-dns".into(),
        address_type: AddressType::IPv4,
        endpoints: vec![EndpointRecord {
            ip: "127.0.0.1".parse().unwrap(),
            ready: true,
            serving: true,
            terminating: false,
            pod: Some(PodRef {
                namespace: "kube-system".into(),
                name: pod.into(),
                uid: format!("uid-{pod}"),
            }),
            node: Some("node-1".into()),
            hostname: None,
        }],
        ports: vec![
            EndpointPort {
                name: Some("dns".into()),
                port: 53,
                protocol: Protocol::Udp,
            },
            EndpointPort {
                name: Some("metrics".into()),
                port: metrics_port,
                protocol: Protocol::Tcp,
            },
        ],
        trigger_time: None,
    }
}

/// Steps the adapter at `now` until each of the `n` pods was scraped at `now` (at most 5 s
/// of 10 ms waits).
async fn settle(a: &mut CoreDnsScrapes, p: &mut Pipeline, now: Time, n: usize) {
    a.step(p, now, true).await;
    for _ in 0..500 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        a.step(p, now, true).await;
        let model = p.session.layer::<CoreDnsModel>().unwrap();
        let pods = model.pods();
        if pods.len() == n && pods.values().all(|s| s.last_scrape == Some(now)) {
            return;
        }
    }
    panic!("the scrapes at {now} did not finish within 5 s");
}

#[tokio::test]
async fn scrapes_coredns_pods_from_the_dns_service_and_reports_their_p99() {
    // coredns-a: its own text, then 98 more changes within 16 ms and 2 in (4.096, 8.192].
    let later = REAL
        .replace(r#"le="0.016"} 0"#, r#"le="0.016"} 98"#)
        .replace(r#"le="0.032"} 0"#, r#"le="0.032"} 98"#)
        .replace(r#"le="0.064"} 0"#, r#"le="0.064"} 98"#)
        .replace(r#"le="0.128"} 0"#, r#"le="0.128"} 98"#)
        .replace(r#"le="0.256"} 0"#, r#"le="0.256"} 98"#)
        .replace(r#"le="0.512"} 0"#, r#"le="0.512"} 98"#)
        .replace(r#"le="1.024"} 1"#, r#"le="1.024"} 99"#)
        .replace(r#"le="2.048"} 2"#, r#"le="2.048"} 100"#)
        .replace(r#"le="4.096"} 2"#, r#"le="4.096"} 100"#)
        .replace("} 2\n", "} 102\n");
    let a_port = serve(vec![REAL.to_string(), later.clone(), later]).await;
    // coredns-b: nothing listens on its metrics port.
    let b_port = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().port()
    };
    let kinds = [ResourceKind::EndpointSlices, ResourceKind::Services];
    let mut session = Session::new(SessionConfig::default(), SyncState::new(t(0), kinds));
    for (name, pod, port) in [
        ("kube-dns-a", "coredns-a", a_port),
        ("kube-dns-b", "coredns-b", b_port),
    ] {
        session.on_truth(&Received {
            at: t(0),
            event: TruthEvent::Apply(TruthObject::Slice(dns_slice(name, pod, port))),
        });
    }
    session.register(CoreDnsModel::new());
    let cancel = CancellationToken::new();
    let mut p = Pipeline::start(
        session,
        Box::pin(futures::stream::pending()),
        ProbeSettings {
            qps: std::num::NonZeroU32::MIN,
            interval: Duration::from_secs(1),
            sweep: Duration::from_secs(30),
            query_timeout: Duration::from_secs(1),
        },
        None,
        None,
        cancel.clone(),
    );
    let mut registry = Metrics::new();
    let metrics = Arc::new(ComponentMetrics::register(&mut registry));
    let mut a = CoreDnsScrapes::new(
        ServiceKey::new("kube-system", "kube-dns"),
        Duration::from_secs(15),
        metrics,
    );
    settle(&mut a, &mut p, t(0), 2).await;
    // Not due again before the period.
    a.step(&mut p, t(14), true).await;
    settle(&mut a, &mut p, t(15), 2).await;

    let model = p.session.layer::<CoreDnsModel>().unwrap();
    let w = model.p99_over(HEADLESS_WITH_SELECTOR, t(0), t(15)).unwrap();
    // 100 changes between the scrapes: rank 99 is the first of the two slow ones.
    assert_eq!(
        (w.p99_s, w.observations, w.from, w.to, w.pods),
        (Some(8.192), 100.0, t(0), t(15), 1)
    );
    let status = a.snapshot().to_json();
    let pods = status["coredns"].as_array().unwrap();
    assert_eq!(pods.len(), 2, "{status}");
    assert_eq!(pods[0]["pod"], "kube-system/coredns-a");
    assert_eq!(pods[0]["url"], format!("http://127.0.0.1:{a_port}/metrics"));
    assert_eq!(pods[0]["p99_5m_s"][HEADLESS_WITH_SELECTOR], 8.192);
    assert!(pods[0]["error"].is_null());
    assert_eq!(
        pods[1]["error"],
        format!("connection to 127.0.0.1:{b_port} refused: nothing listens there")
    );
    assert_eq!(status["scrape_period_s"], 15.0);
    let text = registry.encode();
    assert!(
        text.contains(&format!(
            "ghostip_coredns_programming_duration_p99_seconds{{pod=\"kube-system/coredns-a\",service_kind=\"{HEADLESS_WITH_SELECTOR}\"}} 8.192"
        )),
        "{text}"
    );
    assert!(
        text.contains(
            "ghostip_component_scrapes_total{component=\"coredns\",result=\"refused\"} 2"
        ),
        "{text}"
    );
    assert!(
        text.contains("ghostip_component_scrapes_total{component=\"coredns\",result=\"ok\"} 2"),
        "{text}"
    );

    // coredns-b leaves the DNS Service: forgotten, in the model and in /status.
    p.session.on_truth(&Received {
        at: t(20),
        event: TruthEvent::Delete(TruthKey::Slice {
            namespace: "kube-system".into(),
            name: "kube-dns-b".into(),
        }),
    });
    a.on_truth(&mut p, t(20), true);
    a.step(&mut p, t(20), true).await;
    let model = p.session.layer::<CoreDnsModel>().unwrap();
    assert_eq!(model.pods().len(), 1);
    assert_eq!(
        a.snapshot().to_json()["coredns"].as_array().unwrap().len(),
        1
    );
    // Nothing new over the next 5 minutes: no p99, and no series left at the old value.
    settle(&mut a, &mut p, t(400), 1).await;
    let status = a.snapshot().to_json();
    assert_eq!(
        status["coredns"][0]["p99_5m_s"],
        serde_json::json!({}),
        "{status}"
    );
    let text = registry.encode();
    assert!(
        !text.contains("ghostip_coredns_programming_duration_p99_seconds{"),
        "{text}"
    );
    a.shutdown();
    cancel.cancel();
}
