//! The Worker's HTTP server (axum): `/healthz` (the process answers), `/readyz` (the database answers and the
//! claim loop runs), `/metrics` (Prometheus text, HELP and TYPE on every family), and the operator's page
//! ([`crate::page`]) at `/`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use almanac_domain::{DatabaseClock, Status, WorkKind};
use almanac_store_pg::PgStore;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::observe::{DATABASE_UP, WORK_ITEMS};

/// What the endpoints read.
#[derive(Clone)]
pub struct Health {
    pub store: PgStore,
    /// Renders the process's metrics.
    pub metrics: PrometheusHandle,
    /// The process's CPU, memory and open files, read at each scrape.
    pub process: Arc<metrics_process::Collector>,
    /// True while the executor's claim loop runs.
    pub running: Arc<AtomicBool>,
    /// The operator's page.
    pub page: Arc<crate::page::Page>,
}

/// Binds `address` (so a taken port fails at start, with the address in the error).
pub async fn bind(address: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(address).await.map_err(|e| anyhow::anyhow!("http.address: cannot listen on {address}: {e}"))
}

/// The routes.
pub fn router(health: Health) -> Router {
    let page = crate::page::router(health.page.clone());
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(health)
        .merge(page)
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found\n") })
}

/// Serves until `stop`.
pub async fn serve(listener: TcpListener, health: Health, stop: CancellationToken) {
    if let Err(e) = axum::serve(listener, router(health)).with_graceful_shutdown(stop.cancelled_owned()).await {
        warn!(event = "http_failed", error = %e, "the HTTP server stopped");
    }
}

async fn readyz(State(health): State<Health>) -> impl IntoResponse {
    let db = tokio::time::timeout(Duration::from_secs(2), health.store.db_now()).await;
    match (db, health.running.load(Ordering::Relaxed)) {
        (Ok(Ok(_)), true) => (StatusCode::OK, "ready\n"),
        (Ok(Ok(_)), false) => (StatusCode::SERVICE_UNAVAILABLE, "the claim loop is not running\n"),
        _ => (StatusCode::SERVICE_UNAVAILABLE, "the database does not answer\n"),
    }
}

async fn metrics(State(health): State<Health>) -> impl IntoResponse {
    match tokio::time::timeout(Duration::from_secs(2), health.store.queue_summary()).await {
        Ok(Ok(rows)) => {
            // Every kind and status, so a count that drops to zero shows as zero, not as its last value.
            for kind in WorkKind::ALL {
                for status in Status::ALL {
                    let count = rows.iter().find(|r| r.kind == kind && r.status == status).map_or(0, |r| r.count);
                    metrics::gauge!(WORK_ITEMS, "kind" => kind.as_str(), "status" => status.as_str()).set(count as f64);
                }
            }
            metrics::gauge!(DATABASE_UP).set(1.0);
        }
        _ => metrics::gauge!(DATABASE_UP).set(0.0),
    }
    health.process.collect();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], health.metrics.render())
}
