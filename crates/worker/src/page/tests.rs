//! The page over a real database: what it shows, and who may act.

use std::sync::Arc;

use almanac_domain::ports::WatchStore;
use almanac_domain::{NewWorkItem, Scope, Status, WorkItemId, WorkKind, WorkQueue};
use almanac_store_pg::{NewStorageConfig, PgStore};
use almanac_testdb::TestDatabase;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use http_body_util::BodyExt;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::answer::{decode, encode};
use super::auth::{self, Auth, SESSION_COOKIE};
use super::{Page, SCRIPT, STYLESHEET, Samples, router};
use crate::observe::Recent;
use crate::tests::sql;

pub(super) const TOKEN: &str = "a-token-of-24-characters";

pub(super) struct World {
    db: TestDatabase,
    pub(super) page: Arc<Page>,
    config: almanac_domain::StorageConfigId,
    failed: WorkItemId,
    queued: WorkItemId,
    pub(super) running: WorkItemId,
    crawl_with_failures: WorkItemId,
}

/// A config with a failed proxy deletion, a queued crawl, a running burst detection with progress, and a
/// finished crawl whose result lists two failed files.
pub(super) async fn world(token: Option<&str>) -> World {
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

pub(super) async fn send(page: &Arc<Page>, request: Request<Body>) -> (StatusCode, HeaderMap, String) {
    let response = router(page.clone()).oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (parts.status, parts.headers, String::from_utf8_lossy(&bytes).into_owned())
}

pub(super) fn get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).unwrap()
}

pub(super) fn post(path: &str, headers: &[(&str, &str)], body: &str) -> Request<Body> {
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
    assert!(!html.contains("method=\"post\" action=\"./items/"), "no action buttons without a session");
    // The queue counts each kind's items per status; a failed item and a crawl with failures name their config's
    // root.
    let counts = |kind: WorkKind, of: &[(Status, u32)]| {
        let cells: String = Status::ALL
            .into_iter()
            .map(|st| format!("<td class=\"n\">{}</td>", of.iter().find(|(s, _)| *s == st).map_or(0, |(_, n)| *n)))
            .collect();
        format!("<th scope=\"row\">{}</th>{cells}", kind.as_str())
    };
    for row in [
        counts(WorkKind::Crawl, &[(Status::Queued, 1), (Status::Succeeded, 1)]),
        counts(WorkKind::ProxyDeletion, &[(Status::Failed, 1)]),
        counts(WorkKind::BurstDetection, &[(Status::Running, 1)]),
        counts(WorkKind::ProxySweep, &[]),
    ] {
        assert!(html.contains(&row), "{row} is not on the page:\n{html}");
    }
    let running =
        format!("<a href=\"./items/{}\">burst_detection</a></strong> · Worker <code>worker-a</code>", w.running);
    assert!(html.contains(&running), "{running} is not on the page:\n{html}");
    for (id, kind) in [(w.failed, "proxy_deletion"), (w.crawl_with_failures, "crawl")] {
        let named = format!("<a href=\"./items/{id}\">{kind}</a> of <code>/srv/photos/ann</code>");
        assert!(html.contains(&named), "{named} is not on the page:\n{html}");
    }
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
    assert_eq!(response.headers()["x-accel-buffering"], "no", "nginx passes each event on at once");
    let mut body = response.into_body();
    let frame = body.frame().await.unwrap().unwrap().into_data().unwrap();
    let event = String::from_utf8_lossy(&frame);
    assert!(event.starts_with("event: running\n") && event.contains("5 of 10 units"), "{event}");
    // The next comes two seconds later, not at once.
    let first = std::time::Instant::now();
    let next = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(next.starts_with(b"event: running\n"), "{next:?}");
    assert!(first.elapsed() >= std::time::Duration::from_secs(2), "the events came {:?} apart", first.elapsed());
}

/// Each config's watch: the mode its watcher reports, its choice, who watches, the last change, the pending files
/// and the note; off when no Worker watches it (an expired lease counts as none).
#[tokio::test]
async fn the_page_shows_each_config_s_watch() {
    let w = world(Some(TOKEN)).await;
    let (_, _, html) = send(&w.page, get("/")).await;
    assert!(html.contains("<th>watch</th>") && html.contains("no Worker watches it"), "{html}");
    assert!(!html.contains("/watch/"), "no choices without a session: {html}");
    let session = format!("{SESSION_COOKIE}={}", w.page.auth.session_value().unwrap());
    let signed_in = Request::get("/").header("cookie", session).body(Body::empty()).unwrap();
    let (_, _, html) = send(&w.page, signed_in).await;
    let choice = |c: &str| format!("formaction=\"./configs/{}/watch/{c}\"", w.config);
    assert!(html.contains(&choice("events")) && html.contains(&choice("off")), "{html}");
    assert!(!html.contains(&choice("auto")), "the current choice is not offered: {html}");
    sql(
        w.db.url(),
        &format!(
            "UPDATE storage_configs SET watch = 'polling' WHERE id = '{c}';
             INSERT INTO config_watches (storage_config_id, worker_id, since, lease_expires_at, mode, last_change_at,
                                         pending_files, note)
             VALUES ('{c}', 'worker-b', now(), now() + interval '1 minute', 'polling', '2026-12-02 13:05:00+00', 3,
                     'the <root> is on NFS')",
            c = w.config
        ),
    )
    .await;
    let (_, _, html) = send(&w.page, get("/")).await;
    for shown in [
        "<span class=\"tag\">polling</span> (chosen polling)",
        "by <code>worker-b</code>, last change 2026-12-02 13:05:00 UTC, 3 pending file(s)",
        "the &lt;root&gt; is on NFS",
    ] {
        assert!(html.contains(shown), "{shown} is not on the page:\n{html}");
    }
    assert!(!html.contains("no Worker watches it"), "{html}");
    sql(w.db.url(), "UPDATE config_watches SET lease_expires_at = now() - interval '1 second'").await;
    let (_, _, html) = send(&w.page, get("/")).await;
    assert!(html.contains("no Worker watches it") && !html.contains("worker-b"), "{html}");
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
    let (status, _, text) = send(&w.page, act(format!("/configs/{}/watch/off", w.config))).await;
    assert!(status == StatusCode::OK && text.contains("is now watched: off"), "{text}");
    let (status, _, text) = send(&w.page, act(format!("/configs/{}/watch/never", w.config))).await;
    assert!(status == StatusCode::BAD_REQUEST && text.contains("auto, events, polling, off"), "{text}");
    assert_eq!(w.page.store.watch_states().await.unwrap()[0].choice, almanac_domain::ports::WatchChoice::Off);
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
        (SCRIPT, "text/javascript; charset=utf-8", "new URL('events', document.currentScript.src)"),
    ] {
        let (status, headers, text) = send(&w.page, get(path)).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert_eq!(headers[header::CONTENT_TYPE], content_type, "{path}");
        assert!(text.contains(holds), "{path}: {text}");
    }
    // Linked from the page's root, wherever that is (`Root`): `./` from the page, `../` from an item's.
    for (path, root) in
        [("/".to_owned(), "."), (format!("/items/{}", w.failed), ".."), ("/items/nope".to_owned(), "..")]
    {
        let (_, _, html) = send(&w.page, get(&path)).await;
        assert!(html.contains(&format!("<link rel=\"stylesheet\" href=\"{root}{STYLESHEET}\">")), "{path}: {html}");
        assert!(!html.contains("<style") && !html.contains(" style=") && !html.contains("<script>"), "{html}");
    }
    let (_, _, html) = send(&w.page, get("/")).await;
    assert!(html.contains(&format!("<script src=\".{SCRIPT}\"></script>")), "{html}");
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
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && !cookie.contains(TOKEN), "{cookie}");
    // For the folder of the sign-in's URL (the page's root, wherever a proxy serves it), not the host's every path.
    assert!(!cookie.contains("Path="), "{cookie}");
    let session = cookie.split(';').next().unwrap().to_owned();
    let signed_in = Request::get("/").header("cookie", &session).body(Body::empty()).unwrap();
    let (_, _, html) = send(&w.page, signed_in).await;
    let csrf = w.page.auth.csrf().unwrap();
    assert!(html.contains(&format!("value=\"{csrf}\"")) && html.contains("sign out"), "{html}");
    assert!(html.contains(&format!("action=\"./items/{}/retry\"", w.failed)), "{html}");
    let request = post(&format!("/items/{}/retry", w.failed), &[("cookie", &session)], &format!("csrf={csrf}"));
    let (status, headers, _) = send(&w.page, request).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers[header::LOCATION], "../../", "back to the page, from /items/{{id}}/retry");
    let flash = headers
        .get_all(header::SET_COOKIE)
        .iter()
        .find_map(|c| c.to_str().ok()?.strip_prefix("almanac_flash=").map(|v| v.split(';').next().unwrap().to_owned()))
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
