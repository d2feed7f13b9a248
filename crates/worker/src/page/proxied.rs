//! The page served under a path of another site's, as a reverse proxy serves it (`nas.lan/almanac/`, the prefix
//! stripped before the Worker sees the request): every reference the page and its answers make, followed as a
//! browser resolves it, stays under the prefix and reaches one of the page's routes; its session is for the
//! page's folder only.

use std::collections::{BTreeSet, VecDeque};

use axum::http::{HeaderMap, StatusCode, header};
use tower::ServiceExt;

use super::auth::SESSION_COOKIE;
use super::tests::{TOKEN, get, post, send, world};

/// Where the proxy serves the page; the other site has the rest of the host.
const PAGE: &str = "http://nas.lan/almanac/";

/// The references of `html`'s links, style sheets, scripts, forms and buttons, as written.
fn references(html: &str) -> Vec<(&'static str, String)> {
    let mut found = Vec::new();
    for attribute in ["href", "src", "action", "formaction"] {
        let opening = format!(" {attribute}=\"");
        let mut rest = html;
        while let Some(at) = rest.find(&opening) {
            rest = &rest[at + opening.len()..];
            let end = rest.find('"').expect("a closed attribute");
            found.push((attribute, rest[..end].to_owned()));
            rest = &rest[end..];
        }
    }
    found
}

/// The full URL of `path` as the Worker saw it (the prefix stripped).
fn full(path: &str) -> url::Url {
    url::Url::parse(PAGE).unwrap().join(path.trim_start_matches('/')).unwrap()
}

/// Where a browser on `path` goes for `reference` (WHATWG URL resolution, as browsers do), as the Worker sees it;
/// fails when that leaves the page for the other site.
fn followed(path: &str, reference: &str) -> String {
    let to = full(path).join(reference).unwrap();
    let stripped =
        to.path().strip_prefix("/almanac").filter(|p| p.starts_with('/') && to.host_str() == Some("nas.lan"));
    let stripped = stripped.unwrap_or_else(|| panic!("{reference:?} on {path} leads to {to}, the other site's"));
    stripped.to_owned() + to.query().map(|q| format!("?{q}")).as_deref().unwrap_or("")
}

/// Checks the references of an answer to `path`, and returns the pages they lead to and the forms they post to.
fn check(path: &str, status: StatusCode, headers: &HeaderMap, html: &str) -> (Vec<String>, Vec<String>) {
    assert_ne!(status, StatusCode::NOT_FOUND, "{path} is not a route of the page: {html}");
    if let Some(to) = headers.get(header::LOCATION) {
        assert_eq!(followed(path, to.to_str().unwrap()), "/", "{path} redirects back to the page");
    }
    let (mut pages, mut forms) = (Vec::new(), Vec::new());
    for (attribute, reference) in references(html) {
        let to = followed(path, &reference);
        if attribute.ends_with("action") { forms.push(to) } else { pages.push(to) }
    }
    (pages, forms)
}

#[tokio::test]
async fn every_reference_of_the_page_behind_a_proxy_that_strips_a_path_stays_under_that_path() {
    let w = world(Some(TOKEN)).await;
    let (status, headers, html) = send(&w.page, post("/login", &[], &format!("token={TOKEN}"))).await;
    check("/login", status, &headers, &html);
    let cookie = headers
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|c| c.to_str().ok())
        .find(|c| c.starts_with(SESSION_COOKIE))
        .expect("a session cookie")
        .to_owned();
    // No `Path`: the browser keeps it for the folder of `/almanac/login`, `/almanac`, and sends it to the page's
    // paths only, not the other site's.
    assert!(!cookie.contains("Path="), "{cookie}");
    let session = cookie.split(';').next().unwrap().to_owned();
    let csrf = format!("csrf={}", w.page.auth.csrf().unwrap());

    // Every page reached from the page (signed in, so its forms are there), a problem page among them.
    let mut seen = BTreeSet::from(["/".to_owned(), "/items/nope".to_owned()]);
    let mut to_read: VecDeque<String> = seen.iter().cloned().collect();
    let mut forms = BTreeSet::new();
    while let Some(path) = to_read.pop_front() {
        let mut request = get(&path);
        request.headers_mut().insert(header::COOKIE, session.parse().unwrap());
        let (status, headers, text) = send(&w.page, request).await;
        let (pages, posts) = check(&path, status, &headers, &text);
        if path == super::SCRIPT {
            // page.js finds the live stream beside itself.
            assert!(text.contains("new URL('events', document.currentScript.src)"), "{text}");
            let events = full(&path).join("events").unwrap();
            assert_eq!(events.as_str(), "http://nas.lan/almanac/events");
        }
        forms.extend(posts);
        for page in pages {
            if seen.insert(page.clone()) {
                to_read.push_back(page);
            }
        }
    }
    for expected in [super::STYLESHEET, super::SCRIPT, &format!("/items/{}", w.running)] {
        assert!(seen.contains(expected), "{expected} is not linked: {seen:?}");
    }
    // The stream never ends: its answer's head is enough.
    let events = super::router(w.page.clone()).oneshot(get("/events")).await.unwrap();
    assert!(events.status() == StatusCode::OK && events.headers()[header::CONTENT_TYPE] == "text/event-stream");

    // Every form, done or refused: back to the page, or a problem page whose link leads back to it. Signing out
    // last.
    assert!(forms.len() >= 8 && forms.contains("/logout"), "{forms:?}");
    let last = forms.take("/logout").unwrap();
    for form in forms.into_iter().chain([last]) {
        let (status, headers, html) = send(&w.page, post(&form, &[("cookie", &session)], &csrf)).await;
        let (pages, _) = check(&form, status, &headers, &html);
        if status != StatusCode::SEE_OTHER {
            assert!(pages.contains(&"/".to_owned()), "{form} answered {status} with no way back: {html}");
        }
        if form == "/logout" {
            let cleared = headers.get_all(header::SET_COOKIE).iter().filter_map(|c| c.to_str().ok()).any(|c| {
                c.starts_with(&format!("{SESSION_COOKIE}=;")) && c.contains("Max-Age=0") && !c.contains("Path=")
            });
            assert!(cleared, "sign-out clears the cookie sign-in set, in the same folder: {headers:?}");
        }
    }
}
