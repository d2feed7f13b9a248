//! PostgreSQL adapters for Almanac Worker's ports: the durable work queue ([`PgStore`] implements
//! [`almanac_domain::WorkQueue`]) and the catalogue's storage configs.
//!
//! **Architecture invariant:** all of the project's SQL lives in this crate. Database errors are mapped to the
//! ports' errors in one place ([`error`]), by constraint or index name where the rules depend on it.
//!
//! Connects through diesel-async and tokio-postgres (no libpq). Migrations are embedded; run them with
//! [`migrate`].

mod catalogue;
mod catalogue_store;
mod error;
mod fence;
mod listener;
mod maintenance_store;
mod migrations;
mod queue;

use std::time::Duration;

use diesel_async::AsyncPgConnection;
use diesel_async::pooled_connection::deadpool::{Object, Pool};
use diesel_async::pooled_connection::{AsyncDieselConnectionManager, ManagerConfig};
use diesel_async::{AsyncConnection, SimpleAsyncConnection};

pub use catalogue::{Memory, NewStorageConfig, RootOverlap};
pub use error::StoreError;
pub use listener::{WORK_CHANNEL, listen_for_work};
pub use migrations::{migrate, pending_migrations};
pub use queue::{QueueSummaryRow, claim_with};

/// The PostgreSQL store: a pool of connections and the statements of the work queue and the catalogue.
/// Cheap to clone; clones share the pools.
///
/// A Worker's store also has connections reserved for its attempts' own queue writes (heartbeats, outcomes),
/// which nothing else can take: a crawl's many files or a flood of probes cannot starve a heartbeat into a
/// self-stop (safety invariant 7).
#[derive(Clone)]
pub struct PgStore {
    pool: Pool<AsyncPgConnection>,
    attempts: Option<Pool<AsyncPgConnection>>,
}

/// How a Worker's store connects (see [`PgStore::for_worker`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerConnections {
    /// Connections shared by claims, recovery, the scheduler and the handlers' catalogue statements.
    pub shared: usize,
    /// Connections only heartbeats and outcome writes use (one per slot, and one to spare).
    pub reserved: usize,
    /// How long a request waits for a connection before it fails as unavailable.
    pub acquire_timeout: Duration,
    /// The lease: transactions left idle longer are ended by the server, and statements are limited to half
    /// of it, so nothing of ours holds a lock past the point where lease recovery must run.
    pub lease: Duration,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("pool", &self.pool.status()).finish()
    }
}

impl PgStore {
    /// A store over a pool of at most `max_connections` connections to `database_url`. Connections are made
    /// lazily; a request that cannot get one within `acquire_timeout` fails as unavailable.
    pub fn new(database_url: &str, max_connections: usize, acquire_timeout: Duration) -> Result<Self, StoreError> {
        Self::with_idle_transaction_limit(database_url, max_connections, acquire_timeout, Duration::from_secs(60))
    }

    /// A Worker's store: a shared pool, and a pool reserved for its attempts' heartbeats and outcomes.
    pub fn for_worker(database_url: &str, connections: WorkerConnections) -> Result<Self, StoreError> {
        let WorkerConnections { shared, reserved, acquire_timeout, lease } = connections;
        Ok(Self {
            pool: pool(database_url, shared, acquire_timeout, lease)?,
            attempts: Some(pool(database_url, reserved, acquire_timeout, lease)?),
        })
    }

    /// As [`PgStore::new`], and the server ends any transaction of ours left idle longer than `idle_limit`
    /// (`idle_in_transaction_session_timeout`). A Worker cut off from the database mid-transaction would
    /// otherwise leave its locks held until the server notices the dead peer, which can take hours and blocks
    /// the Worker that recovers its work. The Worker sets it to its lease.
    pub fn with_idle_transaction_limit(
        database_url: &str,
        max_connections: usize,
        acquire_timeout: Duration,
        idle_limit: Duration,
    ) -> Result<Self, StoreError> {
        Ok(Self { pool: pool(database_url, max_connections, acquire_timeout, idle_limit)?, attempts: None })
    }

    /// A store with ten connections and a ten-second acquire timeout.
    pub fn connect(database_url: &str) -> Result<Self, StoreError> {
        Self::new(database_url, 10, Duration::from_secs(10))
    }

    pub(crate) async fn conn(&self) -> Result<Object<AsyncPgConnection>, StoreError> {
        self.pool.get().await.map_err(error::from_pool)
    }

    /// A connection for an attempt's own queue writes: from the reserved pool when there is one.
    pub(crate) async fn attempt_conn(&self) -> Result<Object<AsyncPgConnection>, StoreError> {
        self.attempts.as_ref().unwrap_or(&self.pool).get().await.map_err(error::from_pool)
    }
}

/// A pool whose connections end transactions left idle, and statements running, longer than half of `limit`
/// (the lease), and whose TCP connections send keepalives after 30 s of silence (so a dead peer is noticed in
/// about a minute rather than hours). An attempt's last statement comes at most half a lease after its last
/// good heartbeat (then it self-stops), so whatever it left open ends by the time its lease expires.
fn pool(
    database_url: &str,
    max_connections: usize,
    acquire_timeout: Duration,
    limit: Duration,
) -> Result<Pool<AsyncPgConnection>, StoreError> {
    let idle = (limit.as_millis() / 2).max(1);
    let statement = idle;
    let mut config = ManagerConfig::<AsyncPgConnection>::default();
    config.custom_setup = Box::new(move |url| {
        let url = with_keepalives(url);
        Box::pin(async move {
            let mut conn = AsyncPgConnection::establish(&url).await?;
            let settings =
                format!("SET idle_in_transaction_session_timeout = {idle}; SET statement_timeout = {statement}");
            conn.batch_execute(&settings).await.map_err(diesel::ConnectionError::CouldntSetupConfiguration)?;
            Ok(conn)
        })
    });
    let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new_with_config(database_url, config);
    Pool::builder(manager)
        .max_size(max_connections.max(1))
        .runtime(deadpool::Runtime::Tokio1)
        .wait_timeout(Some(acquire_timeout))
        .create_timeout(Some(acquire_timeout))
        .recycle_timeout(Some(acquire_timeout))
        .build()
        .map_err(|e| StoreError::Config(format!("building the connection pool: {e}")))
}

/// Adds a TCP keepalive setting to a connection string that has none (URL or key=value form).
fn with_keepalives(url: &str) -> String {
    if url.contains("keepalives") {
        url.to_owned()
    } else if url.contains("://") {
        let separator = if url.contains('?') { "&" } else { "?" };
        format!("{url}{separator}keepalives_idle=30")
    } else {
        format!("{url} keepalives_idle=30")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keepalives_are_added_to_every_form_of_connection_string_once() {
        assert_eq!(with_keepalives("postgres://u@h/db"), "postgres://u@h/db?keepalives_idle=30");
        assert_eq!(with_keepalives("postgres://u@h/db?host=/s"), "postgres://u@h/db?host=/s&keepalives_idle=30");
        assert_eq!(with_keepalives("host=h dbname=d"), "host=h dbname=d keepalives_idle=30");
        assert_eq!(with_keepalives("postgres://h/d?keepalives_idle=5"), "postgres://h/d?keepalives_idle=5");
    }
}
