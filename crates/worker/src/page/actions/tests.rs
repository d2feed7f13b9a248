//! Every action route, one by one, through the router (`oneshot`): refused before it acts unless the request
//! may act, and answered by its own handler once it may. No database: a refused action never reaches one (the
//! store points at a port where nothing listens, so an action that ran would answer 503).

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::observe::Recent;
use crate::page::auth::{Auth, SESSION_COOKIE};
use crate::page::{Page, Samples, router};

const TOKEN: &str = "a-token-of-24-characters";
const ID: &str = "01a22d3e-30ac-7499-a6e3-05017482eaa6";

/// Every action the page has, one route each.
fn actions() -> Vec<String> {
    let mut all = Vec::new();
    for action in ["retry", "cancel"] {
        all.push(format!("/items/{ID}/{action}"));
    }
    for action in ["pause", "resume", "crawl", "watch/polling"] {
        all.push(format!("/configs/{ID}/{action}"));
    }
    for action in ["pause", "resume"] {
        all.push(format!("/kinds/purge/{action}"));
    }
    all
}

fn page(token: Option<&str>) -> Arc<Page> {
    Arc::new(Page {
        store: almanac_store_pg::PgStore::connect("postgres://nobody@127.0.0.1:9/none").unwrap(),
        auth: Auth::new(token.map(Into::into)),
        recent: Recent::default(),
        samples: Samples::default(),
        worker_id: "worker-a".into(),
        allowed_hosts: Vec::new(),
        stop: CancellationToken::new(),
    })
}

fn post(path: &str, headers: &[(&str, String)], body: &str) -> Request<Body> {
    let mut r = Request::post(path).header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    for (k, v) in headers {
        r = r.header(*k, v);
    }
    r.body(Body::from(body.to_owned())).unwrap()
}

async fn send(page: &Arc<Page>, request: Request<Body>) -> (StatusCode, String) {
    let response = router(page.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn every_action_is_refused_without_a_token_set() {
    let page = page(None);
    for path in actions() {
        let (status, text) = send(&page, post(&path, &[("authorization", format!("Bearer {TOKEN}"))], "")).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {text}");
        assert!(text.contains("actions are disabled") && text.contains("Nothing was changed"), "{path}: {text}");
    }
}

/// A request's headers and body, the status that refuses it, and words of the refusal.
type Refusal<'a> = (&'a [(&'a str, String)], &'a str, StatusCode, &'a str);

#[tokio::test]
async fn every_action_is_refused_without_the_token_or_a_session_with_its_csrf_field_from_this_page() {
    for path in actions() {
        // A page of its own for each path: their wrong tokens would add up to a pause otherwise.
        let page = page(Some(TOKEN));
        let session = format!("{SESSION_COOKIE}={}", page.auth.session_value().unwrap());
        let csrf = format!("csrf={}", page.auth.csrf().unwrap());
        let wrong = ("authorization", "Bearer a-token-of-24-characterz".to_owned());
        let elsewhere =
            [("cookie", session.clone()), ("host", "127.0.0.1:9464".into()), ("origin", "http://evil.example".into())];
        let refusals: [Refusal; 6] = [
            (&[], "", StatusCode::UNAUTHORIZED, "sign in"),
            (&[wrong], "", StatusCode::UNAUTHORIZED, "not this Worker's"),
            (&[("cookie", format!("{SESSION_COOKIE}=forged"))], &csrf, StatusCode::UNAUTHORIZED, "not this Worker's"),
            (&[("cookie", session.clone())], "", StatusCode::FORBIDDEN, "CSRF"),
            (&[("cookie", session.clone())], "csrf=00", StatusCode::FORBIDDEN, "CSRF"),
            (&elsewhere, &csrf, StatusCode::FORBIDDEN, "another site"),
        ];
        for (headers, body, expected, says) in &refusals {
            let (status, text) = send(&page, post(&path, headers, body)).await;
            assert_eq!(status, *expected, "{path} {headers:?} {body}: {text}");
            assert!(text.contains(says) && text.contains("Nothing was changed"), "{path}: {text}");
        }
    }
}

#[tokio::test]
async fn every_action_once_allowed_is_answered_by_its_own_handler() {
    let page = page(Some(TOKEN));
    let bearer = [("authorization", format!("Bearer {TOKEN}"))];
    let session = format!("{SESSION_COOKIE}={}", page.auth.session_value().unwrap());
    let browser = [("cookie", session), ("host", "127.0.0.1:9464".to_owned())];
    let csrf = format!("csrf={}", page.auth.csrf().unwrap());
    // Past the check, each action reads its arguments, then the database (which does not answer here).
    for path in actions() {
        let (status, text) = send(&page, post(&path, &bearer, "")).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{path}: {text}");
        let (status, text) = send(&page, post(&path, &browser, &csrf)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{path}: {text}");
        assert!(text.contains("<!DOCTYPE html>") && !text.contains("Nothing was changed"), "{path}: {text}");
    }
    let bad = [
        ("/items/nope/retry", "\"nope\" is not a work item id"),
        ("/items/nope/cancel", "\"nope\" is not a work item id"),
        ("/configs/nope/pause", "\"nope\" is not a storage config id"),
        ("/configs/nope/resume", "\"nope\" is not a storage config id"),
        ("/configs/nope/crawl", "\"nope\" is not a storage config id"),
        ("/configs/nope/watch/polling", "\"nope\" is not a storage config id"),
        (&format!("/configs/{ID}/watch/inotify"), "use one of auto, events, polling, off"),
        ("/kinds/frobnicate/pause", "\"frobnicate\" is not a kind"),
        ("/kinds/frobnicate/resume", "\"frobnicate\" is not a kind"),
    ];
    for (path, says) in bad {
        let (status, text) = send(&page, post(path, &bearer, "")).await;
        assert!(status == StatusCode::BAD_REQUEST && text.contains(says), "{path}: {text}");
    }
    for (path, known) in [
        (format!("/items/{ID}/explode"), "use retry or cancel"),
        (format!("/configs/{ID}/explode"), "use pause, resume, crawl or watch/CHOICE"),
        ("/kinds/purge/explode".to_owned(), "use pause or resume"),
    ] {
        let (status, text) = send(&page, post(&path, &bearer, "")).await;
        assert!(status == StatusCode::NOT_FOUND && text.contains(known), "{path}: {text}");
        let (status, _) = send(&page, post(&path, &[], "")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}: an unknown action is refused like the others");
    }
    for path in actions() {
        let get = Request::get(&path).body(Body::empty()).unwrap();
        assert_eq!(send(&page, get).await.0, StatusCode::METHOD_NOT_ALLOWED, "{path}");
    }
}
