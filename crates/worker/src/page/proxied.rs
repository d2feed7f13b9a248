//! The page served under a path of another site's, as a reverse proxy serves it (`nas.lan/almanac/`, the prefix
//! stripped before the Worker sees the request): every reference the page and its answers make, followed as a
//! browser resolves it, stays under the prefix and reaches one of the page's routes; its session is for the
//! page's folder only.

use std::collections::{BTreeSet, VecDeque};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode, header};
use http_body_util::BodyExt;
use tower::ServiceExt;

use super::auth::SESSION_COOKIE;
use super::tests::{TOKEN, get, post, send, world};

/// Where the proxy serves the page; the other site has the rest of the host.
const PAGE: &str = "http://nas.lan/almanac/";

/// How the proxy passes requests on.
#[derive(Clone, Copy)]
struct Proxy {
    /// Names the path it strips (`X-Forwarded-Prefix`).
    names_prefix: bool,
    /// Serves the page at `nas.lan/almanac` too, without the slash, as `/` (Traefik's `StripPrefix`, Caddy's
    /// `handle_path`), where nginx redirects to `nas.lan/almanac/`.
    without_slash: bool,
}

impl Proxy {
    /// The request for `path` as this proxy passes it on.
    fn pass(self, mut request: Request<Body>) -> Request<Body> {
        if self.names_prefix {
            request.headers_mut().insert(super::root::PREFIX_HEADER, HeaderValue::from_static("/almanac"));
        }
        request
    }

    /// The URL the browser shows for the Worker's `path`.
    fn full(self, path: &str) -> url::Url {
        if path == "/" && self.without_slash {
            return url::Url::parse(PAGE.trim_end_matches('/')).unwrap();
        }
        url::Url::parse(PAGE).unwrap().join(path.trim_start_matches('/')).unwrap()
    }

    /// Where a browser on `path` goes for `reference` (WHATWG URL resolution, as browsers do), as the Worker
    /// sees it; fails when that leaves the page for the other site.
    fn followed(self, path: &str, reference: &str) -> String {
        let to = self.full(path).join(reference).unwrap();
        let stripped =
            to.path().strip_prefix("/almanac").filter(|p| p.starts_with('/') && to.host_str() == Some("nas.lan"));
        let stripped = stripped.unwrap_or_else(|| panic!("{reference:?} on {path} leads to {to}, the other site's"));
        stripped.to_owned() + to.query().map(|q| format!("?{q}")).as_deref().unwrap_or("")
    }

    /// Checks the references of an answer to `path`, and returns the pages they lead to and the forms they post
    /// to.
    fn check(self, path: &str, status: StatusCode, headers: &HeaderMap, html: &str) -> (Vec<String>, Vec<String>) {
        assert_ne!(status, StatusCode::NOT_FOUND, "{path} is not a route of the page: {html}");
        if let Some(to) = headers.get(header::LOCATION) {
            assert_eq!(self.followed(path, to.to_str().unwrap()), "/", "{path} redirects back to the page");
        }
        let (mut pages, mut forms) = (Vec::new(), Vec::new());
        for (attribute, reference) in references(html) {
            let to = self.followed(path, &reference);
            if attribute.ends_with("action") { forms.push(to) } else { pages.push(to) }
        }
        (pages, forms)
    }
}

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

/// The `Set-Cookie` of `name` in `headers`.
fn set_cookie(headers: &HeaderMap, name: &str) -> String {
    let named = |c: &&str| c.starts_with(&format!("{name}="));
    let found = headers.get_all(header::SET_COOKIE).iter().filter_map(|c| c.to_str().ok()).find(named);
    found.unwrap_or_else(|| panic!("no {name} cookie: {headers:?}")).to_owned()
}

/// Every page reached from the page through `proxy`, signed in (so its forms are there), and every form posted:
/// each reference stays under the prefix, and each answer is a route of the page.
async fn every_reference_stays_under_the_prefix(proxy: Proxy, cookie_path: Option<&str>) {
    let w = world(Some(TOKEN)).await;
    let (status, headers, html) = send(&w.page, proxy.pass(post("/login", &[], &format!("token={TOKEN}")))).await;
    proxy.check("/login", status, &headers, &html);
    let cookie = set_cookie(&headers, SESSION_COOKIE);
    // Without the prefix, no `Path`: the browser keeps it for the folder of `/almanac/login`, `/almanac`. Either way
    // it goes to the page's paths only, not the other site's.
    assert_eq!(cookie.split("; ").find_map(|a| a.strip_prefix("Path=")), cookie_path, "{cookie}");
    let session = cookie.split(';').next().unwrap().to_owned();
    let csrf = format!("csrf={}", w.page.auth.csrf().unwrap());

    let mut seen = BTreeSet::from(["/".to_owned(), "/items/nope".to_owned()]);
    let mut to_read: VecDeque<String> = seen.iter().cloned().collect();
    let mut forms = BTreeSet::new();
    while let Some(path) = to_read.pop_front() {
        let mut request = proxy.pass(get(&path));
        request.headers_mut().insert(header::COOKIE, session.parse().unwrap());
        let (status, headers, text) = send(&w.page, request).await;
        let (pages, posts) = proxy.check(&path, status, &headers, &text);
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
    // page.js finds the live stream beside itself; the stream's sections go into the page, whose references they
    // must keep. (The stream never ends: its first event is enough.)
    let (_, _, script) = send(&w.page, proxy.pass(get(super::SCRIPT))).await;
    assert!(script.contains("new URL('events', document.currentScript.src)"), "{script}");
    let events = proxy.followed(super::SCRIPT, "events");
    let stream = super::router(w.page.clone()).oneshot(proxy.pass(get(&events))).await.unwrap();
    assert_eq!(stream.headers()[header::CONTENT_TYPE], "text/event-stream", "{events}");
    let first = stream.into_body().frame().await.unwrap().unwrap().into_data().unwrap();
    let section = String::from_utf8_lossy(&first);
    let (links, _) = proxy.check("/", StatusCode::OK, &HeaderMap::new(), &section);
    assert!(links.contains(&format!("/items/{}", w.running)), "{section}");

    // Every form, done or refused: back to the page, or a problem page whose link leads back to it. Signing out
    // last.
    assert!(forms.len() >= 8 && forms.contains("/logout"), "{forms:?}");
    let last = forms.take("/logout").unwrap();
    for form in forms.into_iter().chain([last]) {
        let (status, headers, html) = send(&w.page, proxy.pass(post(&form, &[("cookie", &session)], &csrf))).await;
        let (pages, _) = proxy.check(&form, status, &headers, &html);
        if status == StatusCode::SEE_OTHER {
            let flash = set_cookie(&headers, super::answer::FLASH_COOKIE);
            let flash_path = flash.split("; ").find_map(|a| a.strip_prefix("Path="));
            assert_eq!(flash_path, Some(cookie_path.unwrap_or("/")), "{flash}");
        } else {
            assert!(pages.contains(&"/".to_owned()), "{form} answered {status} with no way back: {html}");
        }
        if form == "/logout" {
            let cleared = set_cookie(&headers, SESSION_COOKIE);
            let path = cleared.split("; ").find_map(|a| a.strip_prefix("Path="));
            assert!(cleared.contains("Max-Age=0") && path == cookie_path, "the cookie sign-in set: {cleared}");
        }
    }
}

#[tokio::test]
async fn every_reference_of_the_page_behind_a_proxy_that_strips_a_path_stays_under_that_path() {
    every_reference_stays_under_the_prefix(Proxy { names_prefix: false, without_slash: false }, None).await;
}

/// A proxy that passes `nas.lan/almanac` on as `/` (no slash to resolve relative references against) and names
/// the prefix: every reference is under it.
#[tokio::test]
async fn a_proxy_that_names_the_prefix_it_strips_has_every_reference_under_it_even_without_the_slash() {
    every_reference_stays_under_the_prefix(Proxy { names_prefix: true, without_slash: true }, Some("/almanac")).await;
}
