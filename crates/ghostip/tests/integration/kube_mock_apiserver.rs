//! The real kube-rs watcher and list paths against a fake API server (`tower_test::mock`):
//! LIST + WATCH of EndpointSlices become the right events, a failed LIST is a gap that ends
//! with a relist, and the one-shot snapshot pages through lists and classifies errors.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt};
use ghostip::kube::{
    BackoffPolicy, ClientOrigin, Clock, ConfigMapRef, Connection, KubeError, KubeconfigSource,
    LivenessProbe, Received, TruthEvent, TruthKey, TruthObject, WatchScope, api_liveness,
    relist_signal, relisting_events_from, snapshot, watch_endpoint_slices,
};
use ghostip_core::model::{ServiceKey, Time};
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

fn mock_client() -> (kube::Client, Handle) {
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (kube::Client::new(svc, "default"), handle)
}

fn origin() -> ClientOrigin {
    ClientOrigin {
        server: "https://mock.invalid:6443/".into(),
        kubeconfig: KubeconfigSource::Custom("fake apiserver".into()),
        context: Some("mock".into()),
    }
}

fn ticking_clock() -> Arc<dyn Clock> {
    let n = Arc::new(AtomicI64::new(0));
    Arc::new(move || Time::from_second(1_796_014_800 + n.fetch_add(1, Ordering::SeqCst)).unwrap())
}

const FAST: BackoffPolicy = BackoffPolicy::Capped {
    initial: Duration::from_millis(10),
    max: Duration::from_millis(10),
};

fn slice(name: &str, rv: &str, ips: &[&str]) -> Value {
    let endpoints: Vec<Value> = ips
        .iter()
        .map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {
            "namespace": "shop", "name": name, "resourceVersion": rv,
            "labels": {"kubernetes.io/service-name": "web"},
            "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2026-11-30T04:59:59Z"},
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update"}]
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
    })
}

fn list(kind: &str, rv: &str, cont: Option<&str>, items: Vec<Value>) -> Value {
    let mut metadata = json!({"resourceVersion": rv});
    if let Some(c) = cont {
        metadata["continue"] = json!(c);
    }
    json!({"apiVersion": "v1", "kind": kind, "metadata": metadata, "items": items})
}

fn ok(v: &Value) -> Response<Body> {
    Response::new(Body::from(serde_json::to_vec(v).unwrap()))
}

fn status(code: u16, reason: &str, message: &str) -> Response<Body> {
    let body = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code,
                      "reason": reason, "message": message});
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap())
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap()
}

async fn take(s: impl Stream<Item = Received> + Unpin, n: usize) -> Vec<Received> {
    tokio::time::timeout(Duration::from_secs(10), s.take(n).collect::<Vec<_>>())
        .await
        .expect("events in time")
}

fn endpoint_ips(ev: &TruthEvent) -> Vec<IpAddr> {
    match ev {
        TruthEvent::InitApply(TruthObject::Slice(s)) | TruthEvent::Apply(TruthObject::Slice(s)) => {
            s.endpoints.iter().map(|e| e.ip).collect()
        }
        other => panic!("not a slice: {other:?}"),
    }
}

#[tokio::test]
async fn list_then_watch_of_endpointslices_yields_truth_events() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let (req, send) = handle.next_request().await.expect("LIST");
        assert_eq!(req.method(), Method::GET);
        assert_eq!(req.uri().path(), "/apis/discovery.k8s.io/v1/endpointslices");
        let q = req.uri().query().unwrap_or_default().to_string();
        assert!(q.contains("limit=100") && !q.contains("watch"), "{q}");
        send.send_response(ok(&list(
            "EndpointSliceList",
            "10",
            None,
            vec![slice("web-a", "9", &["10.0.0.1", "10.0.0.2"])],
        )));

        let (req, send) = handle.next_request().await.expect("WATCH");
        let q = req.uri().query().unwrap_or_default().to_string();
        assert!(
            q.contains("watch=true") && q.contains("resourceVersion=10"),
            "{q}"
        );
        let lines = [
            json!({"type": "MODIFIED", "object": slice("web-a", "11", &["10.0.0.2"])}),
            json!({"type": "ADDED", "object": slice("web-b", "12", &["10.0.0.3"])}),
            json!({"type": "DELETED", "object": slice("web-b", "13", &["10.0.0.3"])}),
        ];
        let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
        send.send_response(Response::new(Body::from(body.into_bytes())));
    });

    let events = take(
        watch_endpoint_slices(client, None, ticking_clock(), FAST),
        6,
    )
    .await;
    server
        .await
        .expect("fake apiserver saw the expected requests");

    let kinds: Vec<&str> = events
        .iter()
        .map(|r| match &r.event {
            TruthEvent::Init(_) => "relist",
            TruthEvent::InitApply(TruthObject::Slice(_)) => "listed",
            TruthEvent::Apply(TruthObject::Slice(_)) => "applied",
            TruthEvent::Delete(TruthKey::Slice { .. }) => "deleted",
            TruthEvent::InitDone(_) => "synced",
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            "relist", "listed", "synced", "applied", "applied", "deleted"
        ]
    );
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert_eq!(
        endpoint_ips(&events[1].event),
        vec![ip("10.0.0.1"), ip("10.0.0.2")]
    );
    assert_eq!(endpoint_ips(&events[3].event), vec![ip("10.0.0.2")]);
    assert_eq!(endpoint_ips(&events[4].event), vec![ip("10.0.0.3")]);
    assert_eq!(
        events[5].event,
        TruthEvent::Delete(TruthKey::Slice {
            namespace: "shop".into(),
            name: "web-b".into()
        })
    );
    match &events[3].event {
        TruthEvent::Apply(TruthObject::Slice(s)) => {
            assert_eq!(s.service_key(), ServiceKey::new("shop", "web"));
            assert_eq!(
                s.trigger_time,
                Some("2026-11-30T04:59:59Z".parse().unwrap())
            );
        }
        other => panic!("{other:?}"),
    }
    // Receive times come from the injected clock, one reading per watcher item.
    assert_eq!(events[0].at, Time::from_second(1_796_014_800).unwrap());
    assert_eq!(events[5].at, Time::from_second(1_796_014_800 + 5).unwrap());
}

#[tokio::test]
async fn a_failing_list_is_a_gap_that_ends_with_a_relist() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let (_, send) = handle.next_request().await.expect("first LIST");
        send.send_response(status(500, "InternalError", "etcd cluster is unavailable"));
        let (req, send) = handle.next_request().await.expect("second LIST");
        assert!(!req.uri().query().unwrap_or_default().contains("watch"));
        send.send_response(ok(&list(
            "EndpointSliceList",
            "20",
            None,
            vec![slice("web-a", "19", &["10.0.0.1"])],
        )));
        // Hold the WATCH open so nothing else happens.
        let (_req, send) = handle.next_request().await.expect("WATCH");
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(send);
    });
    let events = take(
        watch_endpoint_slices(client, Some("shop"), ticking_clock(), FAST),
        5,
    )
    .await;
    server.abort();
    // kube's watcher announces the relist before it lists; the LIST then fails.
    assert!(matches!(events[0].event, TruthEvent::Init(_)));
    match &events[1].event {
        TruthEvent::WatchFailed { error, .. } => {
            assert!(error.contains("etcd cluster is unavailable"), "{error}")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(events[2].event, TruthEvent::Init(_)));
    assert!(matches!(
        events[3].event,
        TruthEvent::InitApply(TruthObject::Slice(_))
    ));
    assert!(matches!(events[4].event, TruthEvent::InitDone(_)));
}

#[tokio::test]
async fn snapshot_pages_through_lists_and_reads_corefiles() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let mut seen = Vec::new();
        for _ in 0..6 {
            let (req, send) = handle.next_request().await.expect("request");
            let path = req.uri().path().to_string();
            let q = req.uri().query().unwrap_or_default().to_string();
            seen.push(format!("{path}?{q}"));
            let resp = match path.as_str() {
                "/api/v1/services" => ok(&list(
                    "ServiceList",
                    "1",
                    None,
                    vec![json!({"metadata": {"namespace": "shop", "name": "web"},
                                "spec": {"clusterIP": "None", "selector": {"app": "web"}}})],
                )),
                "/apis/discovery.k8s.io/v1/endpointslices" if !q.contains("continue=") => {
                    ok(&list(
                        "EndpointSliceList",
                        "2",
                        Some("page-2"),
                        vec![slice("web-a", "2", &["10.0.0.1"])],
                    ))
                }
                "/apis/discovery.k8s.io/v1/endpointslices" => {
                    assert!(q.contains("continue=page-2"), "{q}");
                    ok(&list(
                        "EndpointSliceList",
                        "2",
                        None,
                        vec![
                            slice("web-b", "2", &["10.0.0.2"]),
                            json!({"metadata": {"namespace": "shop", "name": "stray"}, "addressType": "IPv4"}),
                        ],
                    ))
                }
                "/api/v1/pods" => ok(&list(
                    "PodList",
                    "3",
                    None,
                    vec![
                        json!({"metadata": {"namespace": "shop", "name": "web-0", "uid": "u0"},
                                "status": {"podIP": "10.0.0.1"}}),
                    ],
                )),
                "/api/v1/namespaces/kube-system/configmaps/coredns" => ok(&json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"namespace": "kube-system", "name": "coredns"},
                    "data": {"Corefile": ".:53 {\n    cache 30\n}\n"}
                })),
                "/api/v1/namespaces/kube-system/configmaps/node-local-dns" => {
                    status(404, "NotFound", "configmaps \"node-local-dns\" not found")
                }
                other => panic!("unexpected request {other}"),
            };
            send.send_response(resp);
        }
        seen
    });
    let conn = Connection {
        client,
        bearer: None,
        origin: origin(),
    };
    let snap = snapshot(
        &conn,
        &WatchScope::default(),
        Duration::from_secs(10),
        &*ticking_clock(),
    )
    .await
    .unwrap();
    let seen = server.await.unwrap();
    assert_eq!(seen.len(), 6, "{seen:?}");

    let web = ServiceKey::new("shop", "web");
    let want: std::collections::BTreeSet<IpAddr> = ["10.0.0.1", "10.0.0.2"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(snap.truth.dns_answers(&web), want);
    assert_eq!(snap.pods.len(), 1);
    assert_eq!(snap.pods[0].pod.uid, "u0");
    assert_eq!(
        snap.corefiles,
        vec![(
            ConfigMapRef::coredns(),
            ".:53 {\n    cache 30\n}\n".to_string()
        )]
    );
    assert_eq!(snap.skipped.len(), 1, "the slice without a service label");
    assert_eq!(snap.skipped[0].name, "stray");
}

#[tokio::test]
async fn snapshot_errors_name_the_server_and_the_missing_permission() {
    let (client, mut handle) = mock_client();
    tokio::spawn(async move {
        let (_, send) = handle.next_request().await.expect("LIST services");
        send.send_response(status(
            403,
            "Forbidden",
            "services is forbidden: User \"system:serviceaccount:ghostip:ghostip\" cannot list resource \"services\"",
        ));
    });
    let conn = Connection {
        client,
        bearer: None,
        origin: origin(),
    };
    let err = snapshot(
        &conn,
        &WatchScope::default(),
        Duration::from_secs(10),
        &*ticking_clock(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            KubeError::Forbidden {
                resource: "services",
                code: 403,
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    for part in [
        "services",
        "https://mock.invalid:6443/",
        "fake apiserver",
        "context mock",
        "list/watch",
    ] {
        assert!(msg.contains(part), "{part:?} missing from {msg}");
    }

    // An API server that never answers: the timeout names it too.
    let (client, _handle) = mock_client();
    let conn = Connection {
        client,
        bearer: None,
        origin: origin(),
    };
    let err = snapshot(
        &conn,
        &WatchScope::default(),
        Duration::from_millis(50),
        &*ticking_clock(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, KubeError::Timeout { .. }), "{err:?}");
    assert!(
        err.to_string().contains("https://mock.invalid:6443/"),
        "{err}"
    );
}

fn readyz(code: u16) -> Response<Body> {
    if code == 200 {
        Response::builder()
            .status(StatusCode::OK)
            .body(Body::from(b"ok".to_vec()))
            .unwrap()
    } else {
        status(code, "InternalError", "[-]etcd failed: reason withheld")
    }
}

/// `/readyz` fails twice in a row: the API server is unreachable (a truth gap for every
/// watch) and a watch whose stream has not noticed anything drops it and relists; once
/// `/readyz` answers, reachable again. A single failure is not enough.
#[tokio::test]
async fn a_failing_readyz_is_an_unreachable_api_server_and_every_watch_relists() {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube::runtime::watcher::Event;

    let (client, mut handle) = mock_client();
    tokio::spawn(async move {
        for code in [200, 500, 200, 500, 500, 200] {
            let (req, send) = handle.next_request().await.expect("GET /readyz");
            assert_eq!(req.uri().path(), "/readyz");
            send.send_response(readyz(code));
        }
        // Later probes find it answering.
        while let Some((_, send)) = handle.next_request().await {
            send.send_response(readyz(200));
        }
    });
    let (trigger, signal) = relist_signal();
    let probe = LivenessProbe {
        interval: Duration::from_millis(10),
        timeout: Duration::from_secs(1),
        failures: 2,
    };
    let liveness = api_liveness(client, probe, ticking_clock(), trigger);

    // A watch whose first stream lists one slice and then hangs (it never notices the
    // outage); the second lists another.
    let lists: Vec<EndpointSlice> = ["a", "b"]
        .iter()
        .map(|n| serde_json::from_value(slice(n, "1", &["10.0.0.1"])).unwrap())
        .collect();
    let mut lists = lists.into_iter();
    let make = move || {
        let events: Vec<Result<Event<EndpointSlice>, kube::runtime::watcher::Error>> =
            match lists.next() {
                Some(s) => vec![
                    Ok(Event::Init),
                    Ok(Event::InitApply(s)),
                    Ok(Event::InitDone),
                ],
                None => Vec::new(),
            };
        futures::stream::iter(events).chain(futures::stream::pending())
    };
    let watch = relisting_events_from(make, ticking_clock(), FAST, Some(signal));
    let mut all = futures::stream::select(liveness, watch);
    let mut seen = Vec::new();
    let limit = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen.iter().any(|e| e == "reachable")
        || seen.iter().filter(|e| *e == "synced").count() < 2
    {
        let ev = tokio::time::timeout_at(limit, all.next())
            .await
            .unwrap_or_else(|_| panic!("events so far: {seen:?}"))
            .unwrap();
        seen.push(match ev.event {
            TruthEvent::ApiUnreachable { error } => {
                assert!(error.contains("/readyz"), "{error}");
                "unreachable".to_string()
            }
            TruthEvent::ApiReachable => "reachable".to_string(),
            TruthEvent::InitApply(TruthObject::Slice(s)) => format!("slice {}", s.name),
            TruthEvent::InitDone(_) => "synced".to_string(),
            TruthEvent::Init(_) => "relist".to_string(),
            other => format!("{other:?}"),
        });
    }
    let at = |what: &str| seen.iter().position(|e| e == what).unwrap();
    assert_eq!(
        seen.iter().filter(|e| *e == "unreachable").count(),
        1,
        "{seen:?}"
    );
    assert!(at("slice a") < at("unreachable"), "{seen:?}");
    assert!(at("unreachable") < at("slice b"), "{seen:?}");
    assert!(at("unreachable") < at("reachable"), "{seen:?}");
}
