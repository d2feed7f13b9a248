//! Who may act on the operator's page. Reading needs nothing (the page is bound to 127.0.0.1 by default);
//! actions need `http.token`, given either as `Authorization: Bearer <token>` (scripts) or once in the sign-in
//! form, which sets a session cookie (`HttpOnly`, `SameSite=Strict`) that every action form must pair with its
//! CSRF field. No token set: no actions at all.
//!
//! The cookie and the CSRF field are keyed hashes of the token under a key made at start, so they change with
//! each start and never show the token. Comparisons are of BLAKE3 hashes (constant time).
//!
//! Guessing is slowed down: after [`WRONG_TOKENS_BEFORE_PAUSE`] wrong tokens in a row (sign-in form and
//! `Authorization: Bearer` alike), every token check is refused for [`PAUSE_AFTER_WRONG_TOKENS`] (429), the
//! right token included, so the pause cannot be used to tell it apart. The count is global, not per client
//! address: behind a reverse proxy every client has the proxy's address, and a guesser can have many. The
//! pause ends by itself, so nobody is locked out for longer than that; browsers already signed in keep acting
//! (their session is not a token check), and a sign-in posted from another origin is refused before it counts,
//! so another web site cannot start pauses through the operator's browser.

use std::sync::Mutex;
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode, header};
use tokio::time::Instant;

/// Wrong tokens in a row after which token checks pause.
pub const WRONG_TOKENS_BEFORE_PAUSE: u32 = 5;
/// How long token checks stay refused after [`WRONG_TOKENS_BEFORE_PAUSE`] wrong tokens.
pub const PAUSE_AFTER_WRONG_TOKENS: Duration = Duration::from_secs(60);

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
                "too many wrong tokens in a row: no token is looked at for a while, the right one included (the \
                 Retry-After header says how many seconds are left); a browser already signed in can still act. \
                 Nothing was changed"
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

/// Wrong tokens given in a row, and the pause they started.
#[derive(Default)]
struct Guesses {
    wrong: u32,
    paused_until: Option<Instant>,
}

impl Auth {
    pub fn new(token: Option<String>) -> Self {
        Self { token, key: rand::random(), guesses: Mutex::default() }
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

    /// Checks a token someone gave, counting wrong ones: refused without a look while a pause lasts.
    fn try_token(&self, given: &str) -> Result<(), Refusal> {
        let mut guesses = self.guesses.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        match guesses.paused_until {
            Some(until) if now < until => return Err(Refusal::Paused),
            Some(_) => *guesses = Guesses::default(),
            None => {}
        }
        if self.token_matches(given) {
            guesses.wrong = 0;
            return Ok(());
        }
        guesses.wrong += 1;
        if guesses.wrong >= WRONG_TOKENS_BEFORE_PAUSE {
            guesses.paused_until = Some(now + PAUSE_AFTER_WRONG_TOKENS);
            tracing::warn!(
                event = "token_checks_paused",
                wrong_tokens = guesses.wrong,
                pause_s = PAUSE_AFTER_WRONG_TOKENS.as_secs(),
                "wrong tokens in a row on the operator's page: no token is looked at for a while (someone may be \
                 guessing it)"
            );
        }
        Err(Refusal::WrongToken)
    }

    /// How long the pause after wrong tokens still lasts, if one does (whole seconds, rounded up: a
    /// `Retry-After`).
    pub fn paused_for(&self) -> Option<u64> {
        let guesses = self.guesses.lock().unwrap_or_else(|p| p.into_inner());
        let left = guesses.paused_until?.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())?;
        Some(left.as_secs() + u64::from(left.subsec_nanos() > 0))
    }

    /// Signs a browser in with the token from the form: the session cookie's value. A form posted from another
    /// origin is refused before its token is looked at.
    pub fn sign_in(&self, headers: &HeaderMap, given: &str) -> Result<String, Refusal> {
        if !self.enabled() {
            return Err(Refusal::Disabled);
        }
        if !same_origin(headers) {
            return Err(Refusal::Forged);
        }
        self.try_token(given.trim())?;
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
        let (Some(expected), Some(given)) = (self.derived("session"), cookie(headers, SESSION_COOKIE)) else {
            return false;
        };
        blake3::Hash::from_hex(given).is_ok_and(|h| h == expected)
    }

    /// Whether the request may act, and how.
    pub fn check(&self, headers: &HeaderMap, csrf_field: Option<&str>) -> Result<Via, Refusal> {
        if !self.enabled() {
            return Err(Refusal::Disabled);
        }
        // Only a Bearer header is ours: a reverse proxy's Basic credentials leave the session to decide.
        if let Some(given) =
            headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "))
        {
            return self.try_token(given.trim()).map(|()| Via::Bearer);
        }
        if cookie(headers, SESSION_COOKIE).is_none() {
            return Err(Refusal::NotSignedIn);
        }
        if !self.signed_in(headers) {
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

/// A cookie's value.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(name)?.strip_prefix('='))
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
mod tests {
    use super::*;
    use axum::http::{HeaderName, HeaderValue};

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn actions_need_the_token_or_a_session_with_its_csrf_field() {
        let auth = Auth::new(Some("a-token-of-24-characters".into()));
        let none = Auth::new(None);
        assert_eq!(none.check(&HeaderMap::new(), None), Err(Refusal::Disabled));
        assert_eq!(auth.check(&HeaderMap::new(), None), Err(Refusal::NotSignedIn));
        let bearer = headers(&[(header::AUTHORIZATION, "Bearer a-token-of-24-characters")]);
        assert_eq!(auth.check(&bearer, None), Ok(Via::Bearer));
        let wrong = headers(&[(header::AUTHORIZATION, "Bearer a-token-of-24-characterz")]);
        assert_eq!(auth.check(&wrong, None), Err(Refusal::WrongToken));
        let basic = headers(&[(header::AUTHORIZATION, "Basic YWRtaW46cHc=")]);
        assert_eq!(auth.check(&basic, None), Err(Refusal::NotSignedIn), "a proxy's credentials are not ours");

        let session = format!("{SESSION_COOKIE}={}", auth.session_value().unwrap());
        let csrf = auth.csrf().unwrap();
        let browser = headers(&[(header::COOKIE, &session), (header::HOST, "127.0.0.1:9464")]);
        assert_eq!(auth.check(&browser, Some(&csrf)), Ok(Via::Session));
        assert_eq!(auth.check(&browser, None), Err(Refusal::Forged));
        assert_eq!(auth.check(&browser, Some(&"0".repeat(64))), Err(Refusal::Forged));
        let elsewhere = headers(&[
            (header::COOKIE, &session),
            (header::HOST, "127.0.0.1:9464"),
            (header::ORIGIN, "http://evil.example"),
        ]);
        assert_eq!(auth.check(&elsewhere, Some(&csrf)), Err(Refusal::Forged));
        let here = headers(&[
            (header::COOKIE, &session),
            (header::HOST, "127.0.0.1:9464"),
            (header::ORIGIN, "http://127.0.0.1:9464"),
        ]);
        assert_eq!(auth.check(&here, Some(&csrf)), Ok(Via::Session));
        // Where the browser says the request comes from: a page on another port of this host is the same site,
        // not the same origin; a form of this page posts `Origin: null` under its no-referrer policy.
        let from = |site: &str, origin: &str| {
            headers(&[
                (header::COOKIE, &session),
                (header::HOST, "127.0.0.1:9464"),
                (HeaderName::from_static("sec-fetch-site"), site),
                (header::ORIGIN, origin),
            ])
        };
        assert_eq!(auth.check(&from("same-origin", "null"), Some(&csrf)), Ok(Via::Session));
        assert_eq!(auth.check(&from("same-origin", "http://127.0.0.1:9464"), Some(&csrf)), Ok(Via::Session));
        assert_eq!(auth.check(&from("same-site", "http://127.0.0.1:8080"), Some(&csrf)), Err(Refusal::Forged));
        assert_eq!(auth.check(&from("same-site", "null"), Some(&csrf)), Err(Refusal::Forged));
        assert_eq!(auth.check(&from("cross-site", "http://127.0.0.1:9464"), Some(&csrf)), Err(Refusal::Forged));
        assert_eq!(auth.check(&from("none", "null"), Some(&csrf)), Err(Refusal::Forged));
        let null_alone =
            headers(&[(header::COOKIE, &session), (header::HOST, "127.0.0.1:9464"), (header::ORIGIN, "null")]);
        assert_eq!(auth.check(&null_alone, Some(&csrf)), Err(Refusal::Forged));
        // Another Worker's (or an earlier start's) session is not this one's.
        let other = Auth::new(Some("a-token-of-24-characters".into()));
        assert_eq!(other.check(&browser, Some(&csrf)), Err(Refusal::WrongToken));
        assert!(!auth.session_value().unwrap().contains("a-token"));
    }

    #[test]
    fn the_operations_guide_gives_the_pause_as_it_is() {
        let guide = include_str!("../../../../docs/operations.md");
        let said = format!(
            "After {WRONG_TOKENS_BEFORE_PAUSE} wrong tokens in a row (the sign-in form and `Authorization: Bearer` \
             counted together), no token is looked\nat for {} seconds",
            PAUSE_AFTER_WRONG_TOKENS.as_secs()
        );
        assert!(guide.contains(&said), "docs/operations.md should say: {said}");
    }

    #[tokio::test(start_paused = true)]
    async fn wrong_tokens_in_a_row_pause_every_token_check_for_a_while_then_it_ends_by_itself() {
        const TOKEN: &str = "a-token-of-24-characters";
        let auth = Auth::new(Some(TOKEN.into()));
        let bearer = |token: &str| headers(&[(header::AUTHORIZATION, &format!("Bearer {token}"))]);
        let session = format!("{SESSION_COOKIE}={}", auth.session_value().unwrap());
        let browser = headers(&[(header::COOKIE, &session), (header::HOST, "127.0.0.1:9464")]);
        let csrf = auth.csrf().unwrap();
        // One short of the limit, then the right token: the count starts again.
        for _ in 1..WRONG_TOKENS_BEFORE_PAUSE {
            assert_eq!(auth.check(&bearer("a-token-of-24-characterz"), None), Err(Refusal::WrongToken));
        }
        assert_eq!(auth.sign_in(&HeaderMap::new(), TOKEN).map(|_| ()), Ok(()));
        // A sign-in posted from another origin is refused before its token counts.
        let elsewhere = headers(&[(header::HOST, "127.0.0.1:9464"), (header::ORIGIN, "http://127.0.0.1:8080")]);
        for _ in 0..2 * WRONG_TOKENS_BEFORE_PAUSE {
            assert_eq!(auth.sign_in(&elsewhere, "guess-0123456789abcdef"), Err(Refusal::Forged));
        }
        assert_eq!(auth.paused_for(), None);
        // The limit reached (the form and scripts count together): every token check is refused, the right one
        // included, and the pause does not grow with the refused ones.
        for i in 0..WRONG_TOKENS_BEFORE_PAUSE {
            let refusal = if i % 2 == 0 {
                auth.sign_in(&HeaderMap::new(), "guess-0123456789abcdef").map(|_| ())
            } else {
                auth.check(&bearer("guess-0123456789abcdef"), None).map(|_| ())
            };
            assert_eq!(refusal, Err(Refusal::WrongToken), "wrong token {i}");
        }
        assert_eq!(auth.paused_for(), Some(PAUSE_AFTER_WRONG_TOKENS.as_secs()));
        assert_eq!(auth.check(&bearer(TOKEN), None), Err(Refusal::Paused));
        assert_eq!(auth.sign_in(&HeaderMap::new(), TOKEN), Err(Refusal::Paused));
        assert_eq!(Refusal::Paused.status(), StatusCode::TOO_MANY_REQUESTS);
        // A browser signed in before acts on.
        assert_eq!(auth.check(&browser, Some(&csrf)), Ok(Via::Session));
        tokio::time::advance(PAUSE_AFTER_WRONG_TOKENS - Duration::from_millis(1)).await;
        assert_eq!(auth.paused_for(), Some(1));
        assert_eq!(auth.check(&bearer(TOKEN), None), Err(Refusal::Paused));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(auth.paused_for(), None);
        assert_eq!(auth.check(&bearer(TOKEN), None), Ok(Via::Bearer));
        // And a fresh count: wrong tokens are wrong again, not paused, until the limit.
        for _ in 1..WRONG_TOKENS_BEFORE_PAUSE {
            assert_eq!(auth.check(&bearer("a-token-of-24-characterz"), None), Err(Refusal::WrongToken));
        }
        assert_eq!(auth.check(&bearer(TOKEN), None), Ok(Via::Bearer));
    }
}
