//! The `--metrics-listen` listener: `GET /metrics` (Prometheus) and
//! `GET /` (the replica's status page), over plain HTTP/1.1 with axum.
//!
//! It is a listener of its own, apart from the gRPC port, so a scraper
//! needs neither gRPC nor the API's credentials, and a slow scrape never
//! competes with requests for the API's connection limits. What the page
//! shows and what is sampled at scrape time is the replica's business:
//! it hands in a [`Source`].

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use tonic::codegen::BoxFuture;

use crate::Metrics;

/// The OpenMetrics text format, which Prometheus negotiates and parses.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the listener asks of the replica.
pub trait Source: Send + Sync + 'static {
    /// Sets the gauges that are read from the replica's state (term,
    /// indexes, sizes), right before a scrape is encoded.
    fn refresh(&self, metrics: &Metrics);
    /// The status page, as one HTML document.
    fn status_page(&self) -> BoxFuture<String, std::convert::Infallible>;
}

#[derive(Clone)]
struct Served {
    metrics: Arc<Metrics>,
    source: Arc<dyn Source>,
}

async fn metrics(State(served): State<Served>) -> impl IntoResponse {
    served.source.refresh(&served.metrics);
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        served.metrics.encode(),
    )
}

async fn status_page(State(served): State<Served>) -> impl IntoResponse {
    let Ok(page) = served.source.status_page().await;
    (
        // The page is live data: never cache it.
        [(header::CACHE_CONTROL, "no-store")],
        Html(page),
    )
}

/// Serves `/metrics` and `/` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    source: Arc<dyn Source>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = Router::new()
        .route("/metrics", get(self::metrics))
        .route("/", get(self::status_page))
        .with_state(Served { metrics, source });
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}
