//! A private PgBouncer in transaction mode in front of the tests' server (issue #26, ADR 0012): the machine's
//! own `pgbouncer` (Debian's package; `ALMANAC_PGBOUNCER` names another binary), one per test, on a free
//! loopback port, gone when the value is dropped.
//!
//! It takes any user name without a password (`auth_type = any`) and logs in to the server as the user of the
//! server's URL, so every database of the server is reachable through it by name: a test's own database gets a
//! pool of [`PgBouncer::start`]'s `pool_size` server connections of its own. Run as root, it runs as the
//! `postgres` OS user (PgBouncer refuses root, as PostgreSQL does).

use std::fs;
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::cluster::{free_port, postgres_gid, postgres_uid, running_as_root};
use crate::{ClusterError, Deadline, TestDatabase, server_url};

/// A PgBouncer of this test's, in transaction mode; stopped when dropped.
#[derive(Debug)]
pub struct PgBouncer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl PgBouncer {
    /// Starts one in front of the tests' server ([`server_url`]), in transaction mode, with at most `pool_size`
    /// server connections per database, and waits until it takes connections.
    pub fn start(pool_size: u32) -> Result<Self, ClusterError> {
        Self::started(pool_size, false)
    }

    /// As [`PgBouncer::start`], and each server session is reset (`DISCARD ALL`) whenever a client's transaction
    /// lets it go (`server_reset_query_always`), as a pooler shared with other applications may be set up:
    /// nothing a client leaves on a server session, a named prepared statement included, outlives its
    /// transaction, even on the one server session there is.
    pub fn start_resetting(pool_size: u32) -> Result<Self, ClusterError> {
        Self::started(pool_size, true)
    }

    fn started(pool_size: u32, reset_always: bool) -> Result<Self, ClusterError> {
        let server = server_url()?;
        let config: tokio_postgres::Config =
            server.parse().map_err(|e| ClusterError::Sql(format!("reading the server's URL: {e}")))?;
        let dir = private_dir()?;
        // A port found free can be taken by someone else before PgBouncer binds it: try a few.
        let mut last = String::new();
        for _ in 0..3 {
            let port = free_port()?;
            let ini = dir.join("pgbouncer.ini");
            write_readable(&ini, &settings(&config, port, pool_size, reset_always))?;
            let log = dir.join("pgbouncer.log");
            let mut child = spawn(&ini, &log)?;
            match wait_until_listening(&mut child, port, &log) {
                Ok(()) => return Ok(Self { child, port, dir }),
                Err(e) => {
                    last = e.to_string();
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
        let _ = fs::remove_dir_all(&dir);
        Err(ClusterError::Command { command: "pgbouncer".into(), output: last })
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL for `database` through it (any user name is taken; none is needed).
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}?sslmode=disable", self.port)
    }

    /// The URL of the test database `db` through it.
    pub fn url_of(&self, db: &TestDatabase) -> String {
        self.url(db.name())
    }

    /// What it has logged so far (connections, errors), for a failing test's message.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Waits until the PgBouncer `child` takes connections on `port`.
fn wait_until_listening(child: &mut Child, port: u16, log: &Path) -> Result<(), ClusterError> {
    let deadline = Deadline::after(Duration::from_secs(2));
    let failed = |what: String| ClusterError::Command {
        command: "pgbouncer".into(),
        output: format!("{what}:\n{}", fs::read_to_string(log).unwrap_or_default()),
    };
    loop {
        if let Some(status) = child.try_wait().map_err(|e| ClusterError::Io(e.to_string()))? {
            return Err(failed(format!("exited ({status}) before taking connections")));
        }
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        if deadline.passed() {
            return Err(failed(format!("took no connection on port {port} in time")));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `pgbouncer.ini`: every database of the server by name (`*`), logged in as the server URL's user; server
/// sessions reset after every transaction when `reset_always`.
fn settings(server: &tokio_postgres::Config, port: u16, pool_size: u32, reset_always: bool) -> String {
    use tokio_postgres::config::Host;
    // The private cluster's URL names a socket folder beside a placeholder host name: the socket wins.
    let hosts = server.get_hosts();
    let socket = hosts.iter().find_map(|h| match h {
        Host::Unix(path) => Some(path.display().to_string()),
        Host::Tcp(_) => None,
    });
    let host = socket.or_else(|| {
        hosts.iter().find_map(|h| match h {
            Host::Tcp(name) => Some(name.clone()),
            Host::Unix(_) => None,
        })
    });
    let host = host.unwrap_or_else(|| "localhost".into());
    let server_port = server.get_ports().first().copied().unwrap_or(5432);
    let user = server.get_user().unwrap_or("postgres");
    let password = server
        .get_password()
        .map(|p| format!(" password='{}'", String::from_utf8_lossy(p).replace('\\', "\\\\").replace('\'', "\\'")))
        .unwrap_or_default();
    format!(
        "[databases]\n\
         * = host={host} port={server_port} user={user}{password}\n\
         \n\
         [pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {port}\n\
         unix_socket_dir =\n\
         auth_type = any\n\
         pool_mode = transaction\n\
         default_pool_size = {pool_size}\n\
         min_pool_size = 0\n\
         reserve_pool_size = 0\n\
         max_client_conn = 1000\n\
         server_idle_timeout = 10\n\
         server_reset_query = DISCARD ALL\n\
         server_reset_query_always = {reset}\n\
         logfile =\n\
         pidfile =\n",
        reset = u8::from(reset_always),
    )
}

/// PgBouncer in the foreground, as `postgres` when we are root, its log (standard error) in `log`.
fn spawn(ini: &Path, log: &Path) -> Result<Child, ClusterError> {
    let program =
        std::env::var_os("ALMANAC_PGBOUNCER").map_or_else(|| PathBuf::from("/usr/sbin/pgbouncer"), PathBuf::from);
    let log_file = fs::File::create(log).map_err(|e| ClusterError::Io(format!("creating {}: {e}", log.display())))?;
    let mut command = Command::new(&program);
    command.arg(ini).stdin(Stdio::null()).stdout(Stdio::null()).stderr(log_file);
    crate::cluster::inherit_no_descriptors(&mut command);
    if running_as_root() {
        command.uid(postgres_uid()?).gid(postgres_gid()?);
    }
    command.spawn().map_err(|e| {
        ClusterError::NoBinaries(format!(
            "cannot run {} ({e}): install it (Debian: `apt-get install -y pgbouncer`, or `cargo xtask deps`) or set \
             ALMANAC_PGBOUNCER to its path",
            program.display()
        ))
    })
}

/// A folder of its own under the system temp folder, readable by the `postgres` OS user.
fn private_dir() -> Result<PathBuf, ClusterError> {
    use std::os::unix::fs::PermissionsExt;
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "almanac-pgbouncer-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).map_err(|e| ClusterError::Io(format!("creating {}: {e}", dir.display())))?;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))
        .map_err(|e| ClusterError::Io(format!("setting the mode of {}: {e}", dir.display())))?;
    Ok(dir)
}

fn write_readable(path: &Path, text: &str) -> Result<(), ClusterError> {
    use std::os::unix::fs::PermissionsExt;
    fs::write(path, text).map_err(|e| ClusterError::Io(format!("writing {}: {e}", path.display())))?;
    // It may hold the server's password: readable by PgBouncer's user alone.
    if running_as_root() {
        std::os::unix::fs::chown(path, Some(postgres_uid()?), None)
            .map_err(|e| ClusterError::Io(format!("handing {} to postgres: {e}", path.display())))?;
    }
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        .map_err(|e| ClusterError::Io(format!("setting the mode of {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn connect(url: &str) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        client
    }

    /// The first column of the first row of `sql`, as a simple query.
    async fn first(client: &tokio_postgres::Client, sql: &str) -> String {
        let messages = client.simple_query(sql).await.unwrap();
        messages
            .iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
                _ => None,
            })
            .unwrap()
    }

    /// One started for a test takes connections to the test's database on its port, logs each login, keeps its
    /// files in a folder of its own under the temp folder, and is gone, folder and port, once dropped.
    #[tokio::test]
    async fn it_serves_the_tests_database_on_its_port_and_is_gone_once_dropped() {
        let db = TestDatabase::create().await;
        let bouncer = PgBouncer::start(1).unwrap();
        let url = bouncer.url_of(&db);
        assert_eq!(url, bouncer.url(db.name()));
        assert!(url.contains(&format!("@127.0.0.1:{}/{}?", bouncer.port(), db.name())), "{url}");
        let client = connect(&url).await;
        assert_eq!(first(&client, "SELECT current_database()").await, db.name());
        assert!(bouncer.log().contains("login attempt"), "{}", bouncer.log());
        let (dir, port) = (bouncer.dir.clone(), bouncer.port());
        assert!(dir.starts_with(std::env::temp_dir()) && dir.join("pgbouncer.ini").is_file(), "{}", dir.display());
        drop(client);
        drop(bouncer);
        assert!(!dir.exists(), "{} left behind", dir.display());
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err(), "port {port} still taken");
    }

    /// Server sessions are shared by transaction: a statement one transaction prepares stays on the session for
    /// the next, unless the PgBouncer resets its sessions after every transaction.
    #[tokio::test]
    async fn a_resetting_one_keeps_nothing_of_a_transaction_on_its_session() {
        let db = TestDatabase::create().await;
        for (bouncer, kept) in [(PgBouncer::start(1).unwrap(), "1"), (PgBouncer::start_resetting(1).unwrap(), "0")] {
            let client = connect(&bouncer.url_of(&db)).await;
            client.simple_query("PREPARE left_behind AS SELECT 1").await.unwrap();
            let found = first(&client, "SELECT count(*) FROM pg_prepared_statements WHERE name = 'left_behind'").await;
            assert_eq!(found, kept, "{}", bouncer.log());
        }
    }
}
