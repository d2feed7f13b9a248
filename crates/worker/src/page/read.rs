//! The page's reading routes: the page itself, its running items (a fragment, and live as server-sent events)
//! and one item's page. Reading needs nothing; a signed-in browser also gets the action buttons.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use almanac_domain::ports::{WatchState, WatchStore};
use almanac_domain::{Status, WorkItem, WorkKind};
use almanac_store_pg::{ConfigOverview, HourlyOutcome, ItemFilter, QueueSummaryRow};
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Html;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::get;
use axum_extra::extract::cookie::CookieJar;
use chrono::{DateTime, Utc};

use super::answer::{Problem, take_flash};
use super::{Page, Root, view};
use crate::ops::{self, OpError};

/// The reading routes.
pub fn routes() -> Router<Arc<Page>> {
    Router::new()
        .route("/", get(index))
        .route("/running", get(running_fragment))
        .route("/events", get(events))
        .route("/items/{id}", get(item))
}

/// What the page shows, read in one go.
pub(super) struct Snapshot {
    pub(super) summary: Vec<QueueSummaryRow>,
    pub(super) paused_kinds: Vec<WorkKind>,
    pub(super) configs: Vec<ConfigOverview>,
    /// Every config's watch (ADR 0014).
    pub(super) watches: Vec<WatchState>,
    pub(super) running: Vec<WorkItem>,
    pub(super) failed: Vec<WorkItem>,
    pub(super) crawls_with_failures: Vec<WorkItem>,
    pub(super) hours: Vec<HourlyOutcome>,
    pub(super) now: DateTime<Utc>,
}

async fn snapshot(page: &Page) -> Result<Snapshot, OpError> {
    let store = &page.store;
    let running = page.running_items().await?;
    let now = super::wall_clock();
    let recent_crawls = store
        .find_items(&ItemFilter { status: Some(Status::Succeeded), kind: Some(WorkKind::Crawl), config: None }, 20)
        .await?;
    Ok(Snapshot {
        summary: store.queue_summary().await?,
        paused_kinds: store.paused().await?.0,
        configs: store.config_overview().await?,
        watches: store.watch_states().await?,
        running,
        failed: store.list_items(Some(Status::Failed), 10).await?,
        crawls_with_failures: recent_crawls
            .into_iter()
            .filter(|i| !ops::failed_files(i).listed.is_empty())
            .take(5)
            .collect(),
        hours: store.outcomes_by_hour(24).await?,
        now,
    })
}

/// Who is looking, and from where: the CSRF field when signed in, the way back to the page's root.
fn viewer(page: &Page, headers: &HeaderMap, root: Root) -> view::Viewer {
    view::Viewer {
        actions_enabled: page.auth.enabled(),
        csrf: if page.auth.signed_in(headers) { page.auth.csrf() } else { None },
        root,
    }
}

/// The page, with the outcome of the action that led back to it (shown once).
async fn index(
    State(page): State<Arc<Page>>,
    headers: HeaderMap,
    root: Root,
    jar: CookieJar,
) -> Result<(CookieJar, Html<String>), Problem> {
    let (jar, flash) = take_flash(jar, &root);
    let viewer = viewer(&page, &headers, root);
    match snapshot(&page).await {
        Ok(s) => Ok((jar, Html(view::index(&page, &s, &viewer, flash.as_deref()).into_string()))),
        Err(e) => Err(Problem::new(super::answer::status_of(&e), format!("the page cannot be shown: {e}"))),
    }
}

/// The running items' section.
async fn running_fragment(
    State(page): State<Arc<Page>>,
    headers: HeaderMap,
    root: Root,
) -> Result<Html<String>, Problem> {
    let viewer = viewer(&page, &headers, root);
    match page.running_items().await {
        Ok(running) => Ok(Html(view::running(&page, &running, &viewer).into_string())),
        Err(e) => Err(Problem::new(StatusCode::SERVICE_UNAVAILABLE, format!("the database does not answer: {e}"))),
    }
}

/// The running items' section every two seconds, as server-sent events.
async fn events(State(page): State<Arc<Page>>, headers: HeaderMap, root: Root) -> impl axum::response::IntoResponse {
    let viewer = viewer(&page, &headers, root);
    let stream = futures_util::stream::unfold((page.clone(), viewer, true), |(page, viewer, first)| async move {
        if !first {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let html = match page.running_items().await {
            Ok(running) => view::running(&page, &running, &viewer).into_string(),
            Err(e) => view::unavailable(&e.to_string()).into_string(),
        };
        Some((Ok::<_, Infallible>(Event::default().event("running").data(html)), (page, viewer, false)))
    });
    let stop = page.stop.clone().cancelled_owned();
    // nginx holds a proxied answer back until its buffer fills, unless the answer says not to: each update would
    // reach the page late, several at once.
    let unbuffered = [(axum::http::HeaderName::from_static("x-accel-buffering"), "no")];
    (unbuffered, Sse::new(futures_util::StreamExt::take_until(stream, stop)).keep_alive(KeepAlive::default()))
}

/// One item's page.
async fn item(
    State(page): State<Arc<Page>>,
    headers: HeaderMap,
    root: Root,
    Path(id): Path<String>,
) -> Result<Html<String>, OpError> {
    let viewer = viewer(&page, &headers, root);
    let item = ops::find_item(&page.store, ops::parse_item_id(&id)?).await?;
    Ok(Html(view::item(&page, &item, &viewer).into_string()))
}
