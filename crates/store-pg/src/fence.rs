//! Fenced writes of an attempt (ADR 0008 rule 5, safety invariant 1): every catalogue write a handler makes
//! runs in a transaction whose first statement locks the work item's row `FOR KEY SHARE` and checks the fence
//! `(id, attempt, running)`. A stale fence commits nothing and answers Lost. While the lock is held, lease
//! recovery and a claim (both pick their rows `FOR UPDATE SKIP LOCKED`) pass the row over; once either has
//! committed, the check fails. So a statement of an old attempt that reaches the server late changes nothing.
//! The attempt's own heartbeats and outcome writes (plain updates, `FOR NO KEY UPDATE`) do not conflict with
//! the lock: a long catalogue write never holds up its own heartbeat.

use almanac_domain::{CatalogueError, Fence};
use diesel::result::Error as DieselError;
use diesel::sql_types::{Integer, Uuid};
use diesel::{QueryableByName, sql_query};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

/// Why a fenced transaction committed nothing.
pub(crate) enum Fenced {
    /// The fence is stale.
    Lost,
    /// The database said no.
    Db(DieselError),
}

impl From<DieselError> for Fenced {
    fn from(e: DieselError) -> Self {
        Fenced::Db(e)
    }
}

/// A fenced transaction's answer, its database error placed by asking the connection it ran on
/// ([`crate::error::placed`]): a `FATAL` answering the commit itself is an outage too.
pub(crate) trait FencedAnswer<T> {
    async fn fenced_on(self, conn: &mut AsyncPgConnection) -> Result<T, CatalogueError>;
}

impl<T> FencedAnswer<T> for Result<T, Fenced> {
    async fn fenced_on(self, conn: &mut AsyncPgConnection) -> Result<T, CatalogueError> {
        match self {
            Ok(value) => Ok(value),
            Err(Fenced::Lost) => Err(CatalogueError::Lost),
            Err(Fenced::Db(e)) => Err(crate::error::placed(conn, e).await.into()),
        }
    }
}

#[derive(QueryableByName)]
struct Held {
    #[diesel(sql_type = Uuid)]
    #[allow(dead_code)]
    id: uuid::Uuid,
}

/// The first statement of every fenced transaction: holds the item's row and checks the fence.
pub(crate) async fn hold(conn: &mut AsyncPgConnection, fence: Fence) -> Result<(), Fenced> {
    let held: Vec<Held> =
        sql_query("SELECT id FROM work_items WHERE id = $1 AND attempt = $2 AND status = 'running' FOR KEY SHARE")
            .bind::<Uuid, _>(fence.id.as_uuid())
            .bind::<Integer, _>(fence.attempt.get())
            .load(conn)
            .await?;
    if held.is_empty() { Err(Fenced::Lost) } else { Ok(()) }
}
