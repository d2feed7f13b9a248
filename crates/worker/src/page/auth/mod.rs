//! Who may act on the operator's page. Reading needs nothing (the page is bound to 127.0.0.1 by default);
//! actions need `http.token`, given either as `Authorization: Bearer <token>` (scripts) or once in the sign-in
//! form, which sets a session cookie (`HttpOnly`, `SameSite=Strict`) that every action form must pair with its
//! CSRF field. No token set: no actions at all.
//!
//! The cookie and the CSRF field are keyed hashes of the token under a key made at start, so they change with
//! each start and never show the token. Comparisons are of BLAKE3 hashes (constant time).
//!
//! Guessing is slowed down, per client address ([`Peer`]: the TCP peer's address, an IPv6 one by its /64):
//! after [`WRONG_TOKENS_BEFORE_PAUSE`] wrong tokens in a row from one address (sign-in form and
//! `Authorization: Bearer` alike), every token check from that address is refused for
//! [`PAUSE_AFTER_WRONG_TOKENS`] (429), the right token included, so the pause cannot be used to tell it apart.
//! Other addresses go on as before, so someone guessing cannot lock the operator out (a session key changes at
//! each start, so after a restart signing in again is the only way back). Behind a reverse proxy every client
//! has the proxy's address and so shares one count: the pause then applies to all of them. At most
//! [`ADDRESSES_REMEMBERED`] addresses are remembered: those whose pause is over are forgotten first, then the
//! one whose last wrong token is oldest, so a flood of addresses cannot grow the table. The pause ends by
//! itself, so nobody is locked out for longer than that; browsers already signed in keep acting (their session
//! is not a token check), and a sign-in posted from another origin is refused before it counts, so another web
//! site cannot start pauses through the operator's browser.

mod guesses;
mod peer;

use std::sync::Mutex;
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode, header};
use tokio::time::Instant;

use self::guesses::Guesses;
pub use self::peer::Peer;

/// Wrong tokens in a row from one address after which that address's token checks pause.
pub const WRONG_TOKENS_BEFORE_PAUSE: u32 = 5;
/// How long token checks from an address stay refused after [`WRONG_TOKENS_BEFORE_PAUSE`] wrong tokens.
pub const PAUSE_AFTER_WRONG_TOKENS: Duration = Duration::from_secs(60);
/// Addresses whose wrong tokens are remembered at once, at most (a few dozen bytes each).
pub const ADDRESSES_REMEMBERED: usize = 1024;

/// The cookie that carries a signed-in session.
pub const SESSION_COOKIE: &str = "almanac_session";

/// How a request acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// A script, with the token in the `Authorization` header.
    Bearer,
    /// A signed-in browser, with the session cookie and the CSRF field.
    Session,
}

/// Why an action is refused; nothing is changed then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No token is configured.
    Disabled,
    /// Neither a token nor a session.
    NotSignedIn,
    /// A token or session that is not this Worker's.
    WrongToken,
    /// A session without its CSRF field, or from another site.
    Forged,
    /// Too many wrong tokens in a row: token checks pause for a while.
    Paused,
}

impl Refusal {
    pub fn status(self) -> StatusCode {
        match self {
            Refusal::Disabled | Refusal::Forged => StatusCode::FORBIDDEN,
            Refusal::NotSignedIn | Refusal::WrongToken => StatusCode::UNAUTHORIZED,
            Refusal::Paused => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            Refusal::Disabled => {
                "actions are disabled: this Worker has no http.token set (set one of at least 16 characters to allow \
                 them). Nothing was changed"
            }
            Refusal::NotSignedIn => "actions need the token: sign in with it first. Nothing was changed",
            Refusal::WrongToken => {
                "that token is not this Worker's (or the Worker restarted: sign in again). Nothing was changed"
            }
            Refusal::Forged => {
                "the request did not come from this page (no or wrong CSRF field, or another site's origin). Nothing \
                 was changed"
            }
            Refusal::Paused => {
                "too many wrong tokens in a row from this address: no token from it is looked at for a while, the \
                 right one included (the Retry-After header says how many seconds are left); a browser already \
                 signed in can still act. Nothing was changed"
            }
        }
    }
}

/// The token, and the key the session and CSRF values are derived under.
pub struct Auth {
    token: Option<String>,
    key: [u8; 32],
    guesses: Mutex<Guesses>,
}

impl Auth {
    pub fn new(token: Option<String>) -> Self {
        Self { token, key: rand::random(), guesses: Mutex::default() }
    }

    /// How many addresses the pause after wrong tokens remembers now.
    #[cfg(test)]
    fn remembered(&self) -> usize {
        self.guesses.lock().unwrap_or_else(|p| p.into_inner()).0.len()
    }

    /// Whether actions are possible at all.
    pub fn enabled(&self) -> bool {
        self.token.is_some()
    }

    fn derived(&self, purpose: &str) -> Option<blake3::Hash> {
        let token = self.token.as_ref()?;
        let mut hasher = blake3::Hasher::new_keyed(&self.key);
        hasher.update(purpose.as_bytes()).update(b"\0").update(token.as_bytes());
        Some(hasher.finalize())
    }

    /// Whether `given` is the token.
    fn token_matches(&self, given: &str) -> bool {
        self.token.as_ref().is_some_and(|t| blake3::hash(t.as_bytes()) == blake3::hash(given.as_bytes()))
    }

    /// Checks a token `peer` gave, counting wrong ones: refused without a look while its pause lasts.
    fn try_token(&self, peer: Peer, given: &str) -> Result<(), Refusal> {
        let mut guesses = self.guesses.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if guesses.paused(peer, now).is_some() {
            return Err(Refusal::Paused);
        }
        if self.token_matches(given) {
            guesses.0.remove(&peer);
            return Ok(());
        }
        let guesser = guesses.wrong(peer, now);
        if guesser.wrong >= WRONG_TOKENS_BEFORE_PAUSE {
            guesser.paused_until = Some(now + PAUSE_AFTER_WRONG_TOKENS);
            tracing::warn!(
                event = "token_checks_paused",
                peer = %peer,
                wrong_tokens = guesser.wrong,
                pause_s = PAUSE_AFTER_WRONG_TOKENS.as_secs(),
                "wrong tokens in a row on the operator's page from one address: no token from it is looked at for \
                 a while (someone there may be guessing it)"
            );
        }
        Err(Refusal::WrongToken)
    }

    /// How long `peer`'s pause after wrong tokens still lasts, if one does (whole seconds, rounded up: a
    /// `Retry-After`).
    pub fn paused_for(&self, peer: Peer) -> Option<u64> {
        let mut guesses = self.guesses.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let left = guesses.paused(peer, now)?.duration_since(now);
        Some(left.as_secs() + u64::from(left.subsec_nanos() > 0))
    }

    /// Signs a browser in with the token from the form: the session cookie's value. A form posted from another
    /// origin is refused before its token is looked at.
    pub fn sign_in(&self, peer: Peer, headers: &HeaderMap, given: &str) -> Result<String, Refusal> {
        if !self.enabled() {
            return Err(Refusal::Disabled);
        }
        if !same_origin(headers) {
            return Err(Refusal::Forged);
        }
        self.try_token(peer, given.trim())?;
        Ok(self.session_value().expect("enabled"))
    }

    /// The session cookie's value for a browser that gave the token.
    pub fn session_value(&self) -> Option<String> {
        self.derived("session").map(|h| h.to_hex().to_string())
    }

    /// The CSRF field every action form of a signed-in page carries.
    pub fn csrf(&self) -> Option<String> {
        self.derived("csrf").map(|h| h.to_hex().to_string())
    }

    /// Whether the request carries this Worker's session cookie.
    pub fn signed_in(&self, headers: &HeaderMap) -> bool {
        self.holds_session(&session_cookies(headers))
    }

    /// Whether one of the session cookies `given` is this Worker's.
    fn holds_session(&self, given: &[String]) -> bool {
        let Some(expected) = self.derived("session") else {
            return false;
        };
        given.iter().any(|given| blake3::Hash::from_hex(given).is_ok_and(|h| h == expected))
    }

    /// Whether the request from `peer` may act, and how.
    pub fn check(&self, peer: Peer, headers: &HeaderMap, csrf_field: Option<&str>) -> Result<Via, Refusal> {
        if !self.enabled() {
            return Err(Refusal::Disabled);
        }
        // Only a Bearer header is ours: a reverse proxy's Basic credentials leave the session to decide.
        if let Some(given) =
            headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "))
        {
            return self.try_token(peer, given.trim()).map(|()| Via::Bearer);
        }
        let sessions = session_cookies(headers);
        if sessions.is_empty() {
            return Err(Refusal::NotSignedIn);
        }
        if !self.holds_session(&sessions) {
            return Err(Refusal::WrongToken);
        }
        if !same_origin(headers) {
            return Err(Refusal::Forged);
        }
        let expected = self.derived("csrf").expect("enabled");
        match csrf_field.map(blake3::Hash::from_hex) {
            Some(Ok(given)) if given == expected => Ok(Via::Session),
            _ => Err(Refusal::Forged),
        }
    }
}

/// The values of every session cookie the request carries. A browser sends one for each path it keeps one for: a
/// Worker reached at the root of a host (`Path=/`) and another under a path of the same host name (`/almanac`, any
/// port: cookies do not look at ports) both send theirs to the second, and either may come last.
fn session_cookies(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.trim_matches('"').to_owned())
        .collect()
}

/// Whether a browser's request comes from this page itself (a form posted from another site, or from another
/// port of this host, does not). Browsers say where a request comes from in `Sec-Fetch-Site`, and name its
/// origin in `Origin`, which must be this page's host. The page's `Referrer-Policy: no-referrer` makes a form's
/// POST carry `Origin: null`, so `null` passes only beside `Sec-Fetch-Site: same-origin`. A request with
/// neither header (a script) passes here: it still needs the token, or the session and its CSRF field.
fn same_origin(headers: &HeaderMap) -> bool {
    let fetch_site = headers.get("sec-fetch-site").map(|v| v.to_str().unwrap_or(""));
    if fetch_site.is_some_and(|site| !matches!(site, "same-origin" | "none")) {
        return false;
    }
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    match headers.get(header::ORIGIN).map(|o| o.to_str()) {
        None => true,
        Some(Ok("null")) => fetch_site == Some("same-origin"),
        Some(Ok(origin)) => origin.split_once("://").is_some_and(|(_, rest)| rest.trim_end_matches('/') == host),
        Some(Err(_)) => false,
    }
}

#[cfg(test)]
mod tests;
