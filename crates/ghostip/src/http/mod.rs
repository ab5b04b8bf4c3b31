//! The HTTP endpoints every long-running command serves: `/metrics`, `/healthz`, `/readyz`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;

#[derive(Clone)]
struct Health {
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
}

/// The routes: OpenMetrics text at `/metrics`, liveness at `/healthz`, and `/readyz`, which is
/// 503 while `ready` is false (the truth is not synced: a truth gap).
pub fn router(metrics: Arc<Metrics>, ready: Arc<AtomicBool>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Health { metrics, ready })
}

async fn metrics_handler(State(s): State<Health>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(s): State<Health>) -> impl IntoResponse {
    if s.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok: truth synced\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: truth not synced (truth gap)\n",
        )
    }
}
