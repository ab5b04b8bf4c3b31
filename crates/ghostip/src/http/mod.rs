//! The HTTP endpoints every long-running command serves: `/metrics`, `/healthz`, `/readyz`, and how they are served: bounded ([`serve`], [`admission`]) and, off loopback, authenticated ([`auth`]).

pub mod admission;
pub mod auth;
pub mod serve;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cli::AuthArgs;
use crate::metrics::Metrics;
use auth::{Auth, KubeReviewer};

/// Listens on `listen` and serves `app` there within the default [`serve::Limits`] until
/// `cancel`; requests are authenticated with the API server behind `client` when `auth`
/// requires it for that address.
pub fn start(
    listen: SocketAddr,
    auth: &AuthArgs,
    client: &kube::Client,
    app: Router,
    cancel: &CancellationToken,
) -> anyhow::Result<JoinHandle<std::io::Result<()>>> {
    let listener = serve::bind(listen).with_context(|| format!("listening on {listen}"))?;
    let app = if auth.required(listen) {
        tracing::info!(%listen, audiences = ?auth.audiences, "requests other than /healthz and /readyz need a bearer token the API server authenticates and authorizes");
        let reviewer = KubeReviewer::new(client.clone(), auth.audiences.clone());
        auth::protect(app, Arc::new(Auth::new(Arc::new(reviewer))))
    } else {
        if !listen.ip().to_canonical().is_loopback() {
            tracing::warn!(%listen, "serving without authentication (--auth none) on an address other than loopback");
        }
        app
    };
    Ok(tokio::spawn(serve::serve(
        listener,
        app,
        serve::Limits::default(),
        cancel.clone(),
    )))
}

#[derive(Clone)]
struct Health {
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
}

/// The routes: OpenMetrics text at `/metrics`, liveness at `/healthz`, and `/readyz`, which is
/// 503 while `ready` is false (the truth is not synced: a truth gap; or the ledger's writes
/// fail).
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
            "not ready: truth not synced (truth gap), or the ledger cannot be written (see the log)\n",
        )
    }
}
