//! `/healthz` (the process answers), `/readyz` (the database answers and the claim loop runs) and `/metrics`
//! (Prometheus text): a small HTTP/1.1 responder, enough for probes and scrapers.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use almanac_domain::CatalogueStore;
use almanac_store_pg::PgStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::observe::EventCounts;

/// What the endpoints read.
#[derive(Clone)]
pub struct Health {
    pub store: PgStore,
    pub counts: EventCounts,
    /// True while the executor's claim loop runs.
    pub running: Arc<AtomicBool>,
}

/// Binds `address` (so a taken port fails at start, with the address in the error) and serves until `stop`.
pub async fn bind(address: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(address).await.map_err(|e| anyhow::anyhow!("http.address: cannot listen on {address}: {e}"))
}

pub async fn serve(listener: TcpListener, health: Health, stop: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, _)) => {
                let health = health.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(Duration::from_secs(10), respond(stream, health)).await;
                });
            }
            Err(e) => warn!(error = %e, "accepting an HTTP connection failed"),
        }
    }
}

async fn respond(mut stream: TcpStream, health: Health) -> std::io::Result<()> {
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    while !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") && len < buf.len() {
        let n = stream.read(&mut buf[len..]).await?;
        if n == 0 {
            break;
        }
        len += n;
    }
    let request = String::from_utf8_lossy(&buf[..len]);
    let path = request.lines().next().and_then(|l| l.split_whitespace().nth(1)).unwrap_or("");
    let (status, content_type, body) = match path {
        "/healthz" => ("200 OK", "text/plain", "ok\n".to_owned()),
        "/readyz" => {
            let db = tokio::time::timeout(Duration::from_secs(2), health.store.now()).await;
            match (db, health.running.load(Ordering::Relaxed)) {
                (Ok(Ok(_)), true) => ("200 OK", "text/plain", "ready\n".to_owned()),
                (Ok(Ok(_)), false) => {
                    ("503 Service Unavailable", "text/plain", "the claim loop is not running\n".to_owned())
                }
                _ => ("503 Service Unavailable", "text/plain", "the database does not answer\n".to_owned()),
            }
        }
        "/metrics" => ("200 OK", "text/plain; version=0.0.4", metrics(&health).await),
        _ => ("404 Not Found", "text/plain", "not found\n".to_owned()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

async fn metrics(health: &Health) -> String {
    let mut out = String::new();
    out.push_str("# HELP almanac_events_total Worker events by name (claims, lost races, heartbeat failures, self-stops, recoveries, outcomes).\n");
    out.push_str("# TYPE almanac_events_total counter\n");
    let observed = health.counts.snapshot();
    for (event, n) in &observed.events {
        let _ = writeln!(out, "almanac_events_total{{event=\"{event}\"}} {n}");
    }
    out.push_str("# HELP almanac_item_duration_seconds Time from claim to outcome, by kind and outcome.\n");
    out.push_str("# TYPE almanac_item_duration_seconds histogram\n");
    for ((kind, outcome), h) in &observed.durations {
        let labels = format!("kind=\"{kind}\",outcome=\"{outcome}\"");
        let mut cumulative = 0;
        for (le, n) in crate::observe::DURATION_BUCKETS.iter().zip(h.buckets) {
            cumulative += n;
            let _ = writeln!(out, "almanac_item_duration_seconds_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        let _ = writeln!(out, "almanac_item_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
        let _ = writeln!(out, "almanac_item_duration_seconds_sum{{{labels}}} {}", h.sum_seconds);
        let _ = writeln!(out, "almanac_item_duration_seconds_count{{{labels}}} {}", h.count);
    }
    out.push_str(
        "# HELP almanac_crawl_total Files found, ingested and failed, and bytes hashed, by finished crawls.\n",
    );
    out.push_str("# TYPE almanac_crawl_total counter\n");
    for (what, n) in &observed.crawl {
        let _ = writeln!(out, "almanac_crawl_total{{what=\"{what}\"}} {n}");
    }
    out.push_str(
        "# HELP almanac_work_items Work items in the queue by kind and status.\n# TYPE almanac_work_items gauge\n",
    );
    if let Ok(Ok(rows)) = tokio::time::timeout(Duration::from_secs(2), health.store.queue_summary()).await {
        for r in rows {
            let _ = writeln!(out, "almanac_work_items{{kind=\"{}\",status=\"{}\"}} {}", r.kind, r.status, r.count);
        }
        out.push_str("almanac_database_up 1\n");
    } else {
        out.push_str("almanac_database_up 0\n");
    }
    out
}
