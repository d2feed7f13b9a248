//! A private PostgreSQL cluster built from the machine's own server binaries, and a fresh database per test.
//!
//! No Docker, no download: `initdb` and `pg_ctl` from `pg_config --bindir` (or `ALMANAC_PG_BINDIR`), a data
//! directory under the system temp folder (or `ALMANAC_PG_DIR`), a Unix socket only (no TCP port to clash
//! with). Run as root, every server command runs as the `postgres` OS user, because PostgreSQL refuses root.
//!
//! Tests call [`TestDatabase::create`]: it starts the cluster if needed (a file lock makes concurrent test
//! processes share one), migrates a template database once per set of migrations, and clones a fresh database
//! from it (`CREATE DATABASE … TEMPLATE … STRATEGY FILE_COPY`, about 70 ms). `TEST_DATABASE_URL` (or
//! `DATABASE_URL`) points the tests at a server of your own instead; the template and clones are then made there.
//! With feature `docker` and `ALMANAC_TEST_DOCKER=1`, that server is a reused container (testcontainers'
//! PostgreSQL module; see `docker.rs`).

mod cluster;
#[cfg(feature = "docker")]
mod docker;
pub mod logs;
pub mod patience;
mod pgbouncer;
mod standby;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

pub use cluster::{Cluster, ClusterError};
pub use patience::{Deadline, patience};
pub use pgbouncer::PgBouncer;
pub use standby::{Replication, STANDBY_NAME, StandbyPair};

/// Connection URL of the server tests use: `TEST_DATABASE_URL`, else `DATABASE_URL`, else the private cluster
/// (started on first use). The database part names the maintenance database (`postgres`).
pub fn server_url() -> Result<String, ClusterError> {
    static URL: OnceLock<Result<String, ClusterError>> = OnceLock::new();
    URL.get_or_init(|| {
        if let Some(url) = ["TEST_DATABASE_URL", "DATABASE_URL"].iter().find_map(|v| std::env::var(v).ok()) {
            return Ok(url);
        }
        #[cfg(feature = "docker")]
        if std::env::var("ALMANAC_TEST_DOCKER").is_ok_and(|v| v == "1") {
            return docker::start();
        }
        let cluster = Cluster::private()?;
        cluster.ensure_running()?;
        Ok(cluster.url("postgres"))
    })
    .clone()
}

/// The workspace's `migrations/` folder.
pub fn migrations_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../migrations")
}

/// A database of its own for one test, cloned from the migrated template; dropped when this value is.
#[derive(Debug)]
pub struct TestDatabase {
    server_url: String,
    name: String,
    url: String,
}

impl TestDatabase {
    /// Creates a fresh, migrated database. Panics with the reason when the server cannot be had, since a test
    /// cannot do anything useful without it.
    pub async fn create() -> Self {
        Self::try_create().await.unwrap_or_else(|e| panic!("no test database: {e}"))
    }

    /// Creates a fresh, migrated database.
    pub async fn try_create() -> Result<Self, ClusterError> {
        let server_url = server_url()?;
        let template = template(&server_url)?;
        Self::from_template(server_url, &template).await
    }

    /// Creates a fresh database without the schema, as a new installation finds it (dropped like the others).
    pub async fn create_empty() -> Self {
        Self::create_empty_from("template0").await
    }

    /// Creates a fresh database without the schema whose text is in `encoding` (as PostgreSQL names it: `LATIN1`,
    /// `SQL_ASCII`, …), with the C locale, which takes every encoding: a database made under another locale, or by
    /// another installer, than the tests' cluster.
    pub async fn create_empty_in(encoding: &str) -> Self {
        Self::create_empty_from(&format!("template0 ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C'")).await
    }

    /// A new database copied from `template` (with its options), panicking with the reason when it cannot be made.
    async fn create_empty_from(template: &str) -> Self {
        let made = match server_url() {
            Ok(server_url) => Self::from_template(server_url, template).await,
            Err(e) => Err(e),
        };
        made.unwrap_or_else(|e| panic!("no test database ({template}): {e}"))
    }

    /// A new database copied from `template` (its name, possibly followed by more options of `CREATE DATABASE`).
    async fn from_template(server_url: String, template: &str) -> Result<Self, ClusterError> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "almanac_test_{}_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos())
        );
        let client = cluster::connect(&server_url).await?;
        client
            .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY"))
            .await
            .map_err(|e| ClusterError::Sql(format!("creating {name}: {e}")))?;
        let url = cluster::with_database(&server_url, &name);
        Ok(Self { server_url, name, url })
    }

    /// The database's connection URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's URL with the test's own login acting as `role` for the whole session (`SET ROLE` at
    /// connection), so a test sees what a role with fewer rights gets without a password or authentication rule
    /// for it. The login must be a member of `role` (`GRANT role TO CURRENT_USER`).
    pub fn url_acting_as(&self, role: &str) -> String {
        let separator = if self.url.contains('?') { '&' } else { '?' };
        format!("{}{separator}options=-c%20role%3D{role}", self.url)
    }

    /// Waits until `n` other sessions of this database wait on a lock (or, when they never do, until the
    /// [`patience`] for two seconds has passed), and returns how many do. Tests use it to force an overlap: a
    /// statement let go only once it is blocked behind a transaction the test holds.
    pub async fn sessions_waiting_on_locks(&self, n: i64) -> i64 {
        let client = cluster::connect(&self.url).await.unwrap_or_else(|e| panic!("watching for lock waits: {e}"));
        let deadline = Deadline::after(std::time::Duration::from_secs(2));
        loop {
            let waiting = sessions_waiting(&client).await;
            if waiting == n || deadline.passed() {
                return waiting;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
    }

    /// Whether `task` finishes before any other session of this database waits on a lock. The event a test of
    /// "never waits" watches for: a statement that waited behind a transaction the test holds would not finish
    /// until the test lets go, so neither a fast nor a slow machine can make the answer wrong. Panics when
    /// neither happens within the [`patience`] for five seconds.
    pub async fn finishes_without_waiting<T>(&self, task: &tokio::task::JoinHandle<T>) -> bool {
        let client = cluster::connect(&self.url).await.unwrap_or_else(|e| panic!("watching for lock waits: {e}"));
        let deadline = Deadline::after(std::time::Duration::from_secs(5));
        loop {
            if task.is_finished() {
                return true;
            }
            let waiting = sessions_waiting(&client).await;
            // Read after the count: a task that finished meanwhile finished first.
            if task.is_finished() {
                return true;
            }
            if waiting > 0 {
                return false;
            }
            deadline.check("the task to finish or a session to wait on a lock");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// How many sessions of `client`'s database other than its own wait on a lock now.
async fn sessions_waiting(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("watching for lock waits: {e}"))
        .get::<_, i64>(0)
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let (server_url, name) = (self.server_url.clone(), self.name.clone());
        // A test's runtime may be gone or single-threaded: drop the database from a thread of its own.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            runtime.block_on(async {
                let client = cluster::connect(&server_url).await.ok()?;
                client.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await.ok()
            })
        })
        .join();
    }
}

/// The migrated template's name, creating it once per process (and, through an advisory lock, once across
/// processes) whenever the migrations changed.
fn template(server_url: &str) -> Result<String, ClusterError> {
    static TEMPLATE: OnceLock<Result<String, ClusterError>> = OnceLock::new();
    TEMPLATE
        .get_or_init(|| {
            let server_url = server_url.to_owned();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| ClusterError::Io(format!("starting a runtime: {e}")))?;
                runtime.block_on(cluster::ensure_template(&server_url, &migrations_dir()))
            })
            .join()
            .unwrap_or_else(|_| Err(ClusterError::Sql("creating the template panicked".into())))
        })
        .clone()
}
