//! TLS to PostgreSQL against a private cluster of its own started with `ssl = on` and certificates made here:
//! every kind of connection (migrations, the pool, LISTEN) works under `require` and `verify-full`, and a
//! certificate that does not name the host, or is signed by another CA, is refused with a message that says so.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use almanac_domain::{NewWorkItem, Scope, WorkKind, WorkQueue};
use almanac_store_pg::{ConnectTarget, PgStore, SslMode, StoreError, listen_for_work};
use almanac_testdb::Cluster;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
struct TlsServer {
    cluster: Cluster,
    port: u16,
    /// The CA that signed the server's certificate (issued to `localhost` only).
    ca: String,
    /// A CA that signed nothing of the server's.
    other_ca: String,
}

fn ca(name: &str) -> (Issuer<'static, KeyPair>, String) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    (Issuer::new(params, key), cert.pem())
}

/// A cluster of this process's own with `ssl = on`, a certificate for `localhost` signed by a CA made here.
fn start() -> TlsServer {
    let (issuer, ca_pem) = ca("Almanac test CA");
    let (_, other_ca) = ca("Someone else's CA");
    let server_key = KeyPair::generate().unwrap();
    let server_cert =
        CertificateParams::new(vec!["localhost".to_owned()]).unwrap().signed_by(&server_key, &issuer).unwrap();

    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = std::env::temp_dir().join(format!("almanac-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cluster = Cluster::at(dir.clone()).expect("PostgreSQL's binaries").listening_on_tcp(port);
    let cert = cluster.install_file("server.crt", server_cert.pem().as_bytes(), 0o644).unwrap();
    let key = cluster.install_file("server.key", server_key.serialize_pem().as_bytes(), 0o600).unwrap();
    let ca = cluster.install_file("ca.pem", ca_pem.as_bytes(), 0o644).unwrap();
    let other_ca = cluster.install_file("other-ca.pem", other_ca.as_bytes(), 0o644).unwrap();
    let cluster = cluster
        .with_setting("ssl", "on")
        .with_setting("ssl_cert_file", &cert.display().to_string())
        .with_setting("ssl_key_file", &key.display().to_string());
    cluster.ensure_running().expect("the TLS cluster starts");
    TlsServer { cluster, port, ca: ca.display().to_string(), other_ca: other_ca.display().to_string() }
}

/// The running server, shared by the tests of this process that run at once; the last one out stops it and
/// removes its files (a server left behind would hold its port and folder).
struct Server(TlsServer);

static USERS: Mutex<Option<(TlsServer, usize)>> = Mutex::new(None);

fn server() -> Server {
    let mut users = USERS.lock().unwrap_or_else(|e| e.into_inner());
    let (server, n) = users.get_or_insert_with(|| (start(), 0));
    *n += 1;
    Server(server.clone())
}

impl Drop for Server {
    fn drop(&mut self) {
        let mut users = USERS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, n)) = users.as_mut() {
            *n -= 1;
            if *n == 0 {
                let _ = self.0.cluster.stop();
                let _ = std::fs::remove_dir_all(self.0.cluster.dir());
                *users = None;
            }
        }
    }
}

impl std::ops::Deref for Server {
    type Target = TlsServer;
    fn deref(&self) -> &TlsServer {
        &self.0
    }
}

/// A URL naming the server as `host` (the name checked against the certificate), reaching it at 127.0.0.1.
fn url(s: &TlsServer, host: &str, tls: &str) -> String {
    format!("postgres://postgres@{host}:{}/postgres?hostaddr=127.0.0.1&{tls}", s.port)
}

#[tokio::test]
async fn require_and_verify_full_encrypt_every_connection_migrations_pool_and_listener() {
    let s = server();
    let verify_full = url(&s, "localhost", &format!("sslmode=verify-full&sslrootcert={}", s.ca));
    almanac_store_pg::migrate(&verify_full).await.expect("migrations over verify-full");
    for tls in ["sslmode=require".to_owned(), format!("sslmode=verify-full&sslrootcert={}", s.ca)] {
        let url = url(&s, "localhost", &tls);
        let store = PgStore::connect(&url).unwrap();
        let described = store.tls_in_use().await.unwrap();
        assert!(described.as_deref().is_some_and(|d| d.starts_with("TLS")), "{tls}: {described:?}");

        let wake = Arc::new(Notify::new());
        let stop = CancellationToken::new();
        let listener = tokio::spawn(listen_for_work(url.clone(), wake.clone(), stop.clone()));
        tokio::time::timeout(almanac_testdb::patience(Duration::from_secs(10)), wake.notified())
            .await
            .expect("the listener connects");
        store.enqueue(&NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped).unwrap()).await.unwrap();
        tokio::time::timeout(almanac_testdb::patience(Duration::from_secs(10)), wake.notified())
            .await
            .expect("woken over TLS");
        stop.cancel();
        listener.await.unwrap();
    }
    // And without TLS when asked: the same server, plain.
    let plain = PgStore::connect(&url(&s, "localhost", "sslmode=disable")).unwrap();
    assert_eq!(plain.tls_in_use().await.unwrap(), None);
    // prefer (the default) with only an address: no name to negotiate TLS for, so plain, as libpq falls back.
    let address_only = format!("postgres://postgres@/postgres?hostaddr=127.0.0.1&port={}", s.port);
    assert_eq!(PgStore::connect(&address_only).unwrap().tls_in_use().await.unwrap(), None);
    assert_eq!(almanac_store_pg::pending_migrations(&address_only).await, Ok(vec![]));
}

#[tokio::test]
async fn verify_full_refuses_a_certificate_not_issued_to_the_host_and_says_what_to_do() {
    let s = server();
    for host in ["127.0.0.1", "db.example"] {
        let url = url(&s, host, &format!("sslmode=verify-full&sslrootcert={}", s.ca));
        let err = almanac_store_pg::schema_state(&url).await.unwrap_err();
        let StoreError::Config(message) = &err else { panic!("a setting to fix, not an outage: {err}") };
        assert!(message.contains(&format!("not issued to {host}")), "{message}");
        assert!(message.contains("verify-ca"), "says what else to do: {message}");
        // The pool says the same when it is used, and keeps it a setting to fix, not an outage.
        let pooled = PgStore::new(&url, 1, Duration::from_secs(5)).unwrap().tls_in_use().await.unwrap_err();
        assert!(matches!(&pooled, StoreError::Config(m) if m.contains("not issued to")), "{pooled:?}");
    }
    // verify-ca checks who signed it, not the name.
    let url = url(&s, "127.0.0.1", &format!("sslmode=verify-ca&sslrootcert={}", s.ca));
    assert!(PgStore::connect(&url).unwrap().tls_in_use().await.unwrap().is_some());
}

#[tokio::test]
async fn a_certificate_signed_by_an_untrusted_ca_is_refused_under_verify_modes_and_require_with_a_root() {
    let s = server();
    for tls in ["verify-full", "verify-ca", "require"] {
        let url = url(&s, "localhost", &format!("sslmode={tls}&sslrootcert={}", s.other_ca));
        let err = almanac_store_pg::schema_state(&url).await.unwrap_err();
        let StoreError::Config(message) = &err else { panic!("{tls}: {err}") };
        assert!(message.contains("not signed by a root in") && message.contains(&s.other_ca), "{message}");
    }
    // Without a root, require encrypts but does not check (libpq's rule).
    assert_eq!(ConnectTarget::parse(&url(&s, "localhost", "sslmode=require")).unwrap().ssl_mode(), SslMode::Require);
    assert!(PgStore::connect(&url(&s, "localhost", "sslmode=require")).unwrap().tls_in_use().await.unwrap().is_some());
}
