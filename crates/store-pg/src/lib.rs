//! PostgreSQL adapters for Almanac Worker's ports: the durable work queue ([`PgStore`] implements
//! [`almanac_domain::WorkQueue`]) and the catalogue's storage configs.
//!
//! **Architecture invariant:** all of the project's SQL lives in this crate. Database errors are mapped to the
//! ports' errors in one place ([`error`]), by constraint or index name where the rules depend on it.
//!
//! Connects through diesel-async and tokio-postgres (no libpq), with TLS by rustls as `sslmode` and
//! `sslrootcert` in the connection string ask ([`ConnectTarget`]). Migrations are embedded; run them with
//! [`migrate`].

mod catalogue;
mod catalogue_store;
mod conninfo;
mod error;
mod listener;
mod maintenance_store;
mod migrations;
mod operator;
mod pool;
mod pooler;
mod prepared;
mod queue;
mod queue_admin;
mod storable;
mod tls;
mod tx;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use diesel_async::AsyncPgConnection;
use diesel_async::pooled_connection::deadpool::Pool;
use diesel_async::pooled_connection::{AsyncDieselConnectionManager, ManagerConfig};
use tokio_util::task::TaskTracker;

use crate::pool::{Checked, ConnPool, Pooled};
use crate::pooler::Limits;

pub use catalogue::{Memory, NewStorageConfig, RootOverlap};
pub use conninfo::{ConnectTarget, mask_password};

/// What [`mask_password`] shows of a connection string it cannot read.
pub fn conninfo_hidden() -> &'static str {
    conninfo::HIDDEN
}
pub use error::StoreError;
pub use listener::{WORK_CHANNEL, listen_for_work};
pub use migrations::{SchemaState, migrate, migration_names, migrations_digest, pending_migrations, schema_state};
pub use operator::{ConfigOverview, HourlyOutcome};
pub use pooler::PoolerMode;
/// A statement prepared once per connection, as the store runs its own: for benchmarks that measure a statement
/// of theirs on the store's terms (feature `test-support`).
#[cfg(feature = "test-support")]
pub use prepared::{Bind, Prepared};
#[cfg(feature = "test-support")]
pub use queue::{claim_binds, claim_with, configs_taken};
/// How recently a pooled connection must have been used to be handed out without a check (for tests that wait
/// it out).
#[cfg(feature = "test-support")]
pub const UNCHECKED_WITHIN: std::time::Duration = pool::Checked::RECENT;
pub use queue::{enqueue_in, request_cancel_in};
pub use queue_admin::{ItemFilter, QueueSummaryRow};
pub use tls::SslMode;

/// The PostgreSQL store: a pool of connections and the statements of the work queue and the catalogue.
/// Cheap to clone; clones share the pools.
///
/// A Worker's store also has connections reserved for its attempts' own queue writes (heartbeats, outcomes),
/// which nothing else can take: a crawl's many files or a flood of probes cannot starve a heartbeat into a
/// self-stop (docs/safety.md, invariant 7).
#[derive(Clone)]
pub struct PgStore {
    pool: ConnPool,
    attempts: Option<ConnPool>,
    /// How a transaction is opened on this store's connections: a plain `BEGIN` (`None`: session mode, the
    /// limits and the isolation set once per session), or a `BEGIN` of its own, which then opens every statement's
    /// transaction, reads and single statements too: with the isolation and the limits for that transaction only
    /// (transaction mode), or with the isolation only (a pool of the caller's, whose sessions are not ours to set).
    begin: Option<Arc<str>>,
    /// The hand-backs of claims given up on, still running (see [`PgStore::hand_backs_settled`]).
    hand_backs: TaskTracker,
    /// The items claimed since this store last vacuumed the heads (`queue::upkeep`), shared by its clones.
    heads: Arc<queue::HeadsUpkeep>,
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
        f.debug_struct("PgStore")
            .field("pool", &self.pool.status())
            .field("begin", &self.begin.as_deref().unwrap_or("BEGIN"))
            .finish()
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
        Self::for_worker_in_mode(database_url, connections, PoolerMode::Session)
    }

    /// As [`PgStore::for_worker`], its connections reaching PostgreSQL through a pooler of `mode`.
    pub fn for_worker_in_mode(
        database_url: &str,
        connections: WorkerConnections,
        mode: PoolerMode,
    ) -> Result<Self, StoreError> {
        let WorkerConnections { shared, reserved, acquire_timeout, lease } = connections;
        // An attempt's last statement comes at most half a lease after its last good heartbeat (then it
        // self-stops): a transaction it left open ends by the time its lease expires. A statement gets a
        // whole lease: while one holds the item's row, recovery passes the item over.
        let limits = Limits { idle: lease / 2, statement: Some(lease), check_client: true };
        // Heartbeats and outcomes go on without us: a completion given up on commits (ADR 0008).
        let outcomes = Limits { check_client: false, ..limits };
        Ok(Self {
            pool: pool(database_url, shared, acquire_timeout, limits, mode)?,
            attempts: Some(pool(database_url, reserved, acquire_timeout, outcomes, mode)?),
            begin: begin(limits, mode),
            hand_backs: TaskTracker::new(),
            heads: Arc::default(),
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
        Self::in_mode(database_url, max_connections, acquire_timeout, idle_limit, PoolerMode::Session)
    }

    /// As [`PgStore::with_idle_transaction_limit`], its connections reaching PostgreSQL through a pooler of
    /// `mode`.
    pub fn in_mode(
        database_url: &str,
        max_connections: usize,
        acquire_timeout: Duration,
        idle_limit: Duration,
        mode: PoolerMode,
    ) -> Result<Self, StoreError> {
        let limits = Limits { idle: idle_limit, statement: None, check_client: true };
        Ok(Self {
            pool: pool(database_url, max_connections, acquire_timeout, limits, mode)?,
            attempts: None,
            begin: begin(limits, mode),
            hand_backs: TaskTracker::new(),
            heads: Arc::default(),
        })
    }

    /// A store over a pool of the caller's (the web backend's own diesel-async deadpool): the backend's
    /// connections serve the queue and catalogue statements too. Its connection settings are the caller's (see
    /// [`PgStore::with_idle_transaction_limit`] for the idle-transaction limit a store of ours sets), except the
    /// isolation: the store sets none on the caller's sessions, and runs each of its statements in a transaction
    /// it begins at READ COMMITTED, which the queue's rules need whatever the database defaults to (see
    /// `pooler::ISOLATION`). A statement the caller runs in a transaction of its own (`enqueue_in`) runs at the
    /// caller's isolation.
    pub fn from_pool(pool: Pool<AsyncPgConnection>) -> Self {
        Self {
            pool: ConnPool::Theirs(pool),
            attempts: None,
            begin: Some(pooler::begin_at_isolation().into()),
            hand_backs: TaskTracker::new(),
            heads: Arc::default(),
        }
    }

    /// Waits, at most `within`, until the hand-back of every claim given up on so far has ended (ADR 0008,
    /// amendment "a claim given up on is handed back"): for a process about to stop, which would otherwise cut them
    /// short and leave their items to their lease. A hand-back waits for its claim, which may wait on a lock, hence
    /// the bound; past it, says so (`claim_hand_back_failed`) and answers false.
    pub async fn hand_backs_settled(&self, within: Duration) -> bool {
        // Closed for good: a closed tracker still tracks what is spawned on it, and `wait` ends each time it is
        // empty.
        self.hand_backs.close();
        let settled = tokio::time::timeout(within, self.hand_backs.wait()).await.is_ok();
        if !settled {
            queue::hand_back_failed(&"the store stopped waiting for it");
        }
        settled
    }

    /// This store vacuums `queue_heads` after every `claims` items it claims instead of the shipped count
    /// (`queue::upkeep`): for tests that force a vacuum with few claims. For tests only (feature `test-support`).
    #[cfg(any(test, feature = "test-support"))]
    pub fn vacuuming_heads_every(mut self, claims: u64) -> Self {
        self.heads = Arc::new(queue::HeadsUpkeep::every(claims));
        self
    }

    /// A store with ten connections and a ten-second acquire timeout.
    pub fn connect(database_url: &str) -> Result<Self, StoreError> {
        Self::new(database_url, 10, Duration::from_secs(10))
    }

    /// How this store's connections are protected, as the server sees one of them: the TLS version and cipher
    /// (`TLSv1.3 TLS_AES_256_GCM_SHA384`), or `None` for a connection without TLS (a Unix socket, or
    /// `sslmode=disable`/`prefer` against a server without TLS).
    pub async fn tls_in_use(&self) -> Result<Option<String>, StoreError> {
        #[derive(diesel::QueryableByName)]
        struct Ssl {
            #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
            described: Option<String>,
        }
        use diesel_async::RunQueryDsl;
        let row: Ssl = self
            .read(async |conn| {
                diesel::sql_query(
                    "SELECT CASE WHEN ssl THEN version || ' ' || cipher END AS described FROM pg_stat_ssl \
                     WHERE pid = pg_backend_pid()",
                )
                .get_result(conn)
                .await
            })
            .await?;
        Ok(row.described)
    }

    pub(crate) async fn conn(&self) -> Result<Conn, StoreError> {
        let pooled = self.pool.get().await.map_err(error::from_pool)?;
        Ok(Conn { pooled: Some(pooled), begin: self.begin.clone() })
    }

    /// A connection for an attempt's own queue writes: from the reserved pool when there is one.
    pub(crate) async fn attempt_conn(&self) -> Result<Conn, StoreError> {
        let pooled = self.attempts.as_ref().unwrap_or(&self.pool).get().await.map_err(error::from_pool)?;
        Ok(Conn { pooled: Some(pooled), begin: self.begin.clone() })
    }
}

/// A pooled connection that never goes back to the pool inside a transaction. When the future using it is
/// dropped mid-transaction (a heartbeat past its time limit, a claim or recovery cut short), the connection is
/// closed instead, so the server rolls back at once and releases the row locks. Returned to the pool, it would
/// sit idle with its transaction open (holding, say, the item's row against the next heartbeat) until taken
/// again or ended by the idle timeout.
///
/// It knows how its store opens a transaction (`begin`: see [`PgStore`]), so [`tx`] opens each as its pool's
/// mode needs.
pub(crate) struct Conn {
    pooled: Option<Pooled>,
    begin: Option<Arc<str>>,
}

impl Conn {
    /// What opens a transaction on it when the store opens each statement's transaction itself (transaction mode,
    /// a pool of the caller's; `None`: a plain `BEGIN`, session mode); shared, so each transaction takes it
    /// without a copy.
    pub(crate) fn begin_sql(&self) -> Option<Arc<str>> {
        self.begin.clone()
    }
}

impl Conn {
    /// The connection taken out of its pool (which may open another in its place): closed when dropped.
    pub(crate) fn detach(mut self) -> AsyncPgConnection {
        self.pooled.take().expect("present until dropped").detach()
    }
}

impl std::ops::Deref for Conn {
    type Target = AsyncPgConnection;
    fn deref(&self) -> &AsyncPgConnection {
        self.pooled.as_deref().expect("present until dropped")
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut AsyncPgConnection {
        self.pooled.as_deref_mut().expect("present until dropped")
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(mut pooled) = self.pooled.take()
            && diesel_async::pooled_connection::PoolableConnection::is_broken(&mut *pooled)
        {
            drop(pooled.detach());
        }
    }
}

/// How a store of `mode` opens its transactions (see [`PgStore`]'s `begin`).
fn begin(limits: Limits, mode: PoolerMode) -> Option<Arc<str>> {
    (mode == PoolerMode::Transaction).then(|| limits.begin_transaction().into())
}

/// A pool whose connections end transactions left idle longer than `limits.idle` and, when given, statements
/// running longer than `limits.statement` (per session or per transaction, as `mode` needs), each made as
/// [`ConnectTarget`] says (TLS, keepalives).
fn pool(
    database_url: &str,
    max_connections: usize,
    acquire_timeout: Duration,
    limits: Limits,
    mode: PoolerMode,
) -> Result<ConnPool, StoreError> {
    let target = ConnectTarget::parse(database_url)?;
    let mut config = ManagerConfig::<AsyncPgConnection>::default();
    config.recycling_method = pooler::recycling(mode);
    config.custom_setup = Box::new(move |_url| {
        let target = target.clone();
        Box::pin(async move {
            // A setting to fix keeps its kind through the pool (see `error::from_pool`).
            pooler::establish(&target, mode, limits).await.map_err(|e| match e {
                StoreError::Config(m) => diesel::ConnectionError::InvalidConnectionUrl(m),
                other => diesel::ConnectionError::BadConnection(other.to_string()),
            })
        })
    });
    let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new_with_config(database_url, config);
    deadpool::managed::Pool::builder(Checked::new(manager))
        .max_size(max_connections.max(1))
        .runtime(deadpool::Runtime::Tokio1)
        .wait_timeout(Some(acquire_timeout))
        .create_timeout(Some(acquire_timeout))
        .recycle_timeout(Some(acquire_timeout))
        .build()
        .map(ConnPool::Ours)
        .map_err(|e| StoreError::Config(format!("building the connection pool: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store's `Debug` (in a panic, a log of a value holding it) shows its pool and its mode, and never the
    /// URL it was made with, which may hold a password.
    #[tokio::test]
    async fn a_store_shows_its_pool_and_mode_and_never_its_url() {
        let url = "postgres://almanac:hunter2-secret@db.example/almanac";
        let session = format!("{:?}", PgStore::new(url, 3, Duration::from_secs(1)).unwrap());
        assert!(session.starts_with("PgStore {"), "{session}");
        assert!(session.contains("max_size: 3") && session.contains(r#"begin: "BEGIN""#), "{session}");
        let limits = Duration::from_secs(60);
        let pooled = format!("{:?}", PgStore::in_mode(url, 2, limits, limits, PoolerMode::Transaction).unwrap());
        assert!(pooled.contains("begin: \"BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL"), "{pooled}");
        for shown in [&session, &pooled] {
            assert!(!shown.contains("hunter2") && !shown.contains("db.example"), "{shown}");
        }
    }
}
