//! How every statement of the store reaches the database, written once: [`PgStore::read`] (one or more
//! statements outside a transaction; in a transaction behind a pooler in transaction mode, see
//! [`crate::pooler`]), [`PgStore::transaction`] (a transaction whose commit is awaited) and
//! [`PgStore::fenced`] (an attempt's catalogue write: a transaction that can only be had through the fence).
//! Each takes its connection from the pool it names ([`Lane`]) and places its error by asking that connection
//! ([`crate::error::placed`], ADR 0010), so no caller opens a transaction, holds a fence or maps an error itself.
//!
//! Fenced writes (ADR 0008 rule 5, docs/safety.md): the first statement of the transaction locks the work item's
//! row `FOR KEY SHARE` and checks the fence `(id, attempt, claim token, running)`. A stale fence commits nothing
//! and answers Lost. While the lock is held, lease recovery and a claim (both pick their rows `FOR UPDATE SKIP
//! LOCKED`) pass the row over; once either has committed, the check fails (a claim sets a token of its own, so
//! even a claim that got the stale attempt's number again, after a failover lost that attempt's claim, fails
//! it). So a statement of an old attempt that reaches the server late changes nothing. The attempt's own
//! heartbeats and outcome writes (plain updates, `FOR NO KEY UPDATE`) do not conflict with the lock: a long
//! catalogue write never holds up its own heartbeat. The queue's writes of an attempt carry the same fence in
//! their own `WHERE` (`queue::FENCE`) and go through [`PgStore::transaction`] on the attempt's reserved
//! connections.

use std::future::Future;
use std::num::NonZeroU32;

use almanac_domain::Cause;
use almanac_domain::ports::{CatalogueError, Fence};
use diesel::QueryResult;
use diesel::connection::{InstrumentationEvent, TransactionDepthChange};
use diesel::result::Error as DieselError;
use diesel::sql_types::{Integer, Uuid};
use diesel::{QueryableByName, sql_query};
use diesel_async::{
    AnsiTransactionManager, AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection, TransactionManager,
};

use crate::error::{StoreError, placed};
use crate::{Conn, PgStore};

/// Which of the store's pools a statement takes its connection from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// The shared pool: claims, recovery, the scheduler, the handlers' catalogue statements, operators.
    Shared,
    /// An attempt's own queue writes (heartbeats, outcomes): the reserved pool when there is one, so nothing
    /// else can starve them into a self-stop.
    Attempt,
}

/// A statement body: an async closure over the connection whose future is `Send` (the bound diesel-async
/// states for its own transactions, which cannot be named outside it). Written by callers as
/// `async |conn| { … }`.
pub(crate) trait Body<'c, T>: FnOnce(&'c mut AsyncPgConnection) -> <Self as Body<'c, T>>::Fut + Send {
    /// The body's future.
    type Fut: Future<Output = QueryResult<T>> + Send;
}

impl<'c, T, F, Fut> Body<'c, T> for F
where
    F: FnOnce(&'c mut AsyncPgConnection) -> Fut + Send,
    Fut: Future<Output = QueryResult<T>> + Send,
{
    type Fut = Fut;
}

/// Why a fenced transaction committed nothing, before its database error is placed.
pub(crate) enum Refused {
    /// The fence is stale: the attempt no longer holds its item.
    Lost,
    /// The database said no (the transaction was rolled back).
    Db(DieselError),
}

impl From<DieselError> for Refused {
    fn from(e: DieselError) -> Self {
        Refused::Db(e)
    }
}

impl Refused {
    /// The refusal as the catalogue ports answer it, a database error placed on the connection it came from.
    pub(crate) async fn placed(self, conn: &mut Conn) -> CatalogueError {
        match self {
            Refused::Lost => CatalogueError::Lost,
            // The write's values, refused (a check, a path longer than its index holds): told by the error's kind
            // and the constraint it names, before anything asks the connection.
            Refused::Db(e) => match crate::error::refused_values(&e) {
                Some(what) => CatalogueError::Refused(Cause::with_source(what, e)),
                None => placed(conn, e).await.into(),
            },
        }
    }
}

#[derive(QueryableByName)]
struct Held {
    #[diesel(sql_type = Uuid)]
    #[allow(dead_code)]
    id: uuid::Uuid,
}

/// Holds the item's row and checks the fence (the item, the attempt number and the claim's token, still
/// running): the first statement of every fenced transaction.
async fn hold(conn: &mut AsyncPgConnection, fence: Fence) -> Result<(), Refused> {
    let held: Vec<Held> = sql_query(
        "SELECT id FROM work_items
          WHERE id = $1 AND attempt = $2 AND claim_token = $3 AND status = 'running'
            FOR KEY SHARE",
    )
    .bind::<Uuid, _>(fence.id.as_uuid())
    .bind::<Integer, _>(fence.attempt.get())
    .bind::<Uuid, _>(fence.claim.as_uuid())
    .load(conn)
    .await?;
    if held.is_empty() { Err(Refused::Lost) } else { Ok(()) }
}

/// The one transaction of the store: begins (as the connection's pool mode needs: in transaction mode with the
/// limits for this transaction, see [`crate::pooler`]), holds `fence` first when given, runs `body`, and awaits
/// the commit (acknowledged means committed: a backend killed before the commit is an error here, never a
/// silent rollback). Any error rolls back, and is answered as [`ended`] says. Its error is not yet placed:
/// callers that tell one database error apart (a lost race on an index) use it directly.
pub(crate) async fn fenced_within<T, F>(conn: &mut Conn, fence: Option<Fence>, body: F) -> Result<T, Refused>
where
    T: Send,
    for<'c> F: AsyncFnOnce(&'c mut AsyncPgConnection) -> QueryResult<T> + Body<'c, T>,
{
    let begin = conn.begin_sql();
    let conn: &mut AsyncPgConnection = conn;
    match begin {
        Some(sql) => AnsiTransactionManager::begin_transaction_sql(conn, &sql).await?,
        None => AnsiTransactionManager::begin_transaction(conn).await?,
    }
    let answer = match fence {
        Some(fence) => match hold(conn, fence).await {
            Ok(()) => body(conn).await.map_err(Refused::Db),
            Err(refused) => Err(refused),
        },
        None => body(conn).await.map_err(Refused::Db),
    };
    ended(conn, answer).await
}

/// Ends the transaction open on `conn` as its answer says: commits, the commit awaited, when it is a value; rolls
/// back when it is an error, and answers that error. When the rollback fails too, its own error is answered
/// instead (a connection gone mid-transaction: an outage its caller may retry on a fresh connection, the server
/// rolling back on its own), except a transaction manager already broken, which adds nothing (the connection is
/// then closed rather than pooled).
async fn ended<T, E: From<DieselError>>(conn: &mut AsyncPgConnection, answer: Result<T, E>) -> Result<T, E> {
    match answer {
        Ok(value) => {
            AnsiTransactionManager::commit_transaction(conn).await?;
            Ok(value)
        }
        Err(e) => match AnsiTransactionManager::rollback_transaction(conn).await {
            Ok(()) | Err(DieselError::BrokenTransactionManager) => Err(e),
            Err(rollback) => Err(rollback.into()),
        },
    }
}

/// A transaction of one statement whose answer is read to its end (rows, or a count): its `BEGIN` goes out
/// with the statement, pipelined on the connection (one round trip fewer than [`within`]), and its `COMMIT` is
/// sent only once the statement has answered, and awaited. So it keeps what [`within`] keeps: acknowledged
/// means committed, any error rolls back, and a caller that gives up before the answer commits nothing. The
/// transaction manager counts the transaction open before its `BEGIN` is sent, so a connection dropped at
/// any point of it is closed, never pooled (`Conn`), and the server rolls back. The claim behind a pooler in
/// transaction mode runs in it (ADR 0008, amendment "a claim given up on is handed back").
///
/// The `BEGIN` is polled first, so it reaches the connection's queue before any of the statement's messages
/// (a statement not yet prepared on this connection prepares after it, in the same transaction). The begin SQL
/// must open the transaction before anything in it can fail (`BEGIN` first, as `Limits::begin_transaction`
/// writes it): a `BEGIN` that failed whole would leave the statement, already on its way, to run and commit on
/// its own. Test: `a_claim_given_up_on_through_a_transaction_pooler_commits_nothing`.
pub(crate) async fn begun_with<T, F>(conn: &mut Conn, statement: F) -> QueryResult<T>
where
    T: Send,
    for<'c> F: AsyncFnOnce(&'c AsyncPgConnection) -> QueryResult<T>,
{
    begun_then(conn, statement, async |_, answer| Ok(answer)).await
}

/// [`begun_with`], then `rest` in the same transaction once the first statement has answered (given its answer),
/// before the awaited `COMMIT`. The completions a Worker writes with the claim that follows them run in it: the
/// `BEGIN` goes out with the completions, and the claim's settings and savepoint with the claim
/// (`queue::outcome::complete_many_and_claim`).
pub(crate) async fn begun_then<A, T, F, G>(conn: &mut Conn, first: F, rest: G) -> QueryResult<T>
where
    A: Send,
    T: Send,
    for<'c> F: AsyncFnOnce(&'c AsyncPgConnection) -> QueryResult<A>,
    for<'c> G: AsyncFnOnce(&'c AsyncPgConnection, A) -> QueryResult<T>,
{
    let begin = conn.begin_sql();
    let conn: &mut AsyncPgConnection = conn;
    not_in_a_transaction(conn)?;
    AnsiTransactionManager::transaction_manager_status_mut(conn)
        .transaction_state()?
        .change_transaction_depth(TransactionDepthChange::IncreaseDepth)?;
    conn.instrumentation().on_connection_event(InstrumentationEvent::begin_transaction(NonZeroU32::MIN));
    let answer = {
        let shared: &AsyncPgConnection = conn;
        let (begun, answer) = pipelined(shared, begin.as_deref().unwrap_or("BEGIN"), first(shared)).await;
        match begun.and(answer) {
            Ok(answer) => rest(shared, answer).await,
            Err(e) => Err(e),
        }
    };
    ended(conn, answer).await
}

/// Sends `sql` (simple statements, e.g. `BEGIN` or a savepoint) and then `statement`'s messages on `conn` without
/// waiting between them: `sql` is polled first, so it reaches the connection's queue before anything of the
/// statement's (a statement not yet prepared on the connection prepares after it), and the server runs them in
/// that order. Answers both.
pub(crate) async fn pipelined<T>(
    conn: &AsyncPgConnection,
    sql: &str,
    statement: impl Future<Output = QueryResult<T>>,
) -> (QueryResult<()>, QueryResult<T>) {
    let mut opener = conn;
    futures_util::future::join(opener.batch_execute(sql), statement).await
}

/// Refuses a connection already inside a transaction (a pool handed in, `PgStore::from_pool`, may give one), as
/// diesel-async's own `BEGIN` does: a statement meant to be a transaction of its own would be answered before it
/// committed, and a `BEGIN` sent there would only be warned about (its `COMMIT` then taken for a savepoint's
/// release).
pub(crate) fn not_in_a_transaction(conn: &mut AsyncPgConnection) -> QueryResult<()> {
    match AnsiTransactionManager::transaction_manager_status_mut(conn).transaction_state()?.transaction_depth() {
        Some(_) => Err(DieselError::AlreadyInTransaction),
        None => Ok(()),
    }
}

/// [`fenced_within`] with no fence: a transaction of the queue's.
pub(crate) async fn within<T, F>(conn: &mut Conn, body: F) -> QueryResult<T>
where
    T: Send,
    for<'c> F: AsyncFnOnce(&'c mut AsyncPgConnection) -> QueryResult<T> + Body<'c, T>,
{
    match fenced_within(conn, None, body).await {
        Ok(value) => Ok(value),
        Err(Refused::Db(e)) => Err(e),
        Err(Refused::Lost) => unreachable!("no fence was held"),
    }
}

impl PgStore {
    /// A connection from `lane`'s pool.
    pub(crate) async fn conn_from(&self, lane: Lane) -> Result<Conn, StoreError> {
        match lane {
            Lane::Shared => self.conn().await,
            Lane::Attempt => self.attempt_conn().await,
        }
    }

    /// Runs `body` on a shared connection outside a transaction (reads, and single statements that are their
    /// own transaction), its error placed. In transaction mode it runs in a transaction: a statement is
    /// prepared and executed in two round trips, which only a transaction keeps on one server session. Over a
    /// pool of the caller's, in a transaction too, at the store's isolation (see `PgStore::from_pool`).
    pub(crate) async fn read<T, F>(&self, body: F) -> Result<T, StoreError>
    where
        T: Send,
        for<'c> F: AsyncFnOnce(&'c mut AsyncPgConnection) -> QueryResult<T> + Body<'c, T>,
    {
        let mut conn = self.conn().await?;
        let answer = if conn.begin_sql().is_some() { within(&mut conn, body).await } else { body(&mut conn).await };
        match answer {
            Ok(value) => Ok(value),
            Err(e) => Err(placed(&mut conn, e).await),
        }
    }

    /// Runs `body` in one transaction on a connection from `lane`, its commit awaited, its error placed.
    pub(crate) async fn transaction<T, F>(&self, lane: Lane, body: F) -> Result<T, StoreError>
    where
        T: Send,
        for<'c> F: AsyncFnOnce(&'c mut AsyncPgConnection) -> QueryResult<T> + Body<'c, T>,
    {
        let mut conn = self.conn_from(lane).await?;
        match within(&mut conn, body).await {
            Ok(value) => Ok(value),
            Err(e) => Err(placed(&mut conn, e).await),
        }
    }

    /// Runs one statement as a transaction of its own on a connection from `lane`, its commit awaited in its
    /// answer, its error placed. In session mode the statement is sent alone: an implicit transaction, which the
    /// server commits before the end of its answer (one round trip where [`PgStore::transaction`] takes three;
    /// ADR 0008, amendment "a completion claiming nothing is one round trip"). Behind a pooler in transaction
    /// mode it runs in [`begun_with`]. Once sent, a statement sent alone commits whatever its caller does, unless
    /// the server notices the closed connection first (`client_connection_check_interval`, or an answer too long
    /// for its send buffer): only for writes whose second try finds the first one's work done (a completion,
    /// fenced on its claim: see `WorkQueue::succeeded_under`) and whose rollback is as safe. A connection whose
    /// statement was given up on before its answer is closed, not pooled.
    pub(crate) async fn alone<T, F>(&self, lane: Lane, statement: F) -> Result<T, StoreError>
    where
        T: Send,
        for<'c> F: AsyncFnOnce(&'c AsyncPgConnection) -> QueryResult<T>,
    {
        let (mut conn, answer) = self.sent_alone(lane, statement, Box::new(drop)).await?;
        match answer {
            Ok(value) => Ok(value),
            Err(e) => Err(placed(&mut conn, e).await),
        }
    }

    /// [`PgStore::alone`]'s sending, for callers that read the answer themselves (the claim): the connection and
    /// the statement's answer, its error not placed. Given up on before the answer in session mode, the statement
    /// leaves `abandoned` to run on the connection, taken out of its pool (see [`Unanswered`]).
    pub(crate) async fn sent_alone<T, F>(
        &self,
        lane: Lane,
        statement: F,
        abandoned: Abandoned,
    ) -> Result<(Conn, QueryResult<T>), StoreError>
    where
        T: Send,
        for<'c> F: AsyncFnOnce(&'c AsyncPgConnection) -> QueryResult<T>,
    {
        let mut conn = self.conn_from(lane).await?;
        if conn.begin_sql().is_some() {
            let answer = begun_with(&mut conn, statement).await;
            return Ok((conn, answer));
        }
        let mut sent = Unanswered { conn: Some(conn), abandoned: Some(abandoned) };
        let answer = match not_in_a_transaction(sent.conn()) {
            Ok(()) => statement(sent.conn()).await,
            Err(e) => Err(e),
        };
        Ok((sent.answered(), answer))
    }

    /// Runs `body` as a write of the attempt `fence` names: one transaction on a shared connection whose first
    /// statement holds the item's row and checks the fence. A stale fence commits nothing and answers
    /// [`CatalogueError::Lost`].
    pub(crate) async fn fenced<T, F>(&self, fence: Fence, body: F) -> Result<T, CatalogueError>
    where
        T: Send,
        for<'c> F: AsyncFnOnce(&'c mut AsyncPgConnection) -> QueryResult<T> + Body<'c, T>,
    {
        let mut conn = self.conn().await?;
        match fenced_within(&mut conn, Some(fence), body).await {
            Ok(value) => Ok(value),
            Err(refused) => Err(refused.placed(&mut conn).await),
        }
    }
}

/// What tests of the limits need (feature `test-support`): one of the store's own transactions, as its pool mode
/// opens it.
#[cfg(feature = "test-support")]
impl PgStore {
    /// The values of the settings `names` as a transaction of this store sees them (`current_setting`).
    pub async fn settings_in_transaction(&self, names: &[&str]) -> Result<Vec<String>, StoreError> {
        #[derive(QueryableByName)]
        struct Value {
            #[diesel(sql_type = diesel::sql_types::Text)]
            value: String,
        }
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        self.transaction(Lane::Shared, async |conn| {
            let mut values = Vec::new();
            for name in &names {
                let row: Value = sql_query("SELECT current_setting($1) AS value")
                    .bind::<diesel::sql_types::Text, _>(name)
                    .get_result(conn)
                    .await?;
                values.push(row.value);
            }
            Ok(values)
        })
        .await
    }

    /// A transaction of this store that runs a statement, stays idle for `idle`, then runs another and
    /// commits: an error when the server ended it meanwhile (`idle_in_transaction_session_timeout`).
    pub async fn idle_in_transaction(&self, idle: std::time::Duration) -> Result<(), StoreError> {
        self.transaction(Lane::Shared, async |conn| {
            sql_query("SELECT 1").execute(conn).await?;
            tokio::time::sleep(idle).await;
            sql_query("SELECT 1").execute(conn).await?;
            Ok(())
        })
        .await
    }
}

/// What a statement sent alone leaves behind when its caller gives up before the answer: run on its connection,
/// detached from the pool (dropping it closes it; the claim hands back what it took on it first).
pub(crate) type Abandoned = Box<dyn FnOnce(AsyncPgConnection) + Send>;

/// A connection whose statement, sent alone ([`PgStore::sent_alone`]), has not answered yet. Dropped before the
/// answer (its caller gave up), it takes the connection out of its pool (which may open another at once), its
/// answer unread, and leaves it to its [`Abandoned`]: the connection is never pooled again.
struct Unanswered {
    conn: Option<Conn>,
    abandoned: Option<Abandoned>,
}

impl Unanswered {
    fn conn(&mut self) -> &mut AsyncPgConnection {
        self.conn.as_deref_mut().expect("held until answered")
    }

    /// The statement answered (rows or an error): the connection back, nothing left behind.
    fn answered(mut self) -> Conn {
        self.conn.take().expect("held until answered")
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        // Detached whatever else happens: a connection whose answer is unread must never be pooled again.
        if let Some(conn) = self.conn.take().map(Conn::detach) {
            match self.abandoned.take() {
                Some(abandoned) => abandoned(conn),
                None => drop(conn),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use almanac_testdb::TestDatabase;
    use diesel::sql_types::Integer;

    use super::*;

    #[derive(QueryableByName, Debug)]
    struct One {
        #[diesel(sql_type = Integer)]
        one: i32,
    }

    /// A connection already inside a transaction (a pool handed in may give one) is refused, and its
    /// transaction is left as it was: still open, its depth unchanged, ended by its owner.
    #[tokio::test]
    async fn a_pipelined_transaction_refuses_a_connection_already_in_one() {
        let db = TestDatabase::create().await;
        let store = PgStore::new(db.url(), 1, Duration::from_secs(10)).unwrap();
        let mut conn = store.conn().await.unwrap();
        let select = async |c: &AsyncPgConnection| sql_query("SELECT 1 AS one").load::<One>(&mut { c }).await;

        AnsiTransactionManager::begin_transaction(&mut *conn).await.unwrap();
        let refused = begun_with(&mut conn, select).await;
        assert!(matches!(refused, Err(DieselError::AlreadyInTransaction)), "{refused:?}");
        let depth = AnsiTransactionManager::transaction_manager_status_mut(&mut *conn).transaction_depth();
        assert_eq!(depth.unwrap().map(NonZeroU32::get), Some(1), "the owner's transaction, untouched");
        AnsiTransactionManager::rollback_transaction(&mut *conn).await.unwrap();

        let answered = begun_with(&mut conn, select).await.unwrap();
        assert_eq!(answered.iter().map(|r| r.one).collect::<Vec<_>>(), [1]);
        let depth = AnsiTransactionManager::transaction_manager_status_mut(&mut *conn).transaction_depth();
        assert_eq!(depth.unwrap(), None, "committed and closed");
    }
}
