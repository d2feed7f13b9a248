//! Where the page's root is, as seen from the request: every link, form, script, style sheet, stream, redirect
//! and cookie of the page goes through [`Root`], so the page works wherever a reverse proxy serves it.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

/// The header a reverse proxy names the path it strips in (Traefik's `StripPrefix` sends it; nginx and Caddy
/// send it when told to).
pub const PREFIX_HEADER: &str = "x-forwarded-prefix";

/// The way from the path a request names back to the page's root.
///
/// The page is served at the root of a host name of its own (`almanac.nas.lan/`), or under a path of another
/// site's that a reverse proxy strips (`nas.lan/almanac/` passed on as `/`). A path from the host's root
/// (`/items/…`) would reach the other site there, and the sign-in form would post the token to it.
/// - When the proxy names the path it strips ([`PREFIX_HEADER`], a plain path), references are paths from the
///   host's root under it (`/almanac/items/…`), right whatever the browser shows (`nas.lan/almanac`, with no
///   slash, included), and the page's cookies are for that path.
/// - Otherwise references are relative (`./`, `../`): the path counted is the one the request names after the
///   prefix was stripped, and a browser resolves the reference against the full one, so each `/` after the prefix
///   is one step back. That holds when the browser's path has the slash the Worker's has (nginx redirects
///   `nas.lan/almanac` to `nas.lan/almanac/` itself; a proxy that passes `nas.lan/almanac` on as `/` must name
///   the prefix).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Root {
    /// What a route is appended to: `./`, `../`, …, or `/almanac/`.
    base: String,
    /// The page's path on the host, when the proxy said it (`/almanac`, or `/`).
    path: Option<String>,
}

impl Root {
    /// The root as seen from `path` (a request's path, `/` first), the prefix unknown.
    pub fn of(path: &str) -> Self {
        let steps = path.matches('/').count().saturating_sub(1);
        Self { base: if steps == 0 { "./".to_owned() } else { "../".repeat(steps) }, path: None }
    }

    /// The root under `prefix`, the path a proxy strips, when it is a plain path: segments of letters, digits and
    /// `-._~%`, none of them empty, `.` or `..` (a missing leading `/` is added, a trailing one dropped). Anything
    /// else (a list of several, `//elsewhere`, a quote) is not taken.
    pub fn under(prefix: &str) -> Option<Self> {
        let prefix = prefix.trim();
        let trimmed = prefix.strip_prefix('/').unwrap_or(prefix).trim_end_matches('/');
        let plain = |segment: &str| {
            // A browser reads `%2e` as a dot in a segment of dots (`%2e%2e` is `..`), as the URL standard says.
            let dots = segment.to_ascii_lowercase().replace("%2e", ".");
            !segment.is_empty()
                && dots != "."
                && dots != ".."
                && segment.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~%".contains(&b))
        };
        if trimmed.is_empty() {
            return Some(Self { base: "/".to_owned(), path: Some("/".to_owned()) });
        }
        trimmed.split('/').all(plain).then(|| Self { base: format!("/{trimmed}/"), path: Some(format!("/{trimmed}")) })
    }

    /// The root for a request: under the prefix its proxy names, else relative to its path.
    pub fn of_request(parts: &Parts) -> Self {
        let mut named = parts.headers.get_all(PREFIX_HEADER).iter();
        let prefix = match (named.next(), named.next()) {
            (Some(one), None) => one.to_str().ok().and_then(Self::under),
            _ => None,
        };
        prefix.unwrap_or_else(|| Self::of(parts.uri.path()))
    }

    /// The reference to the page's `route` (a path of its router, `/` first) from here.
    pub fn link(&self, route: &str) -> String {
        format!("{}{}", self.base, route.trim_start_matches('/'))
    }

    /// The `Path` of the page's cookies, when the page's path on the host is known.
    pub fn cookie_path(&self) -> Option<&str> {
        self.path.as_deref()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Root {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self::of_request(parts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_is_taken_only_when_it_is_a_plain_path() {
        for (given, base, path) in [
            ("/almanac", "/almanac/", "/almanac"),
            ("/almanac/", "/almanac/", "/almanac"),
            ("almanac", "/almanac/", "/almanac"),
            ("/apps/photo-worker_2", "/apps/photo-worker_2/", "/apps/photo-worker_2"),
            ("/", "/", "/"),
            ("", "/", "/"),
        ] {
            let root = Root::under(given).unwrap_or_else(|| panic!("{given:?} is a plain path"));
            assert_eq!((root.link("/"), root.cookie_path()), (base.to_owned(), Some(path)), "{given:?}");
        }
        for refused in [
            "//evil.example",
            "/a//b",
            "/a/../b",
            "/./a",
            "/%2e%2e",
            "/a/.%2E",
            "/%2e",
            "/a, /b",
            "/a;b",
            "/a\"b",
            "/a b",
            "/ü",
        ] {
            assert_eq!(Root::under(refused), None, "{refused:?}");
        }
    }

    #[test]
    fn without_a_prefix_each_slash_after_the_first_is_a_step_back() {
        for (path, base) in [("/", "./"), ("/login", "./"), ("/items/x", "../"), ("/configs/x/watch/off", "../../../")]
        {
            assert_eq!(Root::of(path).link("/"), base, "{path}");
            assert_eq!(Root::of(path).cookie_path(), None);
        }
        assert_eq!(Root::of("/items/x").link("/page.css"), "../page.css");
    }
}
