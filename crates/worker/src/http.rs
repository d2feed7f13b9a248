//! The Worker's HTTP server (axum): `/healthz` (the process answers), `/readyz` (the database answers and the
//! claim loop runs), `/metrics` (Prometheus text, HELP and TYPE on every family), and the operator's page
//! ([`crate::page`]) at `/`.
//!
//! One layer, [`guard`], wraps every route, the fallback included, so no route can forget it: it answers only
//! requests whose `Host` names this Worker ([`host_allowed`]) and puts [`SECURITY_HEADERS`] on every response.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use almanac_domain::ports::{DatabaseClock, WatchStore};
use almanac_domain::{Status, WorkKind};
use almanac_store_pg::PgStore;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::observe::{DATABASE_UP, WORK_ITEMS};

/// What the endpoints read.
#[derive(Clone)]
pub struct Health {
    pub store: PgStore,
    /// Renders the process's metrics.
    pub metrics: PrometheusHandle,
    /// The process's CPU, memory and open files, read at each scrape.
    pub process: Arc<metrics_process::Collector>,
    /// True while the executor's claim loop runs.
    pub running: Arc<AtomicBool>,
    /// The operator's page.
    pub page: Arc<crate::page::Page>,
}

/// Binds `address` (so a taken port fails at start, with the address in the error).
pub async fn bind(address: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(address).await.map_err(|e| anyhow::anyhow!("http.address: cannot listen on {address}: {e}"))
}

/// The page's Content-Security-Policy: its own style sheet, script and live stream, nothing inline, nothing
/// framing it, forms posting only to itself.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
     form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Headers on every response of the server (the page, its actions, metrics, probes, errors): no other site may
/// frame it (the page's buttons act), run script from what it shows, sniff a type, learn its URLs from a
/// Referer, load its answers into its own page, or find the CSRF value in a cache.
pub const SECURITY_HEADERS: [(HeaderName, &str); 6] = [
    (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
    (header::X_FRAME_OPTIONS, "DENY"),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::REFERRER_POLICY, "no-referrer"),
    (header::CACHE_CONTROL, "no-store"),
    (HeaderName::from_static("cross-origin-resource-policy"), "same-origin"),
];

/// The routes, each behind [`guard`].
pub fn router(health: Health) -> Router {
    let page = crate::page::router(health.page.clone());
    let allowed: Arc<[String]> = health.page.allowed_hosts.clone().into();
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(health)
        .merge(page)
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found\n") })
        .layer(axum::middleware::from_fn_with_state(allowed, guard))
}

/// Refuses a request that does not name this Worker as its host (DNS rebinding: another site's name resolved
/// to this address), and puts [`SECURITY_HEADERS`] on every answer, refusals included.
async fn guard(State(allowed): State<Arc<[String]>>, request: Request, next: Next) -> Response {
    let mut response = match check_host(&request, &allowed) {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.into_response(),
    };
    let headers = response.headers_mut();
    for (name, value) in SECURITY_HEADERS {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// Why a request's host is refused.
#[derive(Debug, PartialEq, Eq)]
enum HostRefusal {
    /// Not one host that reads as `name[:port]`: several `Host` headers, bytes that are not text, or a malformed
    /// value.
    Unreadable(String),
    /// A host this Worker does not know.
    Unknown(String),
}

impl IntoResponse for HostRefusal {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            HostRefusal::Unreadable(why) => {
                (StatusCode::BAD_REQUEST, format!("{why}: this Worker answers no such request\n"))
            }
            HostRefusal::Unknown(host) => (
                StatusCode::MISDIRECTED_REQUEST,
                format!(
                    "this Worker does not answer to the host {host:?}: add its name to http.allowed_hosts if it is \
                     yours (a name that is not listed could be another site's, rebound to this address)\n"
                ),
            ),
        };
        (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], message).into_response()
    }
}

/// Whether the request's `Host` header (and the authority of an absolute URI, when it has one) may be
/// answered. No `Host` at all is answered (HTTP/1.0 tools; no browser sends such a request).
fn check_host(request: &Request, allowed: &[String]) -> Result<(), HostRefusal> {
    let mut hosts = request.headers().get_all(header::HOST).iter();
    let header = match (hosts.next(), hosts.next()) {
        (None, _) => None,
        (Some(one), None) => Some(
            one.to_str()
                .map_err(|_| HostRefusal::Unreadable(format!("the Host header {one:?} is not readable text")))?,
        ),
        (Some(_), Some(_)) => return Err(HostRefusal::Unreadable("more than one Host header".into())),
    };
    let authority = request.uri().authority().map(|a| a.as_str());
    for host in header.into_iter().chain(authority) {
        let name =
            host_name(host).ok_or_else(|| HostRefusal::Unreadable(format!("the host {host:?} is not name[:port]")))?;
        if !host_allowed(host, name, allowed) {
            return Err(HostRefusal::Unknown(host.to_owned()));
        }
    }
    Ok(())
}

/// The name in a `name[:port]` host (an IPv6 address without its brackets); `None` when it is not one.
pub fn host_name(host: &str) -> Option<&str> {
    let (name, port) = match host.strip_prefix('[') {
        Some(rest) => {
            let (address, after) = rest.split_once(']')?;
            address.parse::<std::net::Ipv6Addr>().ok()?;
            (address, if after.is_empty() { None } else { Some(after.strip_prefix(':')?) })
        }
        None => {
            let (name, port) = host.split_once(':').map_or((host, None), |(n, p)| (n, Some(p)));
            let name_chars = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
            if name.is_empty() || !name.chars().all(name_chars) {
                return None;
            }
            (name, port)
        }
    };
    match port {
        Some(port) if !port.bytes().all(|b| b.is_ascii_digit()) || port.parse::<u16>().is_err() => None,
        _ => Some(name),
    }
}

/// Whether `host` (whose name is `name`) may be answered: an IP address (which DNS rebinding cannot produce),
/// `localhost`, or a name of `http.allowed_hosts` (listed alone, any port, or with the port given).
fn host_allowed(host: &str, name: &str, allowed: &[String]) -> bool {
    name.parse::<std::net::IpAddr>().is_ok()
        || name.eq_ignore_ascii_case("localhost")
        || allowed.iter().any(|a| a.eq_ignore_ascii_case(name) || a.eq_ignore_ascii_case(host))
}

/// Serves until `stop`. Each request knows its TCP peer (axum's `ConnectInfo<SocketAddr>`): the pause after
/// wrong tokens counts per address ([`crate::page::auth::Peer`]).
pub async fn serve(listener: TcpListener, health: Health, stop: CancellationToken) {
    let app = router(health).into_make_service_with_connect_info::<SocketAddr>();
    if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await {
        warn!(event = "http_failed", error = %e, "the HTTP server stopped");
    }
}

async fn readyz(State(health): State<Health>) -> impl IntoResponse {
    let db = tokio::time::timeout(Duration::from_secs(2), health.store.db_now()).await;
    match (db, health.running.load(Ordering::Relaxed)) {
        (Ok(Ok(_)), true) => (StatusCode::OK, "ready\n"),
        (Ok(Ok(_)), false) => (StatusCode::SERVICE_UNAVAILABLE, "the claim loop is not running\n"),
        _ => (StatusCode::SERVICE_UNAVAILABLE, "the database does not answer\n"),
    }
}

async fn metrics(State(health): State<Health>) -> impl IntoResponse {
    match tokio::time::timeout(Duration::from_secs(2), health.store.queue_summary()).await {
        Ok(Ok(rows)) => {
            // Every kind and status, so a count that drops to zero shows as zero, not as its last value.
            for kind in WorkKind::ALL {
                for status in Status::ALL {
                    let count = rows.iter().find(|r| r.kind == kind && r.status == status).map_or(0, |r| r.count);
                    metrics::gauge!(WORK_ITEMS, "kind" => kind.as_str(), "status" => status.as_str()).set(count as f64);
                }
            }
            metrics::gauge!(DATABASE_UP).set(1.0);
        }
        _ => metrics::gauge!(DATABASE_UP).set(0.0),
    }
    let watches = match tokio::time::timeout(Duration::from_secs(2), health.store.watch_states()).await {
        Ok(Ok(states)) => crate::observe::render_watch_states(&states),
        _ => String::new(),
    };
    health.process.collect();
    let text = health.metrics.render() + &watches;
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::Recent;
    use crate::page::auth::Auth;
    use crate::page::{Page, Samples};
    use almanac_testdb::TestDatabase;
    use axum::body::Body;
    use axum::http::{HeaderMap, Method};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    /// A Worker's server on a fresh database, answering to `allowed` names beside addresses and `localhost`.
    async fn server(allowed: Vec<String>) -> (TestDatabase, Router) {
        let (db, health) = health(allowed).await;
        (db, router(health))
    }

    /// What a Worker's server reads, on a fresh database.
    async fn health(allowed: Vec<String>) -> (TestDatabase, Health) {
        let db = TestDatabase::create().await;
        let store = PgStore::connect(db.url()).unwrap();
        let page = Arc::new(Page {
            store: store.clone(),
            auth: Auth::new(Some("a-token-of-24-characters".into())),
            recent: Recent::default(),
            samples: Samples::default(),
            worker_id: "worker-a".into(),
            allowed_hosts: allowed,
            stop: CancellationToken::new(),
        });
        let health = Health {
            store,
            metrics: crate::observe::recorder().handle(),
            process: Arc::new(metrics_process::Collector::default()),
            running: Arc::new(AtomicBool::new(true)),
            page,
        };
        (db, health)
    }

    fn host(name: &[u8]) -> Option<&[u8]> {
        Some(name)
    }

    fn request(method: Method, path: &str, host: Option<&[u8]>) -> axum::http::Request<Body> {
        let mut r = axum::http::Request::builder().method(method).uri(path);
        if let Some(name) = host {
            r = r.header(header::HOST, HeaderValue::from_bytes(name).unwrap());
        }
        r.body(Body::empty()).unwrap()
    }

    async fn send(router: &Router, request: axum::http::Request<Body>) -> (StatusCode, HeaderMap, String) {
        let response = router.clone().oneshot(request).await.unwrap();
        let (parts, body) = response.into_parts();
        // The live stream never ends: its headers are what is looked at.
        let text = if parts.headers.get(header::CONTENT_TYPE).is_some_and(|t| t == "text/event-stream") {
            String::new()
        } else {
            String::from_utf8_lossy(&body.collect().await.unwrap().to_bytes()).into_owned()
        };
        (parts.status, parts.headers, text)
    }

    #[test]
    fn the_operations_guide_lists_the_security_headers_as_sent() {
        let guide = include_str!("../../../docs/operations.md");
        for (name, value) in SECURITY_HEADERS {
            assert!(guide.contains(&format!("\n    {name}: {value}\n")), "docs/operations.md lacks {name}: {value}");
        }
    }

    #[tokio::test]
    async fn every_kind_of_answer_carries_the_security_headers() {
        let (_db, router) = server(Vec::new()).await;
        let local = host(b"127.0.0.1:9464");
        let cases = [
            (request(Method::GET, "/", local), StatusCode::OK),
            (request(Method::GET, crate::page::STYLESHEET, local), StatusCode::OK),
            (request(Method::GET, crate::page::SCRIPT, local), StatusCode::OK),
            (request(Method::GET, "/events", local), StatusCode::OK),
            (request(Method::GET, "/items/nope", local), StatusCode::BAD_REQUEST),
            (request(Method::POST, "/login", local), StatusCode::UNSUPPORTED_MEDIA_TYPE),
            (request(Method::POST, "/kinds/purge/pause", local), StatusCode::UNAUTHORIZED),
            (request(Method::DELETE, "/", local), StatusCode::METHOD_NOT_ALLOWED),
            (request(Method::GET, "/nowhere", local), StatusCode::NOT_FOUND),
            (request(Method::GET, "/metrics", local), StatusCode::OK),
            (request(Method::GET, "/healthz", local), StatusCode::OK),
            (request(Method::GET, "/readyz", local), StatusCode::OK),
            (request(Method::GET, "/healthz", None), StatusCode::OK),
            (request(Method::GET, "/metrics", host(b"evil.example:9464")), StatusCode::MISDIRECTED_REQUEST),
            (request(Method::GET, "/", host(b"\xffevil.example")), StatusCode::BAD_REQUEST),
        ];
        for (request, expected) in cases {
            let what =
                format!("{} {} (Host {:?})", request.method(), request.uri(), request.headers().get(header::HOST));
            let (status, headers, text) = send(&router, request).await;
            assert_eq!(status, expected, "{what}: {text}");
            assert_eq!(headers[header::X_FRAME_OPTIONS], "DENY", "{what}");
            let csp = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
            for directive in ["default-src 'none'", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'self'"] {
                assert!(csp.contains(directive), "{what}: {csp}");
            }
            assert!(!csp.contains("unsafe") && !csp.contains('*'), "{what}: {csp}");
            assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{what}");
            assert_eq!(headers[header::REFERRER_POLICY], "no-referrer", "{what}");
            assert_eq!(headers[header::CACHE_CONTROL], "no-store", "{what}");
            for (name, value) in SECURITY_HEADERS {
                assert_eq!(headers.get_all(&name).iter().collect::<Vec<_>>(), [value], "{what}: {name}");
            }
        }
    }

    #[tokio::test]
    async fn every_route_answers_only_to_addresses_localhost_and_the_allowed_names() {
        // As the settings give them.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("almanac.toml");
        std::fs::write(&file, "[http]\nallowed_hosts = [\"almanac.example\", \"scraper.lan:9100\"]\n").unwrap();
        let settings = crate::settings::Settings::load_from(Some(&file), Vec::new()).unwrap();
        let (_db, router) = server(settings.http.allowed_hosts).await;
        let hosts: [(&[u8], StatusCode); 21] = [
            (b"127.0.0.1:9464", StatusCode::OK),
            (b"localhost:9464", StatusCode::OK),
            (b"LocalHost", StatusCode::OK),
            (b"[::1]:9464", StatusCode::OK),
            (b"[::1]", StatusCode::OK),
            (b"192.168.1.5:9464", StatusCode::OK),
            (b"almanac.example", StatusCode::OK),
            (b"Almanac.Example:8443", StatusCode::OK),
            (b"scraper.lan:9100", StatusCode::OK),
            (b"scraper.lan:9464", StatusCode::MISDIRECTED_REQUEST),
            (b"evil.example:9464", StatusCode::MISDIRECTED_REQUEST),
            (b"127.0.0.1.evil.example", StatusCode::MISDIRECTED_REQUEST),
            (b"localhost.evil.example:9464", StatusCode::MISDIRECTED_REQUEST),
            (b"\xff\xfe", StatusCode::BAD_REQUEST),
            ("almanac.exampl\u{e9}".as_bytes(), StatusCode::BAD_REQUEST),
            (b"", StatusCode::BAD_REQUEST),
            (b"almanac.example:http", StatusCode::BAD_REQUEST),
            (b"almanac.example:9464:9464", StatusCode::BAD_REQUEST),
            (b"evil.example@127.0.0.1", StatusCode::BAD_REQUEST),
            (b"[::1", StatusCode::BAD_REQUEST),
            (b"[evil.example]:9464", StatusCode::BAD_REQUEST),
        ];
        for path in ["/", "/metrics", "/healthz", "/readyz", crate::page::SCRIPT, "/nowhere"] {
            for (host, expected) in &hosts {
                let (status, _, text) = send(&router, request(Method::GET, path, Some(*host))).await;
                let expected =
                    if *expected == StatusCode::OK && path == "/nowhere" { StatusCode::NOT_FOUND } else { *expected };
                assert_eq!(status, expected, "{path} for {:?}: {text}", String::from_utf8_lossy(host));
                if status == StatusCode::MISDIRECTED_REQUEST {
                    assert!(text.contains("http.allowed_hosts"), "{text}");
                }
            }
        }
        // Two Host headers, and an absolute URI naming another host, are refused too.
        let mut two = request(Method::GET, "/metrics", host(b"127.0.0.1:9464"));
        two.headers_mut().append(header::HOST, HeaderValue::from_static("evil.example"));
        let (status, _, text) = send(&router, two).await;
        assert!(status == StatusCode::BAD_REQUEST && text.contains("more than one Host header"), "{text}");
        let absolute = request(Method::GET, "http://evil.example/metrics", host(b"127.0.0.1:9464"));
        assert_eq!(send(&router, absolute).await.0, StatusCode::MISDIRECTED_REQUEST);
        // The health command's own request.
        let health = request(Method::GET, "/readyz", host(b"localhost"));
        assert_eq!(send(&router, health).await.0, StatusCode::OK);
    }

    /// Posts the sign-in form over a TCP connection from `from` (an address of the loopback network) to the
    /// server at `to`: the answer's status line.
    async fn sign_in_over_tcp(from: std::net::IpAddr, to: SocketAddr, token: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(from, 0)).unwrap();
        let mut stream = socket.connect(to).await.unwrap();
        let body = format!("token={token}");
        let request = format!(
            "POST /login HTTP/1.1\r\nHost: {to}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer.lines().next().unwrap_or_default().to_owned()
    }

    #[tokio::test]
    async fn the_server_counts_wrong_tokens_per_peer_address() {
        let (_db, health) = health(Vec::new()).await;
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let to = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let served = tokio::spawn(serve(listener, health, stop.clone()));
        // Linux answers on the whole 127.0.0.0/8: a second loopback address is a second peer.
        let (guesser, operator) = ([127, 0, 0, 2].into(), [127, 0, 0, 1].into());
        for _ in 0..crate::page::auth::WRONG_TOKENS_BEFORE_PAUSE {
            let status = sign_in_over_tcp(guesser, to, "wrong-token-of-24-chars").await;
            assert!(status.contains(" 401 "), "{status}");
        }
        let status = sign_in_over_tcp(guesser, to, "a-token-of-24-characters").await;
        assert!(status.contains(" 429 "), "the guesser's address is paused: {status}");
        let status = sign_in_over_tcp(operator, to, "a-token-of-24-characters").await;
        assert!(status.contains(" 303 "), "another address signs in: {status}");
        stop.cancel();
        served.await.unwrap();
    }
}
