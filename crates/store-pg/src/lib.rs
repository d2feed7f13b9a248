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
/// Cheap to clone; clones share the pool.
#[derive(Clone)]
pub struct PgStore {
    pool: Pool<AsyncPgConnection>,
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
        let millis = idle_limit.as_millis().max(1);
        let mut config = ManagerConfig::<AsyncPgConnection>::default();
        config.custom_setup = Box::new(move |url| {
            let url = url.to_owned();
            Box::pin(async move {
                let mut conn = AsyncPgConnection::establish(&url).await?;
                conn.batch_execute(&format!("SET idle_in_transaction_session_timeout = {millis}"))
                    .await
                    .map_err(diesel::ConnectionError::CouldntSetupConfiguration)?;
                Ok(conn)
            })
        });
        let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new_with_config(database_url, config);
        let pool = Pool::builder(manager)
            .max_size(max_connections.max(1))
            .runtime(deadpool::Runtime::Tokio1)
            .wait_timeout(Some(acquire_timeout))
            .create_timeout(Some(acquire_timeout))
            .recycle_timeout(Some(acquire_timeout))
            .build()
            .map_err(|e| StoreError::Config(format!("building the connection pool: {e}")))?;
        Ok(Self { pool })
    }

    /// A store with ten connections and a ten-second acquire timeout.
    pub fn connect(database_url: &str) -> Result<Self, StoreError> {
        Self::new(database_url, 10, Duration::from_secs(10))
    }

    pub(crate) async fn conn(&self) -> Result<Object<AsyncPgConnection>, StoreError> {
        self.pool.get().await.map_err(error::from_pool)
    }
}
