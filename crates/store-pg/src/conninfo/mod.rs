//! Connection strings, read in one place: both forms PostgreSQL accepts (a `postgres://` URL and `key=value`
//! pairs), the TLS settings the driver does not read itself (`sslmode`'s verifying modes, `sslrootcert`) taken
//! out and honoured by [`crate::tls`], and every password hidden before a string is shown.

use std::ops::Range;
use std::time::Duration;

use crate::StoreError;
use crate::tls::{SslMode, Tls};

mod tcp;

use tcp::{KEEPALIVE_KEYS, Own, user_timeout_of};

/// Where and how to connect: the driver's settings and the TLS policy, read once from a connection string.
/// Every connection of ours (pools, the work listener, migrations) is made from one.
#[derive(Clone)]
pub struct ConnectTarget {
    pub(crate) config: tokio_postgres::Config,
    /// When the string names several hosts and a `connect_timeout`: one driver config per host, in order, each
    /// attempt bounded as a whole by that timeout (see [`ConnectTarget::each_host`]). Empty otherwise.
    pub(crate) hosts: Vec<tokio_postgres::Config>,
    pub(crate) tls: Tls,
}

impl std::fmt::Debug for ConnectTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectTarget")
            .field("hosts", &self.config.get_hosts())
            .field("sslmode", &self.tls.mode())
            .finish_non_exhaustive()
    }
}

impl ConnectTarget {
    /// Reads `conn` (URL or `key=value` form). `sslmode` may be `disable`, `allow` (taken as `prefer`),
    /// `prefer` (the default), `require`, `verify-ca` or `verify-full`; `sslrootcert` names a PEM file of
    /// trusted roots, or `system` for the system's. Unknown options, malformed values and an unreadable
    /// `sslrootcert` are errors ([`StoreError::Config`]); the message never holds the password.
    pub fn parse(conn: &str) -> Result<Self, StoreError> {
        let (rest, taken) = take_params(conn, &["sslmode", "sslrootcert", "tcp_user_timeout"])
            .ok_or_else(|| StoreError::Config("the connection string cannot be read".into()))?;
        let mut config: tokio_postgres::Config = rest.parse().map_err(|e| StoreError::Config(format!("{e}")))?;
        let rootcert = taken.iter().rev().find(|(k, _)| k == "sslrootcert").map(|(_, v)| v.as_str());
        let asked = taken.iter().rev().find(|(k, _)| k == "sslmode").map(|(_, v)| SslMode::parse(v)).transpose()?;
        let user_timeout = taken.iter().rev().find(|(k, _)| k == "tcp_user_timeout").map(|(_, v)| v.as_str());
        // As libpq 16: the system's roots are trusted only with the name checked too (any certificate a public
        // CA issued, for any name, would pass otherwise), and they make verify-full the default.
        let mode = match (asked, rootcert) {
            (None, Some("system")) => SslMode::VerifyFull,
            (Some(m), Some("system")) if m != SslMode::VerifyFull => {
                return Err(StoreError::Config(format!(
                    "sslrootcert=system needs sslmode=verify-full (with sslmode={} any certificate a public CA \
                     issued, for any name, would be accepted)",
                    m.name()
                )));
            }
            (Some(m), _) => m,
            (None, _) => SslMode::Prefer,
        };
        let hosts = config.get_hosts();
        let named = hosts.iter().any(|h| matches!(h, tokio_postgres::config::Host::Tcp(_)));
        if !named
            && (hosts.is_empty() || !config.get_hostaddrs().is_empty())
            && matches!(mode, SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull)
        {
            return Err(StoreError::Config(format!(
                "sslmode={} needs the server's name: give host=NAME beside hostaddr (TLS is negotiated for a name)",
                mode.name()
            )));
        }
        // TCP keepalives and a user timeout, unless the string sets its own: a dead peer is noticed in about a
        // minute, not hours, whether the connection was idle or waiting for its bytes to be acknowledged.
        let own_keepalives = take_params(conn, &KEEPALIVE_KEYS).is_some_and(|(_, taken)| !taken.is_empty());
        let own = Own { keepalives: own_keepalives, user_timeout: user_timeout_of(user_timeout)? };
        settle(&mut config, mode, own);
        let hosts = one_per_host(&rest, &config)?
            .into_iter()
            .map(|mut host| {
                settle(&mut host, mode, own);
                host
            })
            .collect();
        Ok(Self { config, hosts, tls: Tls::new(mode, rootcert)? })
    }

    /// The driver configs to try in turn, each with the time its whole attempt may take: the string's own
    /// config, unbounded here (the driver tries its hosts itself), or, when it names several hosts and a
    /// `connect_timeout`, one config per host bounded by that timeout. libpq bounds each host's whole attempt
    /// so; the driver bounds only the TCP connect, so a first host that accepts and never answers (a frozen
    /// primary) would hold every new connection until the pool gave up, and the host after it (the promoted
    /// standby) would never be tried.
    pub(crate) fn each_host(&self) -> Vec<(&tokio_postgres::Config, Option<Duration>)> {
        if self.hosts.is_empty() {
            return vec![(&self.config, None)];
        }
        self.hosts.iter().map(|h| (h, h.get_connect_timeout().copied())).collect()
    }

    /// How this target uses TLS.
    pub fn ssl_mode(&self) -> SslMode {
        self.tls.mode()
    }
}

/// A connection string with every password hidden, in both forms PostgreSQL accepts: a URL
/// (`postgres://user:secret@host/db?password=…`, the password in the user part or in any `…password` query
/// parameter) and `key=value` pairs (`host=h password='se cret'`, quoted or not). What cannot be read is hidden
/// whole: a secret is never shown because its string was malformed.
pub fn mask_password(conn: &str) -> String {
    let driver_config = take_params(conn, &["sslmode", "sslrootcert"])
        .and_then(|(rest, _)| rest.parse::<tokio_postgres::Config>().ok());
    // A string the driver cannot read may hide a password anywhere (an unencoded `/` or `&` in it, a scheme
    // spelled otherwise): when it has a user part or names a password, it is hidden whole.
    if driver_config.is_none() && (conn.contains('@') || conn.to_ascii_lowercase().contains("password")) {
        return HIDDEN.to_owned();
    }
    let mut shown =
        if is_url(conn) { mask_url(conn) } else { mask_key_values(conn).unwrap_or_else(|| HIDDEN.to_owned()) };
    // Whatever the syntax (a `?` inside an unencoded password, say), the password the driver would use is
    // hidden wherever it still stands.
    if let Some(config) = driver_config
        && let Some(password) = config.get_password().map(String::from_utf8_lossy).filter(|p| !p.is_empty())
    {
        shown = shown.replace(password.as_ref(), "***");
    }
    shown
}

/// Sets what a string leaves to us on a driver config: TLS as `mode` says (never on a Unix socket, as with
/// libpq: the server would refuse it there), and TCP keepalives and user timeout unless the string sets its own.
fn settle(config: &mut tokio_postgres::Config, mode: SslMode, own: Own) {
    let hosts = config.get_hosts();
    let only_sockets = !hosts.is_empty()
        && hosts.iter().all(|h| !matches!(h, tokio_postgres::config::Host::Tcp(_)))
        && config.get_hostaddrs().is_empty();
    config.ssl_mode(if only_sockets { SslMode::Disable.driver_mode() } else { mode.driver_mode() });
    own.apply(config);
}

/// When `config` (read from `rest`) names several hosts and a `connect_timeout`, and does not ask for them in
/// random order, one config per host: `rest` without its hosts, ports and addresses, and with the one host's.
fn one_per_host(rest: &str, config: &tokio_postgres::Config) -> Result<Vec<tokio_postgres::Config>, StoreError> {
    use tokio_postgres::config::{Host, LoadBalanceHosts};
    let (hosts, addrs, ports) = (config.get_hosts(), config.get_hostaddrs(), config.get_ports());
    let n = hosts.len().max(addrs.len());
    if n < 2 || config.get_connect_timeout().is_none() || config.get_load_balance_hosts() == LoadBalanceHosts::Random {
        return Ok(Vec::new());
    }
    let unreadable = || StoreError::Config("the connection string's hosts cannot be read".into());
    let (base, _) = take_params(rest, &["host", "hostaddr", "port"]).ok_or_else(unreadable)?;
    let base = if is_url(&base) { without_url_hosts(&base) } else { base };
    (0..n)
        .map(|i| {
            let mut one: Vec<(&str, String)> = Vec::new();
            match hosts.get(i) {
                Some(Host::Tcp(name)) => one.push(("host", name.clone())),
                Some(Host::Unix(path)) => one.push(("host", path.display().to_string())),
                None => {}
            }
            if let Some(addr) = addrs.get(i) {
                one.push(("hostaddr", addr.to_string()));
            }
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            one.push(("port", port.to_string()));
            with_params(&base, &one).parse().map_err(|e| StoreError::Config(format!("{e}")))
        })
        .collect()
}

/// A URL without the hosts (and ports) of its authority: `scheme://user@/db?…`.
fn without_url_hosts(url: &str) -> String {
    let UrlParts { authority, at, .. } = url_parts(url);
    let start = at.map_or(authority, |a| a + 1);
    let end = url[start..].find(['/', '?']).map_or(url.len(), |i| start + i);
    format!("{}{}", &url[..start], &url[end..])
}

/// `conn` (a URL or `key=value` pairs) with `params` added.
fn with_params(conn: &str, params: &[(&str, String)]) -> String {
    if is_url(conn) {
        let encode = |v: &str| v.replace('%', "%25").replace('&', "%26").replace('#', "%23").replace(' ', "%20");
        let added: Vec<String> = params.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
        let joiner = if url_parts(conn).query.is_some() { '&' } else { '?' };
        format!("{conn}{joiner}{}", added.join("&"))
    } else {
        let quote = |v: &str| format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"));
        let added: Vec<String> = params.iter().map(|(k, v)| format!("{k}={}", quote(v))).collect();
        format!("{conn} {}", added.join(" "))
    }
}

/// What is shown of a connection string that cannot be read.
pub const HIDDEN: &str = "<connection string hidden: it could not be read>";

/// The keys libpq (and the driver) know in `key=value` strings; a string with any other is hidden whole.
const KNOWN_KEYS: [&str; 44] = [
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "channel_binding",
    "connect_timeout",
    "client_encoding",
    "options",
    "application_name",
    "fallback_application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "keepalives_retries",
    "tcp_user_timeout",
    "replication",
    "gssencmode",
    "sslmode",
    "requiressl",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslpassword",
    "sslcertmode",
    "sslrootcert",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "service",
    "target_session_attrs",
    "load_balance_hosts",
    "sslnegotiation",
    "require_auth",
    "max_protocol_version",
];

fn is_url(conn: &str) -> bool {
    let trimmed = conn.trim_start().to_ascii_lowercase();
    trimmed.starts_with("postgres://") || trimmed.starts_with("postgresql://")
}

fn is_secret_key(key: &str) -> bool {
    key.to_ascii_lowercase().contains("password")
}

/// `conn` without the parameters named in `keys`, and their (decoded) values in the order written; `None`
/// when `conn` is neither a URL nor readable `key=value` pairs.
fn take_params(conn: &str, keys: &[&str]) -> Option<(String, Vec<(String, String)>)> {
    let mut taken = Vec::new();
    if is_url(conn) {
        let Some(q) = url_parts(conn).query else { return Some((conn.to_owned(), taken)) };
        let (base, query) = (&conn[..q], &conn[q + 1..]);
        let mut kept = Vec::new();
        for pair in query.split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = percent_decoded(key);
            if keys.contains(&key.as_str()) {
                taken.push((key, percent_decoded(value)));
            } else {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
        return Some((rest, taken));
    }
    let chars: Vec<char> = conn.chars().collect();
    let mut rest = String::new();
    let mut at = 0;
    for pair in key_value_pairs(&chars)? {
        if keys.contains(&pair.key.as_str()) {
            rest.extend(&chars[at..pair.span.start]);
            at = pair.span.end;
            taken.push((pair.key, pair.value));
        }
    }
    rest.extend(&chars[at..]);
    Some((rest, taken))
}

/// Where a URL's parts start, as far as hiding a password needs: the user part (`user:password`), and the
/// query. A password may hold `@`, `:`, `/` and `?` unencoded; a host name cannot.
struct UrlParts {
    /// After `scheme://`.
    authority: usize,
    /// The `@` that ends the user part, if there is one.
    at: Option<usize>,
    /// The `?` that starts the query, if there is one.
    query: Option<usize>,
}

fn url_parts(url: &str) -> UrlParts {
    let authority = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[authority..];
    let first_q = rest.find('?');
    let at = match first_q {
        // The user part ends at the last `@` before the query.
        Some(q) if rest[..q].contains('@') => rest[..q].rfind('@'),
        None => rest.rfind('@'),
        // A `?` before any `@`: in a path it starts the query; in the authority (no `/` before it) it is
        // part of a password, which ends at the last `@` before the next `?`.
        Some(q) if rest[..q].contains('/') => None,
        Some(q) => rest[q..].find('@').map(|first| {
            let after = q + first;
            let end = rest[after..].find('?').map_or(rest.len(), |n| after + n);
            rest[..end].rfind('@').unwrap_or(after)
        }),
    };
    let query = rest[at.map_or(0, |a| a + 1)..].find('?').map(|q| authority + at.map_or(0, |a| a + 1) + q);
    UrlParts { authority, at: at.map(|a| authority + a), query }
}

fn mask_url(url: &str) -> String {
    let UrlParts { authority, at, query } = url_parts(url);
    let before_query = &url[..query.unwrap_or(url.len())];
    let query = query.map(|q| &url[q + 1..]);
    let mut out = match at {
        Some(at) => {
            let userinfo = &url[authority..at];
            match userinfo.find(':') {
                Some(colon) => format!("{}{}:***{}", &url[..authority], &userinfo[..colon], &before_query[at..]),
                None => before_query.to_owned(),
            }
        }
        None => before_query.to_owned(),
    };
    if let Some(query) = query {
        let params: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) if is_secret_key(key) || is_secret_key(&percent_decoded(key)) => format!("{key}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One `key=value` pair of a connection string.
struct Pair {
    key: String,
    /// The value as written (quotes and escapes included).
    written: String,
    /// The value as libpq reads it.
    value: String,
    /// Where the pair stands, in characters, from its key to the end of its value.
    span: Range<usize>,
}

/// `key=value` pairs as libpq reads them (spaces around `=`, values quoted with `'` and `\` escapes, or bare
/// with `\` escapes); `None` when the text is not such pairs.
fn key_value_pairs(chars: &[char]) -> Option<Vec<Pair>> {
    let mut pairs = Vec::new();
    let mut i = 0;
    let skip_spaces = |i: &mut usize| {
        while *i < chars.len() && chars[*i].is_whitespace() {
            *i += 1;
        }
    };
    loop {
        skip_spaces(&mut i);
        if i == chars.len() {
            return Some(pairs);
        }
        let key_start = i;
        while i < chars.len() && chars[i] != '=' && !chars[i].is_whitespace() {
            i += 1;
        }
        let key: String = chars[key_start..i].iter().collect();
        skip_spaces(&mut i);
        if key.is_empty() || chars.get(i) != Some(&'=') {
            return None;
        }
        i += 1;
        skip_spaces(&mut i);
        let value_start = i;
        let mut value = String::new();
        if chars.get(i) == Some(&'\'') {
            i += 1;
            loop {
                match chars.get(i) {
                    None => return None,
                    Some('\\') => {
                        value.extend(chars.get(i + 1));
                        i += 2;
                    }
                    Some('\'') => {
                        i += 1;
                        break;
                    }
                    Some(c) => {
                        value.push(*c);
                        i += 1;
                    }
                }
            }
        } else {
            while i < chars.len() && !chars[i].is_whitespace() {
                if chars[i] == '\\' {
                    value.extend(chars.get(i + 1));
                    i += 2;
                } else {
                    value.push(chars[i]);
                    i += 1;
                }
            }
        }
        let end = i.min(chars.len());
        pairs.push(Pair { key, written: chars[value_start..end].iter().collect(), value, span: key_start..end });
        i = end;
    }
}

/// `key=value` pairs with the values of password keys replaced; `None` when the text is not such pairs.
fn mask_key_values(s: &str) -> Option<String> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::new();
    let mut at = 0;
    let pairs = key_value_pairs(&chars)?;
    if pairs.iter().any(|p| !KNOWN_KEYS.contains(&p.key.to_ascii_lowercase().as_str())) {
        return None;
    }
    for pair in pairs {
        out.extend(&chars[at..pair.span.start]);
        out.push_str(&pair.key);
        out.push('=');
        out.push_str(if is_secret_key(&pair.key) { "***" } else { &pair.written });
        at = pair.span.end;
    }
    out.extend(&chars[at..]);
    Some(out)
}

#[cfg(test)]
mod tests;
