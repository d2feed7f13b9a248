//! What the page answers: problems as HTML pages with their status ([`Problem`], and every [`OpError`]), and an
//! action's outcome as the one who asked reads it ([`Done`], [`Failed`]): a redirect back to the page with a
//! message in a cookie (a browser), or the message as text (a script).

use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};

use super::auth::{Refusal, Via};
use super::view;
use crate::ops::OpError;

/// The cookie that carries the outcome of an action to the page it redirects to (the page itself never takes
/// a message from its URL, which anyone could write).
pub const FLASH_COOKIE: &str = "almanac_flash";

/// How long an outcome waits for the page to show it.
const FLASH_SECONDS: i64 = 60;

/// A cookie of the page's: for its own paths, out of scripts' reach, never sent by another site's request.
pub fn page_cookie(name: &'static str, value: String) -> Cookie<'static> {
    Cookie::build((name, value)).path("/").http_only(true).same_site(SameSite::Strict).build()
}

/// The cookie that clears the page's cookie `name`.
pub fn cleared(name: &'static str) -> Cookie<'static> {
    let mut cookie = page_cookie(name, String::new());
    cookie.make_removal();
    cookie
}

/// Back to the page, with a message for it.
pub fn back_with(jar: CookieJar, message: &str) -> (CookieJar, Redirect) {
    let mut flash = page_cookie(FLASH_COOKIE, encode(message));
    flash.set_max_age(time::Duration::seconds(FLASH_SECONDS));
    (jar.add(flash), Redirect::to("/"))
}

/// The message an action left for the page, if any: shown once, then cleared.
pub fn take_flash(jar: CookieJar) -> (CookieJar, Option<String>) {
    match jar.get(FLASH_COOKIE).map(|c| decode(c.value())).filter(|m| !m.is_empty()) {
        Some(message) => (jar.add(cleared(FLASH_COOKIE)), Some(message)),
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

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let html = Html(view::problem(self.status, &self.message).into_string());
        let mut response = (self.status, html).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, seconds.into());
        }
        response
    }
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
}

impl IntoResponse for Done {
    fn into_response(self) -> Response {
        match self.via {
            Via::Bearer => (StatusCode::OK, format!("{}\n", self.message)).into_response(),
            Via::Session => back_with(self.jar, &self.message).into_response(),
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
