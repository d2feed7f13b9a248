//! The operator's page on the Worker's HTTP server: the queue, storage configs, running items with live
//! progress, recent failures and this Worker's outage events, and actions (retry, cancel, pause and resume, a
//! crawl now) for whoever has the token ([`auth`]). Server-rendered HTML (maud); a few lines of JavaScript
//! follow the running items over server-sent events, and the page reads fine without it.

pub mod auth;
pub mod charts;
mod view;

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use almanac_domain::{ProgressEstimate, Status, WorkItem, WorkItemId, WorkKind, WorkQueue};
use almanac_store_pg::{ItemFilter, PgStore};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use chrono::{DateTime, Utc};
use futures_util::Stream;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use self::auth::{Auth, Peer, Refusal, SESSION_COOKIE, Via};
use crate::observe::Recent;
use crate::ops::{self, OpError, PauseTarget};

/// What the page reads and acts on.
pub struct Page {
    pub store: PgStore,
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

/// One progress sample: when, and units done.
pub type Sample = (DateTime<Utc>, u64);

/// Progress samples of running items, a few minutes' worth each.
#[derive(Default)]
pub struct Samples(Mutex<HashMap<WorkItemId, VecDeque<Sample>>>);

/// Samples kept per item (at one every two seconds, about ten minutes).
const SAMPLES_KEPT: usize = 300;

impl Samples {
    /// Records the running items' progress; forgets items no longer running.
    pub fn record(&self, running: &[WorkItem], now: DateTime<Utc>) {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|id, _| running.iter().any(|i| i.id == *id));
        for item in running {
            let Some(done) = item.progress.as_ref().and_then(ProgressEstimate::from_progress).map(|e| e.done) else {
                continue;
            };
            let series = all.entry(item.id).or_default();
            if series.back().is_some_and(|(at, _)| (now - *at).num_milliseconds() < 1_000) {
                continue;
            }
            if series.len() == SAMPLES_KEPT {
                series.pop_front();
            }
            series.push_back((now, done));
        }
    }

    pub fn series(&self, id: WorkItemId) -> Vec<Sample> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }
}

/// The page's style sheet and script, served from the binary (the page's Content-Security-Policy allows its own
/// resources only, nothing inline).
pub const STYLESHEET: &str = "/page.css";
pub const SCRIPT: &str = "/page.js";
const PAGE_CSS: &str = include_str!("page.css");
const PAGE_JS: &str = include_str!("page.js");

/// The page's routes.
pub fn router(page: Arc<Page>) -> axum::Router {
    Router::new()
        .route("/", get(index))
        .route(STYLESHEET, get(|| async { ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], PAGE_CSS) }))
        .route(SCRIPT, get(|| async { ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], PAGE_JS) }))
        .route("/running", get(running_fragment))
        .route("/events", get(events))
        .route("/items/{id}", get(item))
        .route("/login", post(login))
        .route("/logout", post(logout))
        .route("/items/{id}/{action}", post(item_action))
        .route("/configs/{id}/{action}", post(config_action))
        .route("/kinds/{kind}/{action}", post(kind_action))
        .with_state(page)
}

impl Page {
    /// The running items, each reading kept as a progress sample (the page, its live streams and the sampler
    /// all read them here).
    async fn running_items(&self) -> Result<Vec<WorkItem>, almanac_store_pg::StoreError> {
        let running = self.store.list_items(Some(Status::Running), 100).await?;
        self.samples.record(&running, Utc::now());
        Ok(running)
    }
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

/// The cookie that carries the outcome of an action to the page it redirects to (the page itself never takes
/// a message from its URL, which anyone could write).
const FLASH_COOKIE: &str = "almanac_flash";

fn flash_cookie(message: &str) -> String {
    format!("{FLASH_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age=60", encode(message))
}

/// Back to the page, with a message for it.
fn back_with(message: &str, extra_cookie: Option<String>) -> Response {
    let mut response = Redirect::to("/").into_response();
    let headers = response.headers_mut();
    for cookie in std::iter::once(flash_cookie(message)).chain(extra_cookie) {
        headers.append(header::SET_COOKIE, cookie.parse().expect("an ASCII cookie"));
    }
    response
}

/// What the page shows, read in one go.
pub(crate) struct Snapshot {
    summary: Vec<almanac_store_pg::QueueSummaryRow>,
    paused_kinds: Vec<WorkKind>,
    configs: Vec<almanac_store_pg::ConfigOverview>,
    running: Vec<WorkItem>,
    failed: Vec<WorkItem>,
    crawls_with_failures: Vec<WorkItem>,
    hours: Vec<almanac_store_pg::HourlyOutcome>,
    now: DateTime<Utc>,
}

async fn snapshot(page: &Page) -> Result<Snapshot, OpError> {
    let store = &page.store;
    let running = page.running_items().await?;
    let now = Utc::now();
    let recent_crawls = store
        .find_items(&ItemFilter { status: Some(Status::Succeeded), kind: Some(WorkKind::Crawl), config: None }, 20)
        .await?;
    Ok(Snapshot {
        summary: store.queue_summary().await?,
        paused_kinds: store.paused().await?.0,
        configs: store.config_overview().await?,
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

/// Who is looking: the CSRF field when signed in.
fn viewer(page: &Page, headers: &HeaderMap) -> view::Viewer {
    view::Viewer {
        actions_enabled: page.auth.enabled(),
        csrf: if page.auth.signed_in(headers) { page.auth.csrf() } else { None },
    }
}

async fn index(State(page): State<Arc<Page>>, headers: HeaderMap) -> Response {
    let viewer = viewer(&page, &headers);
    let flash = auth::cookie(&headers, FLASH_COOKIE).map(decode).filter(|m| !m.is_empty());
    match snapshot(&page).await {
        Ok(s) => {
            let html = Html(view::index(&page, &s, &viewer, flash.as_deref()).into_string());
            let shown = format!("{FLASH_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
            if flash.is_some() { ([(header::SET_COOKIE, shown)], html).into_response() } else { html.into_response() }
        }
        Err(e) => problem(op_status(&e), &format!("the page cannot be shown: {e}")),
    }
}

async fn running_fragment(State(page): State<Arc<Page>>, headers: HeaderMap) -> Response {
    let viewer = viewer(&page, &headers);
    match page.running_items().await {
        Ok(running) => Html(view::running(&page, &running, &viewer).into_string()).into_response(),
        Err(e) => problem(StatusCode::SERVICE_UNAVAILABLE, &format!("the database does not answer: {e}")),
    }
}

/// The running items' section every two seconds, as server-sent events.
async fn events(
    State(page): State<Arc<Page>>,
    headers: HeaderMap,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let viewer = viewer(&page, &headers);
    let stream = futures_util::stream::unfold((page.clone(), viewer, true), |(page, viewer, first)| async move {
        if !first {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let html = match page.running_items().await {
            Ok(running) => view::running(&page, &running, &viewer).into_string(),
            Err(e) => view::unavailable(&e.to_string()).into_string(),
        };
        Some((Ok(Event::default().event("running").data(html)), (page, viewer, false)))
    });
    let stop = page.stop.clone().cancelled_owned();
    Sse::new(futures_util::StreamExt::take_until(stream, stop)).keep_alive(KeepAlive::default())
}

async fn item(State(page): State<Arc<Page>>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let viewer = viewer(&page, &headers);
    let found = async {
        let id = ops::parse_item_id(&id)?;
        page.store.get(id).await?.ok_or_else(|| OpError::NotFound(format!("no work item {id}")))
    };
    match found.await {
        Ok(item) => Html(view::item(&page, &item, &viewer).into_string()).into_response(),
        Err(e) => op_problem(&e),
    }
}

#[derive(Deserialize)]
struct Login {
    token: String,
}

async fn login(State(page): State<Arc<Page>>, peer: Peer, headers: HeaderMap, Form(form): Form<Login>) -> Response {
    match page.auth.sign_in(peer, &headers, &form.token) {
        Ok(session) => {
            let cookie = format!("{SESSION_COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict");
            back_with("signed in", Some(cookie))
        }
        Err(Refusal::WrongToken) => {
            problem(StatusCode::UNAUTHORIZED, "that is not this Worker's token; you are not signed in")
        }
        Err(refusal) => refused(&page, peer, refusal),
    }
}

/// The answer to a refused action or sign-in; a pause after wrong tokens says when it ends.
fn refused(page: &Page, peer: Peer, refusal: Refusal) -> Response {
    let mut response = problem(refusal.status(), refusal.message());
    if let (Refusal::Paused, Some(seconds)) = (refusal, page.auth.paused_for(peer)) {
        response.headers_mut().insert(header::RETRY_AFTER, seconds.into());
    }
    response
}

async fn logout() -> Response {
    let cookie = format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    back_with("signed out", Some(cookie))
}

/// Runs an action once the request may act: a redirect back to the page (a browser) or the message (a script).
async fn act<F>(page: &Page, peer: Peer, headers: &HeaderMap, body: &str, action: F) -> Response
where
    F: Future<Output = Result<String, OpError>>,
{
    let csrf = body.split('&').find_map(|pair| pair.strip_prefix("csrf="));
    let via = match page.auth.check(peer, headers, csrf) {
        Ok(via) => via,
        Err(refusal) => return refused(page, peer, refusal),
    };
    match (action.await, via) {
        (Ok(message), Via::Bearer) => (StatusCode::OK, format!("{message}\n")).into_response(),
        (Ok(message), Via::Session) => back_with(&message, None),
        (Err(e), Via::Bearer) => (op_status(&e), format!("{e}\n")).into_response(),
        (Err(e), Via::Session) => op_problem(&e),
    }
}

/// `retry` or `cancel` an item.
async fn item_action(
    State(page): State<Arc<Page>>,
    peer: Peer,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
    body: String,
) -> Response {
    let run = async {
        let id = ops::parse_item_id(&id)?;
        match action.as_str() {
            "retry" => ops::retry_item(&page.store, id).await,
            "cancel" => ops::cancel_item(&page.store, id).await,
            other => Err(no_such_action(other, "retry or cancel")),
        }
    };
    act(&page, peer, &headers, &body, run).await
}

/// `pause`, `resume` or `crawl` a storage config (named by its id).
async fn config_action(
    State(page): State<Arc<Page>>,
    peer: Peer,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
    body: String,
) -> Response {
    let run = async {
        let config: almanac_domain::StorageConfigId = id.parse().map_err(|_| {
            OpError::BadInput(format!("{id:?} is not a storage config id (a UUID, as `config list` shows them)"))
        })?;
        let config = config.to_string();
        match action.as_str() {
            "pause" => ops::set_paused(&page.store, PauseTarget::Config(config), true).await,
            "resume" => ops::set_paused(&page.store, PauseTarget::Config(config), false).await,
            "crawl" => Ok(ops::enqueue_crawl(&page.store, &config).await?.1),
            other => Err(no_such_action(other, "pause, resume or crawl")),
        }
    };
    act(&page, peer, &headers, &body, run).await
}

/// `pause` or `resume` every item of a kind.
async fn kind_action(
    State(page): State<Arc<Page>>,
    peer: Peer,
    headers: HeaderMap,
    Path((kind, action)): Path<(String, String)>,
    body: String,
) -> Response {
    let run = async {
        let kind = ops::parse_kind(&kind)?;
        match action.as_str() {
            "pause" => ops::set_paused(&page.store, PauseTarget::Kind(kind), true).await,
            "resume" => ops::set_paused(&page.store, PauseTarget::Kind(kind), false).await,
            other => Err(no_such_action(other, "pause or resume")),
        }
    };
    act(&page, peer, &headers, &body, run).await
}

fn no_such_action(given: &str, known: &str) -> OpError {
    OpError::NotFound(format!("there is no action {given:?} here: use {known}"))
}

fn op_status(e: &OpError) -> StatusCode {
    match e {
        OpError::BadInput(_) => StatusCode::BAD_REQUEST,
        OpError::NotFound(_) => StatusCode::NOT_FOUND,
        OpError::Refused(_) => StatusCode::CONFLICT,
        OpError::Store(almanac_store_pg::StoreError::Unavailable(_)) => StatusCode::SERVICE_UNAVAILABLE,
        OpError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn op_problem(e: &OpError) -> Response {
    let nothing = if matches!(e, OpError::Store(_)) { "" } else { " Nothing was changed." };
    problem(op_status(e), &format!("{e}.{nothing}"))
}

fn problem(status: StatusCode, message: &str) -> Response {
    (status, Html(view::problem(status, message).into_string())).into_response()
}

/// A cookie value for `text`: its UTF-8 bytes in hex (cookie values allow few characters).
fn encode(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Undoes [`encode`]; what is not hex reads as nothing.
fn decode(value: &str) -> String {
    let bytes: Option<Vec<u8>> = (0..value.len() / 2)
        .map(|i| value.get(2 * i..2 * i + 2).and_then(|pair| u8::from_str_radix(pair, 16).ok()))
        .collect();
    bytes.map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use almanac_domain::{NewWorkItem, Scope};
    use almanac_store_pg::NewStorageConfig;
    use almanac_testdb::TestDatabase;
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    const TOKEN: &str = "a-token-of-24-characters";

    struct World {
        db: TestDatabase,
        page: Arc<Page>,
        config: almanac_domain::StorageConfigId,
        failed: WorkItemId,
        queued: WorkItemId,
        running: WorkItemId,
        crawl_with_failures: WorkItemId,
    }

    async fn sql(url: &str, statement: &str) {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        client.batch_execute(statement).await.unwrap();
    }

    /// A config with a failed proxy deletion, a queued crawl, a running burst detection with progress, and a
    /// finished crawl whose result lists two failed files.
    async fn world(token: Option<&str>) -> World {
        let db = TestDatabase::create().await;
        let store = PgStore::connect(db.url()).unwrap();
        let new = NewStorageConfig { username: "ann".into(), root_path: "/srv/photos/ann".into() };
        let config = store.add_storage_config(&new).await.unwrap().1.id;
        let item = |kind| NewWorkItem::new(kind, Scope::Config(config)).unwrap();
        let failed = store.enqueue(&item(WorkKind::ProxyDeletion)).await.unwrap().item.id;
        let done = store.enqueue(&item(WorkKind::Crawl)).await.unwrap().item.id;
        let running = store.enqueue(&item(WorkKind::BurstDetection)).await.unwrap().item.id;
        sql(
            db.url(),
            &format!(
                "UPDATE work_items SET status = 'failed', finished_at = now(), failures = max_attempts,
                        last_error = 'payload.asset_ids must be a list of asset ids' WHERE id = '{failed}';
                 UPDATE work_items SET status = 'succeeded', finished_at = now(),
                        result = '{{\"failures\": [{{\"path\": \"2019/bad.jpg\", \"reason\": \"truncated JPEG\"}},
                                                   {{\"path\": \"2019/b.png\", \"reason\": \"too many pixels\"}}]}}'
                  WHERE id = '{done}';
                 UPDATE work_items SET status = 'running', attempt = 1, worker_id = 'worker-a', started_at = now(),
                        heartbeat_at = now(), lease_expires_at = now() + interval '1 hour',
                        progress = '{{\"done\": 5, \"total\": 10, \"seconds\": 2}}' WHERE id = '{running}';"
            ),
        )
        .await;
        // As the scheduler queues it.
        let key = almanac_domain::DedupKey::for_work(WorkKind::Crawl, Scope::Config(config));
        let queued = store.enqueue(&item(WorkKind::Crawl).with_dedup_key(key)).await.unwrap().item.id;
        let page = Arc::new(Page {
            store,
            auth: Auth::new(token.map(Into::into)),
            recent: Recent::default(),
            samples: Samples::default(),
            worker_id: "worker-a".into(),
            allowed_hosts: vec!["almanac.example".into()],
            stop: CancellationToken::new(),
        });
        World { db, page, config, failed, queued, running, crawl_with_failures: done }
    }

    async fn send(page: &Arc<Page>, request: Request<Body>) -> (StatusCode, HeaderMap, String) {
        let response = router(page.clone()).oneshot(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes();
        (parts.status, parts.headers, String::from_utf8_lossy(&bytes).into_owned())
    }

    fn get(path: &str) -> Request<Body> {
        Request::get(path).body(Body::empty()).unwrap()
    }

    fn post(path: &str, headers: &[(&str, &str)], body: &str) -> Request<Body> {
        let mut r = Request::post(path).header("content-type", "application/x-www-form-urlencoded");
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.body(Body::from(body.to_owned())).unwrap()
    }

    fn bearer(token: &str) -> String {
        format!("Bearer {token}")
    }

    async fn status_of(w: &World, id: WorkItemId) -> Status {
        w.page.store.get(id).await.unwrap().unwrap().status
    }

    #[tokio::test]
    async fn the_page_shows_the_queue_configs_running_items_and_failures() {
        let w = world(None).await;
        let (status, headers, html) = send(&w.page, get("/")).await;
        assert_eq!(status, StatusCode::OK);
        assert!(headers[header::CONTENT_TYPE].to_str().unwrap().starts_with("text/html"));
        for shown in [
            "<th scope=\"row\">proxy_deletion",
            "/srv/photos/ann",
            "5 of 10 units (50.0%)",
            "worker-a",
            "payload.asset_ids must be a list of asset ids",
            "2019/bad.jpg",
            "truncated JPEG",
            "Last 24 hours: 1 succeeded, 1 failed, 0 cancelled",
            "read-only (no http.token set)",
            "None since it started.",
        ] {
            assert!(html.contains(shown), "{shown} is not on the page:\n{html}");
        }
        assert!(!html.contains("method=\"post\" action=\"/items/"), "no action buttons without a session");
        // The item's own page, and bad ids.
        let (status, _, html) = send(&w.page, get(&format!("/items/{}", w.crawl_with_failures))).await;
        assert_eq!(status, StatusCode::OK);
        assert!(html.contains("2 failed file(s)") && html.contains("too many pixels"), "{html}");
        let (status, _, html) = send(&w.page, get("/items/01a22d3e-30ac-7499-a6e3-05017482eaa6")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(html.contains("no work item 01a22d3e-30ac-7499-a6e3-05017482eaa6"), "{html}");
        let (status, _, html) = send(&w.page, get("/items/nope")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(html.contains("is not a work item id"), "{html}");
        // The live section, as a fragment and as the first server-sent event.
        let (status, _, html) = send(&w.page, get("/running")).await;
        assert!(status == StatusCode::OK && html.contains("5 of 10 units"), "{html}");
        let response = router(w.page.clone()).oneshot(get("/events")).await.unwrap();
        assert_eq!(response.headers()[header::CONTENT_TYPE], "text/event-stream");
        let mut body = response.into_body();
        let frame = body.frame().await.unwrap().unwrap().into_data().unwrap();
        let event = String::from_utf8_lossy(&frame);
        assert!(event.starts_with("event: running\n") && event.contains("5 of 10 units"), "{event}");
        let _ = w.running;
    }

    #[tokio::test]
    async fn without_a_token_set_or_given_every_action_is_refused_and_nothing_changes() {
        let none = world(None).await;
        let (status, _, html) =
            send(&none.page, post(&format!("/items/{}/retry", none.failed), &[("authorization", &bearer(TOKEN))], ""))
                .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert!(html.contains("actions are disabled"), "{html}");
        let (status, _, _) = send(&none.page, post("/login", &[], &format!("token={TOKEN}"))).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_eq!(status_of(&none, none.failed).await, Status::Failed);

        let w = world(Some(TOKEN)).await;
        let retry = format!("/items/{}/retry", w.failed);
        let pause = format!("/configs/{}/pause", w.config);
        let session = format!("{SESSION_COOKIE}={}", w.page.auth.session_value().unwrap());
        let cases: Vec<(Request<Body>, StatusCode, &str)> = vec![
            (post(&retry, &[], ""), StatusCode::UNAUTHORIZED, "sign in"),
            (
                post(&retry, &[("authorization", &bearer("a-token-of-24-characterz"))], ""),
                StatusCode::UNAUTHORIZED,
                "not this Worker's",
            ),
            (post(&retry, &[("cookie", &session)], ""), StatusCode::FORBIDDEN, "CSRF"),
            (post(&retry, &[("cookie", &session)], &format!("csrf={}", "0".repeat(64))), StatusCode::FORBIDDEN, "CSRF"),
            (
                post(&pause, &[("cookie", "almanac_session=forged")], "csrf=x"),
                StatusCode::UNAUTHORIZED,
                "not this Worker's",
            ),
            (
                post(
                    &pause,
                    &[("cookie", &session), ("origin", "http://evil.example"), ("host", "127.0.0.1:9464")],
                    &format!("csrf={}", w.page.auth.csrf().unwrap()),
                ),
                StatusCode::FORBIDDEN,
                "another site",
            ),
        ];
        for (request, expected, says) in cases {
            let what = request.uri().to_string();
            let (status, _, html) = send(&w.page, request).await;
            assert_eq!(status, expected, "{what}: {html}");
            assert!(html.contains(says) && html.contains("Nothing was changed"), "{what}: {html}");
        }
        let (status, _, html) = send(&w.page, post("/login", &[], "token=wrong-token-of-24-chars")).await;
        assert!(status == StatusCode::UNAUTHORIZED && html.contains("not this Worker's token"), "{html}");
        assert_eq!(status_of(&w, w.failed).await, Status::Failed);
        assert!(w.page.store.paused().await.unwrap().1.is_empty(), "the config was not paused");
    }

    #[tokio::test]
    async fn actions_with_the_token_work_and_bad_input_is_a_clear_error_that_changes_nothing() {
        let w = world(Some(TOKEN)).await;
        let auth = bearer(TOKEN);
        let act = |path: String| post(&path, &[("authorization", auth.as_str())], "");
        let cases: Vec<(String, StatusCode, String)> = vec![
            (
                format!("/items/{}/retry", w.queued),
                StatusCode::CONFLICT,
                "only failed or cancelled items are retried".into(),
            ),
            ("/items/nope/retry".into(), StatusCode::BAD_REQUEST, "\"nope\" is not a work item id".into()),
            ("/items/01a22d3e-30ac-7499-a6e3-05017482eaa6/cancel".into(), StatusCode::NOT_FOUND, "no work item".into()),
            ("/kinds/frobnicate/pause".into(), StatusCode::BAD_REQUEST, "\"frobnicate\" is not a kind".into()),
            ("/configs/01a22d3e-30ac-7499-a6e3-05017482eaa6/pause".into(), StatusCode::NOT_FOUND, "".into()),
            ("/configs/not-an-id/crawl".into(), StatusCode::BAD_REQUEST, "is not a storage config id".into()),
            (format!("/items/{}/explode", w.failed), StatusCode::NOT_FOUND, "no action \"explode\"".into()),
            ("/kinds/purge/delete".into(), StatusCode::NOT_FOUND, "use pause or resume".into()),
        ];
        for (path, expected, says) in cases {
            let (status, _, text) = send(&w.page, act(path.clone())).await;
            assert_eq!(status, expected, "{path}: {text}");
            assert!(text.contains(&says), "{path}: {text}");
        }
        assert_eq!(status_of(&w, w.queued).await, Status::Queued);

        let (status, _, text) = send(&w.page, act(format!("/items/{}/retry", w.failed))).await;
        assert_eq!((status, text.trim()), (StatusCode::OK, format!("{} queued again", w.failed).as_str()));
        assert_eq!(status_of(&w, w.failed).await, Status::Queued);
        let (status, _, text) = send(&w.page, act(format!("/configs/{}/pause", w.config))).await;
        assert!(status == StatusCode::OK && text.contains("paused"), "{text}");
        assert_eq!(w.page.store.paused().await.unwrap().1.len(), 1);
        let (_, _, text) = send(&w.page, act(format!("/configs/{}/resume", w.config))).await;
        assert!(text.contains("resumed"), "{text}");
        assert!(w.page.store.paused().await.unwrap().1.is_empty());
        let (_, _, text) = send(&w.page, act("/kinds/purge/pause".into())).await;
        assert!(text.contains("kind purge paused"), "{text}");
        assert_eq!(w.page.store.paused().await.unwrap().0, [WorkKind::Purge]);
        let (_, _, text) = send(&w.page, act("/kinds/purge/resume".into())).await;
        assert!(text.contains("resumed"), "{text}");
        let (status, _, text) = send(&w.page, act(format!("/configs/{}/crawl", w.config))).await;
        assert!(status == StatusCode::OK && text.contains("already queued"), "one crawl is queued: {text}");
        let (_, _, text) = send(&w.page, act(format!("/items/{}/cancel", w.queued))).await;
        assert!(text.contains(&format!("cancelled {}", w.queued)), "{text}");
        assert_eq!(status_of(&w, w.queued).await, Status::Cancelled);
        let (_, _, text) = send(&w.page, act(format!("/configs/{}/crawl", w.config))).await;
        assert!(text.contains("queued") && !text.contains("already"), "{text}");
        drop(w.db);
    }

    #[test]
    fn flash_messages_survive_the_cookie_and_garbage_reads_as_nothing() {
        let message = "storage config 1 (/srv/photos/ann; été) paused: 100%";
        assert_eq!(decode(&encode(message)), message);
        assert!(encode(message).bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(decode("zz"), "");
    }

    /// `request` as it comes over TCP from `peer` (a socket address).
    fn from(peer: &str, mut request: Request<Body>) -> Request<Body> {
        let address: std::net::SocketAddr = peer.parse().unwrap();
        request.extensions_mut().insert(axum::extract::ConnectInfo(address));
        request
    }

    #[tokio::test(start_paused = true)]
    async fn after_wrong_tokens_in_a_row_from_one_address_it_is_answered_429_until_the_pause_ends_and_others_act() {
        // No database: sign-in and refusals do not read one (and the paused clock would hurry its timeouts).
        let page = Arc::new(Page {
            store: PgStore::connect("postgres://nobody@127.0.0.1:9/none").unwrap(),
            auth: Auth::new(Some(TOKEN.into())),
            recent: Recent::default(),
            samples: Samples::default(),
            worker_id: "worker-a".into(),
            allowed_hosts: Vec::new(),
            stop: CancellationToken::new(),
        });
        let signed_in = |headers: &HeaderMap| {
            headers.get_all(header::SET_COOKIE).iter().any(|c| c.to_str().unwrap().starts_with(SESSION_COOKIE))
        };
        // Each wrong token from a connection of its own (a new port each time): the address is what counts.
        for port in 0..auth::WRONG_TOKENS_BEFORE_PAUSE {
            let guess =
                from(&format!("203.0.113.7:{}", 40000 + port), post("/login", &[], "token=wrong-token-of-24-chars"));
            let (status, _, html) = send(&page, guess).await;
            assert!(status == StatusCode::UNAUTHORIZED && html.contains("not this Worker's token"), "{html}");
        }
        let pause = auth::PAUSE_AFTER_WRONG_TOKENS.as_secs().to_string();
        let (status, headers, html) =
            send(&page, from("203.0.113.7:41000", post("/login", &[], &format!("token={TOKEN}")))).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{html}");
        assert!(html.contains("too many wrong tokens") && html.contains("Nothing was changed"), "{html}");
        assert_eq!(headers[header::RETRY_AFTER], pause.as_str());
        assert!(!signed_in(&headers), "not signed in: {headers:?}");
        let script = || post("/kinds/purge/pause", &[("authorization", &bearer(TOKEN))], "");
        let (status, headers, html) = send(&page, from("203.0.113.7:41001", script())).await;
        assert!(status == StatusCode::TOO_MANY_REQUESTS && html.contains("too many wrong tokens"), "{html}");
        assert_eq!(headers[header::RETRY_AFTER], pause.as_str());
        // Another address signs in with the right token meanwhile, and its scripts' tokens are looked at.
        let (status, headers, _) =
            send(&page, from("198.51.100.20:50000", post("/login", &[], &format!("token={TOKEN}")))).await;
        assert_eq!(status, StatusCode::SEE_OTHER);
        assert!(signed_in(&headers), "{headers:?}");
        let wrong = post("/kinds/purge/pause", &[("authorization", &bearer("a-token-of-24-characterz"))], "");
        let (status, _, html) = send(&page, from("[2001:db8::1]:50000", wrong)).await;
        assert!(status == StatusCode::UNAUTHORIZED && html.contains("not this Worker's"), "{html}");
        tokio::time::advance(auth::PAUSE_AFTER_WRONG_TOKENS).await;
        let (status, headers, _) =
            send(&page, from("203.0.113.7:41002", post("/login", &[], &format!("token={TOKEN}")))).await;
        assert_eq!(status, StatusCode::SEE_OTHER);
        assert!(signed_in(&headers), "{headers:?}");
    }

    #[tokio::test]
    async fn a_sign_in_posted_from_another_origin_is_refused() {
        let w = world(Some(TOKEN)).await;
        let headers = [("origin", "http://127.0.0.1:8080"), ("host", "127.0.0.1:9464")];
        let (status, response, html) = send(&w.page, post("/login", &headers, &format!("token={TOKEN}"))).await;
        assert!(status == StatusCode::FORBIDDEN && html.contains("another site"), "{html}");
        assert!(response.get(header::SET_COOKIE).is_none(), "{response:?}");
    }

    #[tokio::test]
    async fn the_style_sheet_and_the_script_are_served_and_the_page_has_nothing_inline() {
        let w = world(None).await;
        for (path, content_type, holds) in [
            (STYLESHEET, "text/css; charset=utf-8", "box-sizing"),
            (SCRIPT, "text/javascript; charset=utf-8", "EventSource('/events')"),
        ] {
            let (status, headers, text) = send(&w.page, get(path)).await;
            assert_eq!(status, StatusCode::OK, "{path}");
            assert_eq!(headers[header::CONTENT_TYPE], content_type, "{path}");
            assert!(text.contains(holds), "{path}: {text}");
        }
        for path in ["/".to_owned(), format!("/items/{}", w.failed), "/items/nope".to_owned()] {
            let (_, _, html) = send(&w.page, get(&path)).await;
            assert!(html.contains(&format!("<link rel=\"stylesheet\" href=\"{STYLESHEET}\">")), "{path}: {html}");
            assert!(!html.contains("<style") && !html.contains(" style=") && !html.contains("<script>"), "{html}");
        }
        let (_, _, html) = send(&w.page, get("/")).await;
        assert!(html.contains(&format!("<script src=\"{SCRIPT}\"></script>")), "{html}");
    }

    #[tokio::test]
    async fn a_browser_signs_in_with_the_token_and_acts_with_its_session_and_csrf_field() {
        let w = world(Some(TOKEN)).await;
        let (status, headers, _) = send(&w.page, post("/login", &[], &format!("token={TOKEN}"))).await;
        assert_eq!(status, StatusCode::SEE_OTHER);
        let cookie = headers
            .get_all(header::SET_COOKIE)
            .iter()
            .map(|c| c.to_str().unwrap().to_owned())
            .find(|c| c.starts_with(SESSION_COOKIE))
            .expect("a session cookie");
        assert!(
            cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && !cookie.contains(TOKEN),
            "{cookie}"
        );
        let session = cookie.split(';').next().unwrap().to_owned();
        let signed_in = Request::get("/").header("cookie", &session).body(Body::empty()).unwrap();
        let (_, _, html) = send(&w.page, signed_in).await;
        let csrf = w.page.auth.csrf().unwrap();
        assert!(html.contains(&format!("value=\"{csrf}\"")) && html.contains("sign out"), "{html}");
        assert!(html.contains(&format!("action=\"/items/{}/retry\"", w.failed)), "{html}");
        let request = post(&format!("/items/{}/retry", w.failed), &[("cookie", &session)], &format!("csrf={csrf}"));
        let (status, headers, _) = send(&w.page, request).await;
        assert_eq!(status, StatusCode::SEE_OTHER);
        assert_eq!(headers[header::LOCATION], "/");
        let flash = headers
            .get_all(header::SET_COOKIE)
            .iter()
            .find_map(|c| {
                c.to_str().ok()?.strip_prefix("almanac_flash=").map(|v| v.split(';').next().unwrap().to_owned())
            })
            .unwrap();
        assert_eq!(status_of(&w, w.failed).await, Status::Queued);
        // The page shows the outcome once, from the cookie, and clears it; a message in the URL is not shown.
        let back = Request::get("/?done=pwned")
            .header("cookie", format!("{session}; almanac_flash={flash}"))
            .body(Body::empty())
            .unwrap();
        let (_, headers, html) = send(&w.page, back).await;
        assert!(html.contains(&format!("{} queued again", w.failed)) && !html.contains("pwned"), "{html}");
        assert!(headers[header::SET_COOKIE].to_str().unwrap().contains("Max-Age=0"));
        let (status, headers, _) = send(&w.page, post("/logout", &[("cookie", &session)], "")).await;
        let cleared = headers.get_all(header::SET_COOKIE).iter().any(|c| {
            let c = c.to_str().unwrap();
            c.starts_with(&format!("{SESSION_COOKIE}=;")) && c.contains("Max-Age=0")
        });
        assert!(status == StatusCode::SEE_OTHER && cleared, "{headers:?}");
    }
}
