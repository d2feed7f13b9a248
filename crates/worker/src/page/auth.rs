//! Who may act on the operator's page. Reading needs nothing (the page is bound to 127.0.0.1 by default);
//! actions need `http.token`, given either as `Authorization: Bearer <token>` (scripts) or once in the sign-in
//! form, which sets a session cookie (`HttpOnly`, `SameSite=Strict`) that every action form must pair with its
//! CSRF field. No token set: no actions at all.
//!
//! The cookie and the CSRF field are keyed hashes of the token under a key made at start, so they change with
//! each start and never show the token. Comparisons are of BLAKE3 hashes (constant time).

use axum::http::{HeaderMap, StatusCode, header};

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
}

impl Refusal {
    pub fn status(self) -> StatusCode {
        match self {
            Refusal::Disabled | Refusal::Forged => StatusCode::FORBIDDEN,
            Refusal::NotSignedIn | Refusal::WrongToken => StatusCode::UNAUTHORIZED,
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
        }
    }
}

/// The token, and the key the session and CSRF values are derived under.
pub struct Auth {
    token: Option<String>,
    key: [u8; 32],
}

impl Auth {
    pub fn new(token: Option<String>) -> Self {
        Self { token, key: rand::random() }
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
    pub fn token_matches(&self, given: &str) -> bool {
        self.token.as_ref().is_some_and(|t| blake3::hash(t.as_bytes()) == blake3::hash(given.as_bytes()))
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
            return if self.token_matches(given.trim()) { Ok(Via::Bearer) } else { Err(Refusal::WrongToken) };
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

/// A browser's request names its origin; it must be this page's host (a form posted from another site is not).
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok()) else { return true };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    origin.split_once("://").is_some_and(|(_, rest)| rest.trim_end_matches('/') == host)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

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
        // Another Worker's (or an earlier start's) session is not this one's.
        let other = Auth::new(Some("a-token-of-24-characters".into()));
        assert_eq!(other.check(&browser, Some(&csrf)), Err(Refusal::WrongToken));
        assert!(!auth.session_value().unwrap().contains("a-token"));
    }
}
