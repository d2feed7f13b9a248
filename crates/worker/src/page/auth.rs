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

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use tokio::time::Instant;

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

/// Where a request comes from, as the pause after wrong tokens counts it: the TCP peer's IP address without its
/// port (each connection has its own), an IPv6 address by its /64 network (one host commonly holds a whole
/// /64), an IPv4 address mapped into IPv6 as that IPv4 address. An extractor: it reads axum's
/// `ConnectInfo<SocketAddr>`, which [`crate::http::serve`] provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Peer(IpAddr);

impl Peer {
    /// A request whose peer the server did not give (a router called without connect info, as some tests do):
    /// all of them share one count, as everyone did before counts were per address.
    pub const UNKNOWN: Peer = Peer(IpAddr::V6(Ipv6Addr::UNSPECIFIED));

    pub fn new(address: IpAddr) -> Self {
        match address {
            IpAddr::V4(_) => Peer(address),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Peer(IpAddr::V4(v4)),
                None => Peer(IpAddr::V6(Ipv6Addr::from_bits(v6.to_bits() & !u128::from(u64::MAX)))),
            },
        }
    }
}

impl From<SocketAddr> for Peer {
    fn from(address: SocketAddr) -> Self {
        Peer::new(address.ip())
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}"),
            IpAddr::V6(_) if *self == Peer::UNKNOWN => f.write_str("unknown"),
            IpAddr::V6(v6) => write!(f, "{v6}/64"),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let given = parts.extensions.get::<ConnectInfo<SocketAddr>>();
        Ok(given.map_or(Peer::UNKNOWN, |ConnectInfo(address)| Peer::from(*address)))
    }
}

/// The token, and the key the session and CSRF values are derived under.
pub struct Auth {
    token: Option<String>,
    key: [u8; 32],
    guesses: Mutex<Guesses>,
}

/// Wrong tokens per address, at most [`ADDRESSES_REMEMBERED`] of them.
#[derive(Default)]
struct Guesses(HashMap<Peer, Guesser>);

/// One address's wrong tokens in a row, when it gave the last one, and the pause they started.
struct Guesser {
    wrong: u32,
    last: Instant,
    paused_until: Option<Instant>,
}

impl Guesses {
    /// Until when `peer`'s token checks are paused, if they are now; a pause that is over is forgotten.
    fn paused(&mut self, peer: Peer, now: Instant) -> Option<Instant> {
        let until = self.0.get(&peer)?.paused_until?;
        if now < until {
            return Some(until);
        }
        self.0.remove(&peer);
        None
    }

    /// Counts a wrong token from `peer`: its wrong tokens in a row now. A new address first makes room:
    /// addresses whose pause is over are forgotten, then, while the table is full, the one whose last wrong
    /// token is oldest.
    fn wrong(&mut self, peer: Peer, now: Instant) -> &mut Guesser {
        if !self.0.contains_key(&peer) {
            self.0.retain(|_, g| g.paused_until.is_none_or(|until| now < until));
            while self.0.len() >= ADDRESSES_REMEMBERED {
                let Some(oldest) = self.0.iter().min_by_key(|(_, g)| g.last).map(|(p, _)| *p) else { break };
                self.0.remove(&oldest);
            }
        }
        let guesser = self.0.entry(peer).or_insert(Guesser { wrong: 0, last: now, paused_until: None });
        guesser.wrong += 1;
        guesser.last = now;
        guesser
    }
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
        let (Some(expected), Some(given)) = (self.derived("session"), cookie(headers, SESSION_COOKIE)) else {
            return false;
        };
        blake3::Hash::from_hex(given).is_ok_and(|h| h == expected)
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

    /// The address of the requests that do not care which it is.
    const HERE: Peer = Peer::UNKNOWN;

    fn peer(address: &str) -> Peer {
        Peer::new(address.parse().unwrap())
    }

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
        assert_eq!(none.check(HERE, &HeaderMap::new(), None), Err(Refusal::Disabled));
        assert_eq!(auth.check(HERE, &HeaderMap::new(), None), Err(Refusal::NotSignedIn));
        let bearer = headers(&[(header::AUTHORIZATION, "Bearer a-token-of-24-characters")]);
        assert_eq!(auth.check(HERE, &bearer, None), Ok(Via::Bearer));
        let wrong = headers(&[(header::AUTHORIZATION, "Bearer a-token-of-24-characterz")]);
        assert_eq!(auth.check(HERE, &wrong, None), Err(Refusal::WrongToken));
        let basic = headers(&[(header::AUTHORIZATION, "Basic YWRtaW46cHc=")]);
        assert_eq!(auth.check(HERE, &basic, None), Err(Refusal::NotSignedIn), "a proxy's credentials are not ours");

        let session = format!("{SESSION_COOKIE}={}", auth.session_value().unwrap());
        let csrf = auth.csrf().unwrap();
        let browser = headers(&[(header::COOKIE, &session), (header::HOST, "127.0.0.1:9464")]);
        assert_eq!(auth.check(HERE, &browser, Some(&csrf)), Ok(Via::Session));
        assert_eq!(auth.check(HERE, &browser, None), Err(Refusal::Forged));
        assert_eq!(auth.check(HERE, &browser, Some(&"0".repeat(64))), Err(Refusal::Forged));
        let elsewhere = headers(&[
            (header::COOKIE, &session),
            (header::HOST, "127.0.0.1:9464"),
            (header::ORIGIN, "http://evil.example"),
        ]);
        assert_eq!(auth.check(HERE, &elsewhere, Some(&csrf)), Err(Refusal::Forged));
        let here = headers(&[
            (header::COOKIE, &session),
            (header::HOST, "127.0.0.1:9464"),
            (header::ORIGIN, "http://127.0.0.1:9464"),
        ]);
        assert_eq!(auth.check(HERE, &here, Some(&csrf)), Ok(Via::Session));
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
        assert_eq!(auth.check(HERE, &from("same-origin", "null"), Some(&csrf)), Ok(Via::Session));
        assert_eq!(auth.check(HERE, &from("same-origin", "http://127.0.0.1:9464"), Some(&csrf)), Ok(Via::Session));
        assert_eq!(auth.check(HERE, &from("same-site", "http://127.0.0.1:8080"), Some(&csrf)), Err(Refusal::Forged));
        assert_eq!(auth.check(HERE, &from("same-site", "null"), Some(&csrf)), Err(Refusal::Forged));
        assert_eq!(auth.check(HERE, &from("cross-site", "http://127.0.0.1:9464"), Some(&csrf)), Err(Refusal::Forged));
        assert_eq!(auth.check(HERE, &from("none", "null"), Some(&csrf)), Err(Refusal::Forged));
        let null_alone =
            headers(&[(header::COOKIE, &session), (header::HOST, "127.0.0.1:9464"), (header::ORIGIN, "null")]);
        assert_eq!(auth.check(HERE, &null_alone, Some(&csrf)), Err(Refusal::Forged));
        // Another Worker's (or an earlier start's) session is not this one's.
        let other = Auth::new(Some("a-token-of-24-characters".into()));
        assert_eq!(other.check(HERE, &browser, Some(&csrf)), Err(Refusal::WrongToken));
        assert!(!auth.session_value().unwrap().contains("a-token"));
    }

    #[test]
    fn the_operations_guide_gives_the_pause_as_it_is() {
        let guide = include_str!("../../../../docs/operations.md").split_whitespace().collect::<Vec<_>>().join(" ");
        for said in [
            format!(
                "After {WRONG_TOKENS_BEFORE_PAUSE} wrong tokens in a row from one client address (the sign-in form and \
                 `Authorization: Bearer` counted together), no token from that address is looked at for {} seconds",
                PAUSE_AFTER_WRONG_TOKENS.as_secs()
            ),
            "**Behind a reverse proxy every client has the proxy's address**".to_owned(),
            format!("At most {ADDRESSES_REMEMBERED} addresses are remembered"),
            "an IPv6 address counts by its /64".to_owned(),
        ] {
            assert!(guide.contains(&said), "docs/operations.md should say: {said}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn wrong_tokens_in_a_row_pause_that_address_for_a_while_and_no_other_then_it_ends_by_itself() {
        const TOKEN: &str = "a-token-of-24-characters";
        let auth = Auth::new(Some(TOKEN.into()));
        let guesser = peer("203.0.113.7");
        let operator = peer("198.51.100.20");
        let bearer = |token: &str| headers(&[(header::AUTHORIZATION, &format!("Bearer {token}"))]);
        let session = format!("{SESSION_COOKIE}={}", auth.session_value().unwrap());
        let browser = headers(&[(header::COOKIE, &session), (header::HOST, "127.0.0.1:9464")]);
        let csrf = auth.csrf().unwrap();
        // One short of the limit, then the right token: the count starts again.
        for _ in 1..WRONG_TOKENS_BEFORE_PAUSE {
            assert_eq!(auth.check(guesser, &bearer("a-token-of-24-characterz"), None), Err(Refusal::WrongToken));
        }
        assert_eq!(auth.sign_in(guesser, &HeaderMap::new(), TOKEN).map(|_| ()), Ok(()));
        // A sign-in posted from another origin is refused before its token counts.
        let elsewhere = headers(&[(header::HOST, "127.0.0.1:9464"), (header::ORIGIN, "http://127.0.0.1:8080")]);
        for _ in 0..2 * WRONG_TOKENS_BEFORE_PAUSE {
            assert_eq!(auth.sign_in(guesser, &elsewhere, "guess-0123456789abcdef"), Err(Refusal::Forged));
        }
        assert_eq!(auth.paused_for(guesser), None);
        // The operator mistypes a few times: their count is their own, the guesser's wrong tokens do not add to it.
        for _ in 1..WRONG_TOKENS_BEFORE_PAUSE {
            assert_eq!(auth.sign_in(operator, &HeaderMap::new(), "typo-0123456789abcdef"), Err(Refusal::WrongToken));
        }
        // The limit reached from one address (the form and scripts count together): every token check from it is
        // refused, the right one included, and the pause does not grow with the refused ones.
        for i in 0..WRONG_TOKENS_BEFORE_PAUSE {
            let refusal = if i % 2 == 0 {
                auth.sign_in(guesser, &HeaderMap::new(), "guess-0123456789abcdef").map(|_| ())
            } else {
                auth.check(guesser, &bearer("guess-0123456789abcdef"), None).map(|_| ())
            };
            assert_eq!(refusal, Err(Refusal::WrongToken), "wrong token {i}");
        }
        assert_eq!(auth.paused_for(guesser), Some(PAUSE_AFTER_WRONG_TOKENS.as_secs()));
        assert_eq!(auth.check(guesser, &bearer(TOKEN), None), Err(Refusal::Paused));
        assert_eq!(auth.sign_in(guesser, &HeaderMap::new(), TOKEN), Err(Refusal::Paused));
        assert_eq!(Refusal::Paused.status(), StatusCode::TOO_MANY_REQUESTS);
        // Another address is not paused: the operator signs in, and scripts act, with the right token.
        assert_eq!(auth.paused_for(operator), None);
        assert_eq!(auth.sign_in(operator, &HeaderMap::new(), TOKEN), Ok(auth.session_value().unwrap()));
        assert_eq!(auth.check(operator, &bearer(TOKEN), None), Ok(Via::Bearer));
        assert_eq!(auth.check(peer("::1"), &bearer(TOKEN), None), Ok(Via::Bearer));
        // A browser signed in before acts on, even from the paused address.
        assert_eq!(auth.check(guesser, &browser, Some(&csrf)), Ok(Via::Session));
        tokio::time::advance(PAUSE_AFTER_WRONG_TOKENS - Duration::from_millis(1)).await;
        assert_eq!(auth.paused_for(guesser), Some(1));
        assert_eq!(auth.check(guesser, &bearer(TOKEN), None), Err(Refusal::Paused));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(auth.paused_for(guesser), None);
        assert_eq!(auth.check(guesser, &bearer(TOKEN), None), Ok(Via::Bearer));
        // And a fresh count: wrong tokens are wrong again, not paused, until the limit.
        for _ in 1..WRONG_TOKENS_BEFORE_PAUSE {
            assert_eq!(auth.check(guesser, &bearer("a-token-of-24-characterz"), None), Err(Refusal::WrongToken));
        }
        assert_eq!(auth.check(guesser, &bearer(TOKEN), None), Ok(Via::Bearer));
        assert_eq!(auth.remembered(), 0, "right tokens forget their address");
    }

    #[test]
    fn an_address_is_its_ip_without_the_port_and_an_ipv6_host_is_its_64() {
        let at = |s: &str| Peer::from(s.parse::<SocketAddr>().unwrap());
        assert_eq!(at("203.0.113.7:40000"), at("203.0.113.7:40001"), "each connection has its own port");
        assert_ne!(at("203.0.113.7:40000"), at("203.0.113.8:40000"));
        assert_eq!(at("[::ffff:203.0.113.7]:1"), at("203.0.113.7:2"), "an IPv4 address mapped into IPv6");
        assert_eq!(at("[2001:db8:1:2:aaaa::1]:1"), at("[2001:db8:1:2:ffff:ffff:ffff:ffff]:2"));
        assert_ne!(at("[2001:db8:1:2::1]:1"), at("[2001:db8:1:3::1]:1"));
        assert_eq!(at("[2001:db8:1:2:aaaa::1]:1").to_string(), "2001:db8:1:2::/64");
        assert_eq!(at("[::ffff:203.0.113.7]:1").to_string(), "203.0.113.7");
        assert_eq!(Peer::UNKNOWN.to_string(), "unknown");
    }

    #[tokio::test(start_paused = true)]
    async fn the_addresses_remembered_stay_bounded_under_a_flood_of_them() {
        let auth = Auth::new(Some("a-token-of-24-characters".into()));
        let wrong = headers(&[(header::AUTHORIZATION, "Bearer guess-0123456789abcdef")]);
        let nth = |n: usize| Peer::new(IpAddr::V6(Ipv6Addr::from_bits(0x2001_0db8 << 96 | (n as u128) << 64)));
        // A paused address whose pause is over is forgotten when a new address comes.
        let guesser = peer("203.0.113.7");
        for _ in 0..WRONG_TOKENS_BEFORE_PAUSE {
            assert_eq!(auth.check(guesser, &wrong, None), Err(Refusal::WrongToken));
        }
        tokio::time::advance(PAUSE_AFTER_WRONG_TOKENS).await;
        assert_eq!(auth.remembered(), 1);
        assert_eq!(auth.check(nth(0), &wrong, None), Err(Refusal::WrongToken));
        assert_eq!(auth.remembered(), 1, "the pause that is over is forgotten");
        // A flood of addresses, one wrong token each: the table never holds more than its bound, and the
        // addresses forgotten are the ones whose last wrong token is oldest.
        for n in 1..3 * ADDRESSES_REMEMBERED {
            tokio::time::advance(Duration::from_millis(1)).await;
            assert_eq!(auth.check(nth(n), &wrong, None), Err(Refusal::WrongToken));
            assert!(auth.remembered() <= ADDRESSES_REMEMBERED);
        }
        assert_eq!(auth.remembered(), ADDRESSES_REMEMBERED);
        // The newest addresses are still counted: one that had one wrong token is paused after the rest.
        let newest = nth(3 * ADDRESSES_REMEMBERED - 1);
        for _ in 1..WRONG_TOKENS_BEFORE_PAUSE {
            assert_eq!(auth.check(newest, &wrong, None), Err(Refusal::WrongToken));
        }
        assert_eq!(auth.paused_for(newest), Some(PAUSE_AFTER_WRONG_TOKENS.as_secs()));
        // The oldest was forgotten: it starts again from nothing (four more wrong tokens do not pause it).
        for _ in 1..WRONG_TOKENS_BEFORE_PAUSE {
            assert_eq!(auth.check(nth(1), &wrong, None), Err(Refusal::WrongToken));
        }
        assert_eq!(auth.paused_for(nth(1)), None);
        assert_eq!(auth.remembered(), ADDRESSES_REMEMBERED);
    }
}
