//! `ghostip watch`: the long-running observer with `/metrics`, `/healthz`, `/readyz` and `/status`.
//!
//! Truth, ledger and DNS probes run until SIGTERM or Ctrl-C; shutdown finishes within 5 s
//! (the ledger is flushed with a deadline, background tasks are cancelled). The endpoint is
//! bounded and, off loopback, authenticated as the agent's is ([`crate::http`]).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::{
    Outcome, dns_config, kube_connect, new_session, open_ledger, probe_settings, service_filter,
    session_config,
};
use crate::cli::{GlobalArgs, WatchArgs};
use crate::clock::SystemClock;
use crate::kube::{SyncState, WatchScope, watch_truth};
use crate::ledger::{LedgerHealth, LedgerWriter, RetentionPruner, WriterOptions};
use crate::metrics::Metrics;
use crate::pipeline::{Pipeline, Step};
use ghostip_session::layers::dns::budget::ClusterBudget;

pub(super) async fn run(g: &GlobalArgs, args: WatchArgs) -> anyhow::Result<Outcome> {
    let conn = kube_connect(g).await?;
    let ledger = open_ledger(g)?;
    let db_path = ledger.path().to_path_buf();
    let mut metrics = Metrics::new();
    let layer_metrics = crate::layers::register_metrics(&mut metrics, crate::layers::Runs::Cluster);
    let metrics = Arc::new(metrics);
    let writer = LedgerWriter::spawn_with_error_hook(
        ledger,
        WriterOptions::default(),
        metrics.ledger_error_hook(),
    )
    .context("starting the ledger writer")?;
    let ready = Arc::new(AtomicBool::new(false));
    let status: WatchStatus = Arc::default();
    let cancel = CancellationToken::new();

    let server = crate::http::start(
        args.listen,
        &args.auth,
        &conn.client,
        crate::http::router(Arc::clone(&metrics), Arc::clone(&ready))
            .merge(status_routes(Arc::clone(&status))),
        &cancel,
    )?;
    // Drains recorded by `ghostip drain-wait` on terminating pods.
    tokio::spawn(super::drain_wait::events::follow(
        conn.client.clone(),
        Arc::clone(&metrics),
        cancel.child_token(),
    ));
    tracing::info!(listen = %args.listen, db = %db_path.display(), api = %conn.origin, "ghostip watch started");

    let scope = WatchScope {
        namespace: None,
        ..WatchScope::default()
    };
    let truth = watch_truth(&conn, &scope, Arc::new(SystemClock));
    let filter = service_filter(&args.scope);
    let session = new_session(
        session_config(filter, false),
        SyncState::new(crate::clock::wall_now(), scope.kinds()),
        &dns_config(&args.dns),
        None,
    );
    let settings = probe_settings(&args.dns, args.sweep)?;
    let mut p = Pipeline::start_recording(
        session,
        truth.boxed(),
        settings,
        writer.sender(),
        &metrics,
        cancel.clone(),
    );
    // watch's part of the cluster's DNS budget: its reserve, at most its --qps.
    if let Some(b) = ClusterBudget::from_flag(args.cluster_qps) {
        let qps = b.watch_share(args.dns.qps);
        p.budget().set_rate(qps);
        tracing::info!(
            cluster_qps = b.cluster_qps,
            qps,
            "DNS probe budget: watch's share of --cluster-qps"
        );
    }

    // Cluster-wide layer adapters (the opted-in gRPC clients' channelz, CoreDNS's metrics).
    let cluster = crate::layers::ClusterSetup {
        client: &conn.client,
        channelz: &args.channelz,
        metrics: &layer_metrics,
        coredns_interval: args.coredns_metrics_interval,
        dns_service: &dns_config(&args.dns).paths.dns_service,
    };
    crate::layers::start_cluster_adapters(&cluster, &mut p).await;

    let signal_cancel = cancel.clone();
    tokio::spawn(async move {
        super::shutdown_signal().await;
        tracing::info!("shutdown requested");
        signal_cancel.cancel();
    });

    let mut pruner = RetentionPruner::new(args.retention);
    let exit_after = args.ledger_failure_exit_after;
    let mut failed = Ok(());
    loop {
        match p.next().await {
            Step::Stopped => break,
            Step::Truth { received: r, .. } => {
                if let crate::kube::TruthEvent::WatchFailed { kind, error } = &r.event {
                    tracing::warn!(%kind, %error, "watch failed; retrying with backoff (truth gap)");
                }
                let synced = p.session.synced();
                p.adapters_on_truth(crate::clock::wall_now(), synced);
            }
            Step::Tick(now) => {
                pruner.tick(now, &writer.sender()).await;
                publish(&p, &status);
            }
            Step::Probe => continue,
        }
        let synced = p.session.synced();
        p.step_adapters(crate::clock::wall_now(), synced).await;
        failed = update_ready(&ready, p.session.judging(), &writer, exit_after, &db_path);
        if failed.is_err() {
            break;
        }
    }
    // Clean shutdown within 5 s: stop probing, flush the ledger with a deadline.
    p.close(Duration::from_secs(3), server, writer).await;
    tracing::info!("ghostip watch stopped");
    failed.map(|()| Outcome::Clean)
}

/// What `GET /status` answers: `{"layers": {<layer>: <section>}}`, one section per running
/// cluster-wide adapter (the components layer: each CoreDNS pod's last scrape, error and p99).
type WatchStatus = Arc<std::sync::Mutex<serde_json::Value>>;

/// `GET /status` on watch's endpoint (behind the same authentication as `/metrics`).
fn status_routes(status: WatchStatus) -> axum::Router {
    axum::Router::new().route(
        "/status",
        axum::routing::get(move || {
            let body = status
                .lock()
                .map(|v| v.clone())
                .unwrap_or(serde_json::Value::Null);
            async move { axum::Json(body) }
        }),
    )
}

/// Publishes every adapter's section of `/status`.
fn publish(p: &Pipeline, status: &WatchStatus) {
    let layers: serde_json::Map<String, serde_json::Value> = crate::layers::snapshots(p)
        .into_iter()
        .map(|(layer, s)| (layer.to_string(), s.to_json()))
        .collect();
    if let Ok(mut v) = status.lock() {
        *v = serde_json::json!({ "layers": layers });
    }
}

/// Ready while the truth is judged and the ledger's writes succeed; an error (the command
/// exits 2) once they have failed for `exit_after` without a success.
pub(super) fn update_ready(
    ready: &AtomicBool,
    judging: bool,
    writer: &LedgerWriter,
    exit_after: Duration,
    db: &Path,
) -> anyhow::Result<()> {
    let health = writer.health(exit_after);
    ready.store(judging && health == LedgerHealth::Ok, Ordering::Relaxed);
    match health {
        LedgerHealth::GiveUp(cause) => Err(anyhow::anyhow!("{cause}").context(format!(
            "writing the ledger {} (failing for over {exit_after:?}, --ledger-failure-exit-after)",
            db.display()
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use ghostip_core::truth::PodRecord;
    use ghostip_core::{PodRef, Time};
    use ghostip_testkit::records::pod_record;

    use super::*;
    use crate::ledger::{Ledger, LedgerOp};

    fn pod(i: u32) -> PodRecord {
        let pod = PodRef {
            namespace: "demo".into(),
            name: format!("web-{i}-{}", "x".repeat(200)),
            uid: format!("uid-{i}"),
        };
        pod_record(pod, vec![std::net::IpAddr::V4((0x0a00_0000 + i).into())])
    }

    /// `GET /status` answers the last published sections as JSON.
    #[tokio::test]
    async fn status_serves_the_published_sections() {
        use tower::ServiceExt as _;
        let status: WatchStatus = Arc::default();
        let app = status_routes(Arc::clone(&status));
        let get = |app: axum::Router| async move {
            let req = axum::http::Request::builder()
                .uri("/status")
                .body(axum::body::Body::empty())
                .unwrap();
            let resp = app.oneshot(req).await.unwrap();
            assert_eq!(resp.status(), axum::http::StatusCode::OK);
            let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
                .await
                .unwrap();
            serde_json::from_slice::<serde_json::Value>(&body).unwrap()
        };
        assert_eq!(get(app.clone()).await, serde_json::Value::Null);
        *status.lock().unwrap() = serde_json::json!({"layers": {"components": {"coredns": [{"pod": "kube-system/coredns-a"}]}}});
        assert_eq!(
            get(app).await["layers"]["components"]["coredns"][0]["pod"],
            "kube-system/coredns-a"
        );
    }

    /// `/readyz` follows the ledger: ready while writes succeed, not ready from the first
    /// failed commit, and an error naming the file once the failure outlasts the bound.
    #[test]
    fn readiness_follows_the_ledger_and_gives_up_after_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("w.db");
        let mut ledger = Ledger::open(&db).unwrap();
        ledger.set_max_page_count(1).unwrap();
        let writer = LedgerWriter::spawn(ledger, WriterOptions::default()).unwrap();
        let ready = AtomicBool::new(false);
        let bound = Duration::from_secs(60);
        update_ready(&ready, true, &writer, bound, &db).unwrap();
        assert!(ready.load(Ordering::Relaxed), "healthy and judging");
        update_ready(&ready, false, &writer, bound, &db).unwrap();
        assert!(!ready.load(Ordering::Relaxed), "a truth gap");
        // The capped file fills up: commits fail with SQLITE_FULL.
        let started = crate::clock::monotonic_now();
        let mut i = 0;
        while writer.stats().failing_since.is_none() {
            assert!(started.elapsed() < Duration::from_secs(30), "never full");
            writer
                .blocking_send(LedgerOp::ApplyPod {
                    pod: pod(i),
                    at: Time::from_second(1_700_000_000).unwrap(),
                })
                .unwrap();
            writer.blocking_flush().unwrap();
            i += 1;
        }
        update_ready(&ready, true, &writer, bound, &db).unwrap();
        assert!(
            !ready.load(Ordering::Relaxed),
            "the ledger cannot be written"
        );
        let err = update_ready(&ready, true, &writer, Duration::ZERO, &db).unwrap_err();
        let text = format!("{err:#}");
        assert!(
            text.starts_with(&format!("writing the ledger {}", db.display())),
            "{text}"
        );
        assert!(text.contains("full"), "{text}");
        drop(writer.close());
    }
}
