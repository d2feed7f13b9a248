//! How the store's connections reach PostgreSQL: each a server session of its own ([`PoolerMode::Session`]:
//! PostgreSQL itself, or a pooler in session mode), or through a pooler in transaction mode
//! ([`PoolerMode::Transaction`]: PgBouncer's `pool_mode = transaction`, the default in front of most managed
//! services), where a server session is ours only from `BEGIN` to `COMMIT` and is then handed to another client
//! (ADR 0012).
//!
//! In transaction mode nothing of ours may outlive a transaction on a server session, and no two statements of
//! ours that belong together may be split across sessions:
//! - diesel-async prepares every statement under a name and then executes it (two round trips), and caches the
//!   hot ones by name on the connection: the statement cache is off, and every statement runs inside a
//!   transaction ([`crate::PgStore::read`] too), so the prepare, the execution and the close of a statement
//!   reach one server session;
//! - the safety limits (`idle_in_transaction_session_timeout`, `statement_timeout`) and the time zone are set
//!   for each transaction (`SET LOCAL`, in the round trip of its `BEGIN`), never for a session, and the
//!   transaction is begun at READ COMMITTED (see [`ISOLATION`]);
//! - diesel-async's own set-up of a new connection (`SET TIME ZONE`, `SET CLIENT_ENCODING`, prepared statements
//!   outside a transaction) runs inside a transaction that is rolled back: it leaves nothing behind;
//! - the pool checks a connection it takes back with a simple query (one round trip, no named statement).
//!
//! LISTEN needs a session of its own: the Worker listens on a direct connection (`database.listen_url`) or polls.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use almanac_domain::Cause;
use diesel::connection::CacheSize;
use diesel_async::pooled_connection::RecyclingMethod;
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};

use crate::{ConnectTarget, StoreError};

/// The `pool_mode` of a connection pooler between the store and PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PoolerMode {
    /// Each connection of ours is one server session for as long as it lives: PostgreSQL itself, or a pooler in
    /// session mode. Statements are cached on the connection and the limits are set once per session.
    #[default]
    Session,
    /// A pooler in transaction mode (PgBouncer `pool_mode = transaction`): a server session is ours only for
    /// one transaction. No statement cache, every statement in a transaction, the limits set per transaction.
    Transaction,
}

impl PoolerMode {
    /// Every mode, in the order the settings list them.
    pub const ALL: [PoolerMode; 2] = [PoolerMode::Session, PoolerMode::Transaction];

    /// The mode's name in the settings (as PgBouncer's `pool_mode` names it).
    pub fn name(self) -> &'static str {
        match self {
            PoolerMode::Session => "session",
            PoolerMode::Transaction => "transaction",
        }
    }

    /// The mode named `name`, if there is one.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
}

impl std::fmt::Display for PoolerMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The isolation every transaction of the store runs at, whatever the server, the database or the role defaults
/// to (`default_transaction_isolation`). The queue's rules are written for READ COMMITTED (ADR 0008): a claim's
/// `SKIP LOCKED` and the heads' refresh (lock, then compute in a new statement that sees what it waited for) rely on
/// each statement's own snapshot. At REPEATABLE READ or SERIALIZABLE, a database a DBA set so for its other
/// clients, a completion that waited for an enqueue's lock on its head failed with a serialization error, and
/// claims beside other Workers failed the same way.
pub(crate) const ISOLATION: &str = "read committed";

/// `BEGIN` at [`ISOLATION`]: how a transaction of a store over a pool of the caller's opens (the caller's sessions
/// keep their own defaults, which a store must not change), and the first statement of a transaction in
/// transaction mode.
pub(crate) fn begin_at_isolation() -> String {
    format!("BEGIN ISOLATION LEVEL {}", ISOLATION.to_uppercase())
}

/// No limit on a wait for a lock, whatever the database or the role sets (`lock_timeout`, a DBA's guard against
/// pile-ups behind migrations), for a store whose statements have a limit (a Worker's: the lease bounds its waits);
/// a completion that waited for an enqueue into its config past the database's limit failed. The chained claim
/// sets its own, shorter, for itself (`queue::outcome`).
const NO_LOCK_TIMEOUT: &str = "lock_timeout = 0";

/// How often the server looks, while a statement of ours runs or waits, whether we are still connected
/// (`client_connection_check_interval`). A statement whose caller went away (a Worker killed, a handler's
/// statement dropped) is otherwise carried on to its end, waits for a lock included, and its transaction keeps the
/// rows it locked (the item's among them) until its statement limit, a lease.
///
/// Set once per session, where the server can tell a closed connection (not on Windows, which refuses any value
/// but 0: the session then goes without). Not behind a pooler in transaction mode, where the pooler, not we, is
/// the server's client, and not on the connections of heartbeats and outcomes ([`Limits::check_client`]): a
/// completion sent alone and given up on commits (ADR 0008).
const CLIENT_CHECK: Duration = Duration::from_secs(1);

/// [`CLIENT_CHECK`] for this session, or for this transaction only when `local`, unless the server refuses the
/// value (a platform that cannot tell).
pub(crate) fn client_check(local: bool) -> String {
    format!(
        "DO $$ BEGIN PERFORM set_config('client_connection_check_interval', '{}', {local}); \
         EXCEPTION WHEN invalid_parameter_value THEN NULL; END $$",
        CLIENT_CHECK.as_millis()
    )
}

/// What the server ends on our behalf: a transaction of ours left idle longer than `idle`, and a statement
/// running longer than `statement` when given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) idle: Duration,
    pub(crate) statement: Option<Duration>,
    /// Whether the server ends a statement of ours once our connection is gone ([`CLIENT_CHECK`]).
    pub(crate) check_client: bool,
}

impl Limits {
    /// The settings as `name = milliseconds` pairs.
    fn settings(&self) -> Vec<(&'static str, u128)> {
        let mut settings = vec![("idle_in_transaction_session_timeout", self.idle.as_millis().max(1))];
        settings.extend(self.statement.map(|s| ("statement_timeout", s.as_millis().max(1))));
        settings
    }

    /// Once per server session (session mode): the isolation of its transactions, and the limits.
    pub(crate) fn for_session(&self) -> String {
        let limits = self.settings().into_iter().map(|(name, ms)| format!("; SET {name} = {ms}"));
        let waits = self.waits().map(|w| format!("; SET {w}")).unwrap_or_default();
        let check = self.check_client.then(|| format!("; {}", client_check(false)));
        std::iter::once(format!("SET default_transaction_isolation = '{ISOLATION}'{waits}"))
            .chain(limits)
            .chain(check)
            .collect()
    }

    /// [`NO_LOCK_TIMEOUT`], for a store whose statements have a limit of their own (a Worker's, a lease), which
    /// then bounds every wait; a store without one (the command line's, the page's) keeps the database's
    /// `lock_timeout`, so that none of its waits is without a bound.
    fn waits(&self) -> Option<&'static str> {
        self.statement.map(|_| NO_LOCK_TIMEOUT)
    }

    /// What opens a transaction in transaction mode: `BEGIN` at [`ISOLATION`], then the limits and the time zone
    /// diesel-async gives its sessions, for this transaction only, all in one round trip.
    pub(crate) fn begin_transaction(&self) -> String {
        let mut sql = format!("{}; SET LOCAL TimeZone = 'UTC'", begin_at_isolation());
        if let Some(waits) = self.waits() {
            sql.push_str(&format!("; SET LOCAL {waits}"));
        }
        for (name, ms) in self.settings() {
            sql.push_str(&format!("; SET LOCAL {name} = {ms}"));
        }
        sql
    }
}

/// A new connection for a pool of `mode`: in session mode as always, its limits set for the session; in
/// transaction mode set up inside a transaction rolled back, its statement cache off.
pub(crate) async fn establish(
    target: &ConnectTarget,
    mode: PoolerMode,
    limits: Limits,
) -> Result<AsyncPgConnection, StoreError> {
    match mode {
        PoolerMode::Session => {
            let mut conn = target.establish().await?;
            conn.batch_execute(&limits.for_session())
                .await
                .map_err(|e| StoreError::Unavailable(Cause::with_source("setting the connection's limits", e)))?;
            Ok(conn)
        }
        PoolerMode::Transaction => establish_unpinned(target).await,
    }
}

/// A connection that leaves nothing on the server session it was set up on, and prepares no statement it keeps:
/// safe through a pooler in transaction mode, and on a direct connection alike (migrations use it whatever the
/// mode). diesel-async sets the time zone and the client encoding with statements it prepares outside a
/// transaction; here they run inside one (one server session for their prepare and execution), rolled back.
pub(crate) async fn establish_unpinned(target: &ConnectTarget) -> Result<AsyncPgConnection, StoreError> {
    let (client, mut connection) = target.connect().await?;
    let lost = |e: tokio_postgres::Error| StoreError::Unavailable(Cause::with_source("opening a transaction", e));
    {
        // The connection must be driven for the client's BEGIN to be answered; diesel-async drives it after.
        let mut begin = pin!(client.batch_execute("BEGIN"));
        std::future::poll_fn(|cx| {
            if let Poll::Ready(answer) = begin.as_mut().poll(cx) {
                return Poll::Ready(answer.map_err(lost));
            }
            loop {
                match connection.poll_message(cx) {
                    Poll::Ready(Some(Ok(_))) => {}
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(lost(e))),
                    Poll::Ready(None) => {
                        return Poll::Ready(Err(StoreError::Unavailable("the connection closed at once".into())));
                    }
                    Poll::Pending => return Poll::Pending,
                }
            }
        })
        .await?;
    }
    let mut conn = AsyncPgConnection::try_from_client_and_connection(client, connection)
        .await
        .map_err(|e| StoreError::Unavailable(Cause::from_error(e)))?;
    conn.batch_execute("ROLLBACK")
        .await
        .map_err(|e| StoreError::Unavailable(Cause::with_source("ending the set-up's transaction", e)))?;
    conn.set_prepared_statement_cache_size(CacheSize::Disabled);
    Ok(conn)
}

/// How the pool checks a connection it hands out that was not used within [`crate::pool::Checked::RECENT`]:
/// diesel-async's default (a cached `SELECT $1`) in session mode; a simple query in transaction mode, which
/// prepares nothing.
pub(crate) fn recycling(mode: PoolerMode) -> RecyclingMethod<AsyncPgConnection> {
    match mode {
        PoolerMode::Session => RecyclingMethod::Verified,
        PoolerMode::Transaction => RecyclingMethod::CustomFunction(Box::new(|conn| {
            Box::pin(async move { conn.batch_execute("SELECT 1").await })
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_read_by_their_names_and_session_is_the_default() {
        for mode in PoolerMode::ALL {
            assert_eq!(PoolerMode::parse(mode.name()), Some(mode));
            assert_eq!(mode.to_string(), mode.name(), "shown as named");
        }
        assert_eq!(PoolerMode::parse("statement"), None);
        assert_eq!(PoolerMode::default(), PoolerMode::Session);
    }

    #[test]
    fn limits_are_set_per_session_or_per_transaction() {
        let limits =
            Limits { idle: Duration::from_secs(15), statement: Some(Duration::from_secs(30)), check_client: false };
        assert_eq!(
            limits.for_session(),
            "SET default_transaction_isolation = 'read committed'; SET lock_timeout = 0; \
             SET idle_in_transaction_session_timeout = 15000; SET statement_timeout = 30000"
        );
        assert_eq!(
            limits.begin_transaction(),
            "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL TimeZone = 'UTC'; SET LOCAL lock_timeout = 0; \
             SET LOCAL idle_in_transaction_session_timeout = 15000; SET LOCAL statement_timeout = 30000"
        );
        let no_statement_limit = Limits { idle: Duration::ZERO, statement: None, check_client: true };
        // Without a statement limit, the database's lock_timeout is kept: no wait goes unbounded.
        assert_eq!(
            no_statement_limit.for_session(),
            format!(
                "SET default_transaction_isolation = 'read committed'; SET idle_in_transaction_session_timeout = 1; \
                 {}",
                client_check(false)
            )
        );
        assert_eq!(
            no_statement_limit.begin_transaction(),
            "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL TimeZone = 'UTC'; \
             SET LOCAL idle_in_transaction_session_timeout = 1"
        );
    }
}
