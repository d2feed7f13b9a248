//! The operator's page on the Worker's HTTP server: the queue, storage configs, running items with live
//! progress, recent failures and this Worker's outage events, and actions (retry, cancel, pause and resume, a
//! crawl now) for whoever has the token ([`auth`]). Server-rendered HTML (maud); a few lines of JavaScript
//! follow the running items over server-sent events, and the page reads fine without it.
//!
//! Reading routes are in [`read`], actions (one route each) in [`actions`]; what they answer, errors included,
//! in [`answer`]. Every action acts through [`crate::ops`].

mod actions;
mod answer;
pub mod auth;
pub mod charts;
mod read;
mod root;
mod samples;
mod view;

use std::sync::Arc;
use std::time::Duration;

use almanac_domain::{Status, WorkItem};
use almanac_store_pg::{PgStore, StoreError};
use axum::Router;
use axum::http::header;
use axum::routing::get;
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use self::auth::Auth;
pub use self::root::Root;
pub use self::samples::Samples;
use crate::observe::Recent;

/// What the page reads and acts on.
pub struct Page {
    /// The page's own connections.
    pub store: PgStore,
    /// Who may act.
    pub auth: Auth,
    /// This Worker's outage events.
    pub recent: Recent,
    /// Progress samples of running items, for their rate over time.
    pub samples: Samples,
    /// This Worker's id, shown in the header.
    pub worker_id: String,
    /// Host names the HTTP server answers to beside IP addresses and `localhost` (`http.allowed_hosts`;
    /// [`crate::http`] checks every request against them).
    pub allowed_hosts: Vec<String>,
    /// Ends the live streams when the Worker stops (an open tab must not hold up the shutdown).
    pub stop: CancellationToken,
}

/// The page's style sheet and script, served from the binary (the page's Content-Security-Policy allows its own
/// resources only, nothing inline). Routes, as every path the page's router knows; the page links to them through
/// [`Root::link`].
pub const STYLESHEET: &str = "/page.css";
/// See [`STYLESHEET`].
pub const SCRIPT: &str = "/page.js";
const PAGE_CSS: &str = include_str!("page.css");
const PAGE_JS: &str = include_str!("page.js");

/// The page's routes. Problem pages are rendered last, when the request's [`Root`] is known
/// ([`answer::render_problems`]).
pub fn router(page: Arc<Page>) -> Router {
    Router::new()
        .route(STYLESHEET, get(|| async { ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], PAGE_CSS) }))
        .route(SCRIPT, get(|| async { ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], PAGE_JS) }))
        .merge(read::routes())
        .merge(actions::routes())
        .with_state(page)
        .layer(axum::middleware::from_fn(answer::render_problems))
}

impl Page {
    /// The running items, each reading kept as a progress sample (the page, its live streams and the sampler
    /// all read them here).
    async fn running_items(&self) -> Result<Vec<WorkItem>, StoreError> {
        let running = self.store.list_items(Some(Status::Running), 100).await?;
        self.samples.record(&running, wall_clock());
        Ok(running)
    }
}

/// Now, as the page shows it and samples progress by: where the page reads the wall clock.
fn wall_clock() -> DateTime<Utc> {
    Utc::now()
}

/// Samples running items every two seconds until `stop`, so a crawl's rate has a history even when nobody
/// has the page open.
pub async fn sample(page: Arc<Page>, stop: CancellationToken) {
    let mut every = tokio::time::interval(Duration::from_secs(2));
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = every.tick() => {
                let _ = page.running_items().await;
            }
        }
    }
}

#[cfg(test)]
mod proxied;
#[cfg(test)]
mod tests;
