//! TLS to PostgreSQL with rustls (ring as the crypto provider; no OpenSSL), as libpq's `sslmode` describes it:
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (default), `allow` | when the server offers it | not checked |
//! | `require` | always | not checked; checked as `verify-ca` when `sslrootcert` is given |
//! | `verify-ca` | always | signed by a trusted root |
//! | `verify-full` | always | signed by a trusted root, and issued to the host connected to |
//!
//! Trusted roots come from `sslrootcert`: a PEM file, or `system` for the system's store; without it,
//! `~/.postgresql/root.crt` as libpq does. Connections over a Unix socket never use TLS (as with libpq).

use std::path::PathBuf;
use std::sync::Arc;

use diesel_async::AsyncPgConnection;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::StoreError;
use crate::conninfo::ConnectTarget;

/// How a connection uses TLS (`sslmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Never.
    Disable,
    /// When the server offers it; the certificate is not checked.
    Prefer,
    /// Always; the certificate is checked only when `sslrootcert` is given.
    Require,
    /// Always; the certificate must be signed by a trusted root.
    VerifyCa,
    /// Always; the certificate must be signed by a trusted root and name the host.
    VerifyFull,
}

impl SslMode {
    pub(crate) fn parse(value: &str) -> Result<Self, StoreError> {
        Ok(match value {
            "disable" => Self::Disable,
            "allow" | "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            other => {
                return Err(StoreError::Config(format!(
                    "sslmode={other} is not a mode PostgreSQL knows: use disable, prefer, require, verify-ca or \
                     verify-full"
                )));
            }
        })
    }

    /// What the driver is told: it negotiates, our verifier decides what a certificate must be.
    pub(crate) fn driver_mode(self) -> tokio_postgres::config::SslMode {
        match self {
            Self::Disable => tokio_postgres::config::SslMode::Disable,
            Self::Prefer => tokio_postgres::config::SslMode::Prefer,
            Self::Require | Self::VerifyCa | Self::VerifyFull => tokio_postgres::config::SslMode::Require,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }
}

/// The TLS policy of a connection string: its mode, and a connector that checks certificates accordingly.
#[derive(Clone)]
pub(crate) struct Tls {
    mode: SslMode,
    connector: MakeRustlsConnect,
    /// Where the trusted roots came from, for messages.
    roots: Option<String>,
}

impl Tls {
    pub(crate) fn new(mode: SslMode, rootcert: Option<&str>) -> Result<Self, StoreError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (roots, check_name) = match (mode, rootcert) {
            (SslMode::VerifyFull, given) => (Some(trusted_roots(given)?), true),
            (SslMode::VerifyCa, given) => (Some(trusted_roots(given)?), false),
            (SslMode::Require, Some(given)) => (Some(trusted_roots(Some(given))?), false),
            _ => (None, false),
        };
        let chain = match &roots {
            Some((store, _)) => Some(
                WebPkiServerVerifier::builder_with_provider(store.clone(), provider.clone())
                    .build()
                    .map_err(|e| StoreError::Config(format!("sslrootcert: {e}")))?,
            ),
            None => None,
        };
        let verifier = Verifier { chain, check_name, algorithms: provider.signature_verification_algorithms };
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| StoreError::Config(format!("TLS: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        Ok(Self { mode, connector: MakeRustlsConnect::new(config), roots: roots.map(|(_, from)| from) })
    }

    pub(crate) fn mode(&self) -> SslMode {
        self.mode
    }
}

/// The roots `sslrootcert` names (with where they came from), or libpq's default file.
fn trusted_roots(rootcert: Option<&str>) -> Result<(Arc<RootCertStore>, String), StoreError> {
    let mut store = RootCertStore::empty();
    if rootcert == Some("system") {
        let found = rustls_native_certs::load_native_certs();
        let (added, _) = store.add_parsable_certificates(found.certs);
        if added == 0 {
            return Err(StoreError::Config(format!(
                "sslrootcert=system: no trusted roots found in the system's store ({:?}); install the CA \
                 certificates (Debian: ca-certificates) or name a PEM file as sslrootcert",
                found.errors
            )));
        }
        return Ok((Arc::new(store), "the system's trusted roots".into()));
    }
    let path = match rootcert {
        Some(path) => PathBuf::from(path),
        None => {
            let default = std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".postgresql/root.crt"));
            match default.filter(|p| p.exists()) {
                Some(p) => p,
                None => {
                    return Err(StoreError::Config(
                        "sslmode=verify-ca and verify-full check the server's certificate against trusted roots, \
                         but no sslrootcert is given and ~/.postgresql/root.crt does not exist: name the CA's \
                         certificate as sslrootcert=/path/to/ca.pem, or sslrootcert=system for the system's roots"
                            .into(),
                    ));
                }
            }
        }
    };
    let certs = CertificateDer::pem_file_iter(&path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| StoreError::Config(format!("sslrootcert: cannot read {}: {e}", path.display())))?;
    let (added, _) = store.add_parsable_certificates(certs);
    if added == 0 {
        return Err(StoreError::Config(format!(
            "sslrootcert: {} holds no certificate this Worker can use (a PEM file of CA certificates is expected)",
            path.display()
        )));
    }
    Ok((Arc::new(store), path.display().to_string()))
}

/// Checks the server's certificate as the mode asks: not at all, its chain only, or its chain and name. The
/// handshake's signatures are always checked.
#[derive(Debug)]
struct Verifier {
    chain: Option<Arc<WebPkiServerVerifier>>,
    check_name: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else { return Ok(ServerCertVerified::assertion()) };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A driver connection and the task-less connection half that must be polled.
pub(crate) type Connection = tokio_postgres::Connection<
    tokio_postgres::Socket,
    <MakeRustlsConnect as MakeTlsConnect<tokio_postgres::Socket>>::Stream,
>;

impl ConnectTarget {
    /// Connects with the driver alone (the work listener). Under `prefer`, a TLS handshake that fails is
    /// followed by a connection without TLS, as libpq does. Several hosts with a `connect_timeout` are tried one
    /// by one, each attempt bounded as a whole (see [`ConnectTarget::each_host`]).
    pub(crate) async fn connect(&self) -> Result<(tokio_postgres::Client, Connection), StoreError> {
        let mut last = None;
        for (config, limit) in self.each_host() {
            let attempt = self.connect_to(config);
            let answer = match limit {
                None => attempt.await,
                Some(limit) => tokio::time::timeout(limit, attempt).await.unwrap_or_else(|_| {
                    let host = match config.get_hosts().first() {
                        Some(tokio_postgres::config::Host::Tcp(name)) => name.clone(),
                        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
                        None => "the server".into(),
                    };
                    let port = config.get_ports().first().copied().unwrap_or(5432);
                    let said = format!("{host} (port {port}) did not answer within connect_timeout ({limit:?})");
                    Err(StoreError::Unavailable(said.into()))
                }),
            };
            match answer {
                Ok(connected) => return Ok(connected),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| StoreError::Config("the connection string names no host".into())))
    }

    async fn connect_to(
        &self,
        config: &tokio_postgres::Config,
    ) -> Result<(tokio_postgres::Client, Connection), StoreError> {
        match config.connect(self.tls.connector.clone()).await {
            Err(e) if self.tls.mode == SslMode::Prefer && is_tls_failure(&e) => {
                let mut plain = config.clone();
                plain.ssl_mode(tokio_postgres::config::SslMode::Disable);
                plain.connect(self.tls.connector.clone()).await.map_err(|e| self.connect_error(&e))
            }
            other => other.map_err(|e| self.connect_error(&e)),
        }
    }

    /// A diesel connection (pools, migrations).
    pub(crate) async fn establish(&self) -> Result<AsyncPgConnection, StoreError> {
        let (client, connection) = self.connect().await?;
        AsyncPgConnection::try_from_client_and_connection(client, connection)
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string().into()))
    }

    /// A connection error as the operator can act on it: a refused certificate or a server without TLS
    /// under a mode that needs it are settings to fix ([`StoreError::Config`]), the rest is an outage.
    fn connect_error(&self, e: &tokio_postgres::Error) -> StoreError {
        let host = self.config.get_hosts().first().map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        });
        let host = host.unwrap_or_else(|| "localhost".into());
        let mode = self.tls.mode.name();
        let roots = self.tls.roots.as_deref().unwrap_or("the trusted roots");
        match rustls_error(e) {
            Some(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => StoreError::Config(format!(
                "the server's TLS certificate is not issued to {host}, and sslmode={mode} checks the name: connect \
                 with a host name the certificate names (in database.url), or use sslmode=verify-ca to check only \
                 who signed it. The names are read from the certificate's subjectAltName; one that names the host \
                 only in its CN must be reissued with subjectAltName=DNS:{host} ({e})"
            )),
            Some(rustls::Error::InvalidCertificate(CertificateError::Other(other)))
                if other.to_string().contains("CaUsedAsEndEntity") =>
            {
                StoreError::Config(format!(
                    "the server presents a CA certificate as its own (a self-signed certificate made with CA:TRUE, \
                     as `openssl req -x509` does by default): issue the server a certificate signed by that CA, or \
                     use sslmode=require, which does not check certificates ({e})"
                ))
            }
            Some(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)) => StoreError::Config(format!(
                "the server's TLS certificate is not signed by a root in {roots} (sslmode={mode}): name the CA that \
                 signed it as sslrootcert in database.url ({e})"
            )),
            Some(rustls::Error::InvalidCertificate(_)) => StoreError::Config(format!(
                "the server's TLS certificate was refused under sslmode={mode} ({e}): renew or replace it on the \
                 server, or correct sslrootcert"
            )),
            _ if e.to_string().contains("server does not support TLS") => StoreError::Config(format!(
                "the server at {host} does not accept TLS connections, but sslmode={mode} requires them: turn \
                 ssl on in the server's postgresql.conf, or set sslmode=prefer or disable in database.url"
            )),
            _ => self.refused_login(e).unwrap_or_else(|| StoreError::Unavailable(e.to_string().into())),
        }
    }

    /// A login the server refused for a setting to fix, told by its SQLSTATE (never its words, which follow the
    /// server's language): a wrong password or a role that may not log in, a database that does not exist, a
    /// role without the CONNECT privilege. Retrying cannot help, so these are not outages: an outage sends work
    /// back to the queue without counting a failure, and a Worker with a wrong password would do that forever.
    /// A server out of connections (53300) stays an outage: it passes.
    fn refused_login(&self, e: &tokio_postgres::Error) -> Option<StoreError> {
        use tokio_postgres::error::SqlState;
        let user = self.config.get_user().unwrap_or("the user");
        let database = self.config.get_dbname().unwrap_or("the database");
        let code = e.code()?;
        Some(if *code == SqlState::INVALID_PASSWORD || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION {
            StoreError::Config(format!(
                "PostgreSQL refused the login of {user}: check the user and password in database.url, and that the                  role may log in and pg_hba.conf admits it ({e})"
            ))
        } else if *code == SqlState::UNDEFINED_DATABASE {
            StoreError::Config(format!(
                "the database {database} named in database.url does not exist: create it (createdb) or correct the                  URL ({e})"
            ))
        } else if *code == SqlState::INSUFFICIENT_PRIVILEGE {
            StoreError::Config(format!(
                "{user} may not connect to {database}: GRANT CONNECT ON DATABASE {database} TO {user} ({e})"
            ))
        } else {
            return None;
        })
    }
}

/// Whether a connection failed in its TLS handshake (not in reaching the server or logging in).
fn is_tls_failure(e: &tokio_postgres::Error) -> bool {
    rustls_error(e).is_some() || e.to_string().contains("TLS")
}

/// The rustls error behind a connection error, if the handshake failed.
fn rustls_error(e: &tokio_postgres::Error) -> Option<&rustls::Error> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(found) = s.downcast_ref::<rustls::Error>() {
            return Some(found);
        }
        // An I/O error hides what it wraps from `source()`.
        if let Some(found) = s.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()?.downcast_ref()) {
            return Some(found);
        }
        source = s.source();
    }
    None
}
