//! What the page answers: problems as HTML pages with their status ([`Problem`], and every [`OpError`]), and an
//! action's outcome as the one who asked reads it ([`Done`], [`Failed`]): a redirect back to the page with a
//! message in a cookie (a browser), or the message as text (a script).

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};

use super::auth::{Refusal, Via};
use super::{Root, view};
use crate::ops::OpError;

/// The cookie that carries the outcome of an action to the page it redirects to (the page itself never takes
/// a message from its URL, which anyone could write).
pub const FLASH_COOKIE: &str = "almanac_flash";

/// How long an outcome waits for the page to show it.
const FLASH_SECONDS: i64 = 60;

/// A cookie of the page's: out of scripts' reach, never sent by another site's request, for the page's path when
/// the proxy names it ([`Root::cookie_path`]). Otherwise with no `Path`, so a browser keeps it for the folder of
/// the URL that set it: the session is set and cleared by the sign-in and sign-out forms, which post to the page's
/// root (`login`, `logout`), so it goes to the page's paths only (all of them at the root of a host name, only the
/// page's under a path a proxy strips, `/almanac`), not to the other site's paths beside it.
pub fn page_cookie(name: &'static str, value: String, root: &Root) -> Cookie<'static> {
    let mut cookie = Cookie::build((name, value)).http_only(true).same_site(SameSite::Strict).build();
    if let Some(path) = root.cookie_path() {
        cookie.set_path(path.to_owned());
    }
    cookie
}

/// The cookie that clears the page's cookie `name` (set by [`page_cookie`] from the same folder).
pub fn cleared(name: &'static str, root: &Root) -> Cookie<'static> {
    removal(page_cookie(name, String::new(), root))
}

/// `cookie` as the cookie that clears it: the same name and path, expired.
fn removal(mut cookie: Cookie<'static>) -> Cookie<'static> {
    cookie.make_removal();
    cookie
}

/// The outcome's cookie: set by an action, for the page it redirects to. For the page's path when the proxy names
/// it; otherwise the action's URL's folder is not the page's (`/almanac/items/…/retry`) and the page's full path is
/// not known, so it is for every path of the host (`/`): it carries only an outcome's words, for a minute, and the
/// page clears it once shown.
fn flash_cookie(value: String, root: &Root) -> Cookie<'static> {
    let mut cookie = page_cookie(FLASH_COOKIE, value, root);
    if root.cookie_path().is_none() {
        cookie.set_path("/");
    }
    cookie
}

/// Back to the page (`root`: from the action's path), with a message for it.
pub fn back_with(jar: CookieJar, message: &str, root: &Root) -> (CookieJar, Redirect) {
    let mut flash = flash_cookie(encode(message), root);
    flash.set_max_age(time::Duration::seconds(FLASH_SECONDS));
    (jar.add(flash), Redirect::to(&root.link("/")))
}

/// The message an action left for the page, if any: shown once, then cleared.
pub fn take_flash(jar: CookieJar, root: &Root) -> (CookieJar, Option<String>) {
    match jar.get(FLASH_COOKIE).map(|c| decode(c.value())).filter(|m| !m.is_empty()) {
        Some(message) => (jar.add(removal(flash_cookie(String::new(), root))), Some(message)),
        None => (jar, None),
    }
}

/// A page saying what went wrong.
#[derive(Debug)]
pub struct Problem {
    status: StatusCode,
    message: String,
    /// Seconds until a pause after wrong tokens ends (`Retry-After`).
    retry_after: Option<u64>,
}

impl Problem {
    /// `message`, answered with `status`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self { status, message: message.into(), retry_after: None }
    }

    /// A refused action or sign-in; a pause after wrong tokens says when it ends (`paused_for`).
    pub fn refused(refusal: Refusal, paused_for: Option<u64>) -> Self {
        let retry_after = paused_for.filter(|_| refusal == Refusal::Paused);
        Self { retry_after, ..Self::new(refusal.status(), refusal.message()) }
    }
}

/// A problem page to render once the request's [`Root`] is known ([`render_problems`]): a rejection or an
/// `OpError` becomes a response where nothing knows the request.
#[derive(Clone)]
struct Unrendered {
    status: StatusCode,
    message: String,
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let mut response = self.status.into_response();
        response.extensions_mut().insert(Unrendered { status: self.status, message: self.message });
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

/// Renders the problem pages of the page's answers, with links back to the page from the request's path.
pub async fn render_problems(root: Root, request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    if let Some(problem) = response.extensions_mut().remove::<Unrendered>() {
        let html = Html(view::problem(&root, problem.status, &problem.message).into_string()).into_response();
        let (parts, body) = html.into_parts();
        *response.body_mut() = body;
        response.headers_mut().extend(parts.headers);
    }
    response
}

/// The status that answers an action that failed with `e`.
pub fn status_of(e: &OpError) -> StatusCode {
    match e {
        OpError::BadInput(_) => StatusCode::BAD_REQUEST,
        OpError::NotFound(_) => StatusCode::NOT_FOUND,
        OpError::Refused(_) | OpError::Forbidden(_) | OpError::Conflict(_) => StatusCode::CONFLICT,
        OpError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        OpError::Settings(_) | OpError::Failed(_) | OpError::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for OpError {
    fn into_response(self) -> Response {
        let nothing = if self.state_unknown() { "" } else { " Nothing was changed." };
        Problem::new(status_of(&self), format!("{self}.{nothing}")).into_response()
    }
}

/// An action done: what it did.
pub struct Done {
    /// How it was asked for.
    pub via: Via,
    /// What it did, in words.
    pub message: String,
    /// The request's cookies, for the message (a browser).
    pub jar: CookieJar,
    /// The way back to the page from the action's path.
    pub root: Root,
}

impl IntoResponse for Done {
    fn into_response(self) -> Response {
        match self.via {
            Via::Bearer => (StatusCode::OK, format!("{}\n", self.message)).into_response(),
            Via::Session => back_with(self.jar, &self.message, &self.root).into_response(),
        }
    }
}

/// An action not done: why.
pub struct Failed {
    /// How it was asked for.
    pub via: Via,
    /// Why not.
    pub error: OpError,
}

impl IntoResponse for Failed {
    fn into_response(self) -> Response {
        match self.via {
            Via::Bearer => (status_of(&self.error), format!("{}\n", self.error)).into_response(),
            Via::Session => self.error.into_response(),
        }
    }
}

/// A cookie value for `text`: its UTF-8 bytes in hex (cookie values allow few characters).
pub fn encode(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Undoes [`encode`]; what is not hex reads as nothing.
pub fn decode(value: &str) -> String {
    let bytes: Option<Vec<u8>> = (0..value.len() / 2)
        .map(|i| value.get(2 * i..2 * i + 2).and_then(|pair| u8::from_str_radix(pair, 16).ok()))
        .collect();
    bytes.map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
}
