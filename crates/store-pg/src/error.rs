//! The one place database errors become port errors.

use almanac_domain::{Cause, QueueError, ports::CatalogueError};
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::sql_types::Bool;
use diesel::{QueryableByName, sql_query};
use diesel_async::RunQueryDsl;
use diesel_async::pooled_connection::deadpool::PoolError;

/// The index that keeps at most one running item per storage config (ADR 0008, rule 2).
pub(crate) const RUNNING_CONFIG_INDEX: &str = "ix_work_items_running_config";

/// What went wrong in the store, for callers outside the work queue port (CLI, web backend).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The database could not be reached or did not answer in time.
    #[error("the database is unavailable: {0}. Check that PostgreSQL is running and that DATABASE_URL points at it")]
    Unavailable(#[source] Cause),
    /// The request conflicts with what is stored (e.g. a root path already registered).
    #[error("{0}")]
    Conflict(String),
    /// The request names something that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// Bad settings (e.g. a malformed database URL).
    #[error("bad database settings: {0}")]
    Config(String),
    /// Migrations could not be applied.
    #[error("migrating the database failed: {0}")]
    Migration(#[source] Cause),
    /// Anything else the database said.
    #[error("database error: {0}")]
    Unexpected(#[source] Cause),
}

impl From<StoreError> for QueueError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(m) => QueueError::Unavailable(m),
            StoreError::Conflict(m) | StoreError::NotFound(m) => QueueError::Rejected(m),
            other => QueueError::Unexpected(Cause::from_error(other)),
        }
    }
}

/// A pool's error: a connection refused for a setting to fix (a TLS certificate, say: made an
/// `InvalidConnectionUrl` by the pool's setup) stays a settings error; the rest is an outage.
pub(crate) fn from_pool(e: PoolError) -> StoreError {
    use diesel_async::pooled_connection::PoolError as ManagerError;
    match e {
        deadpool::managed::PoolError::Backend(ManagerError::ConnectionError(
            diesel::ConnectionError::InvalidConnectionUrl(m),
        )) => StoreError::Config(m),
        other => StoreError::Unavailable(Cause::from_error(other)),
    }
}

/// Whether `e` is a unique violation of the index or constraint named `name`.
pub(crate) fn is_unique_violation_of(e: &DieselError, name: &str) -> bool {
    matches!(e, DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, info) if info.constraint_name() == Some(name))
}

/// Whether the connection `e` came from is gone (closed, reset, killed, timed out on the wire). Told by the
/// driver's own kinds, never by the server's words, which follow its `lc_messages` (a German NAS speaks German):
/// diesel-async reports an error that carries no SQLSTATE (the client's own: the socket, the connection task)
/// as `UnableToSendCommand`, and a transaction whose rollback or commit could not be sent as the rollback's or
/// commit's error. A server error that ended the session (`FATAL`: a terminated backend, an idle-in-transaction
/// timeout, a shutdown) arrives with a SQLSTATE diesel has no kind for; [`placed`] asks the connection itself.
pub(crate) fn is_connection_lost(e: &DieselError) -> bool {
    match e {
        DieselError::DatabaseError(DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::UnableToSendCommand, _) => {
            true
        }
        // The transaction's state is unknown after an error of the connection itself: the pool discards it.
        DieselError::BrokenTransactionManager => true,
        DieselError::RollbackErrorOnCommit { rollback_error, commit_error } => {
            is_connection_lost(rollback_error) || is_connection_lost(commit_error)
        }
        _ => false,
    }
}

/// Whether `e` is an outage by its kinds alone: a lost connection ([`is_connection_lost`]), or a server that
/// only reads (SQLSTATE 25006: a standby, as before and during a failover; its words, "cannot execute … in a
/// read-only transaction", are never read).
pub(crate) fn is_outage(e: &DieselError) -> bool {
    is_connection_lost(e) || matches!(e, DieselError::DatabaseError(DatabaseErrorKind::ReadOnlyTransaction, _))
}

/// Maps a query error by its kinds alone: an outage ([`is_outage`]) is `Unavailable`; constraint violations
/// are conflicts; the rest unexpected.
pub(crate) fn from_diesel(e: DieselError) -> StoreError {
    if is_outage(&e) {
        return StoreError::Unavailable(Cause::from_error(e));
    }
    match &e {
        DieselError::DatabaseError(
            DatabaseErrorKind::UniqueViolation
            | DatabaseErrorKind::ForeignKeyViolation
            | DatabaseErrorKind::CheckViolation,
            info,
        ) => StoreError::Conflict(format!(
            "{} (constraint {})",
            info.message(),
            info.constraint_name().unwrap_or("unknown")
        )),
        DieselError::NotFound => StoreError::NotFound(e.to_string()),
        _ => StoreError::Unexpected(Cause::from_error(e)),
    }
}

/// A statement's error placed with the help of the connection it ran on, for what the kinds cannot tell: a
/// server error diesel has no kind for (`Unknown`) asks the same connection whether the catalogue's tables
/// exist, then whether the server can write a page of a new table (`almanac_disk_refuses_writes`, migrations
/// 000034 and 000037), in a transaction of its own. No answer means the error ended the session (a `FATAL`:
/// terminated, timed out, shut down): an outage. An answer that the tables are missing means the database was
/// never migrated. A server refusing to write for want of disk space is an outage too (ADR 0010, amendment "a full
/// disk is an outage"): the work waits for space instead of failing. A probe that fails itself is said with the
/// error. The server's words are never read, so a server speaking any language is understood alike.
pub(crate) async fn placed(conn: &mut crate::Conn, e: DieselError) -> StoreError {
    if !matches!(e, DieselError::DatabaseError(DatabaseErrorKind::Unknown, _)) {
        return from_diesel(e);
    }
    #[derive(QueryableByName)]
    struct Answer {
        #[diesel(sql_type = Bool)]
        yes: bool,
    }
    enum Probe {
        NotMigrated,
        DiskFull,
        Neither,
    }
    // In a transaction of its own, opened as the store opens every transaction ([`crate::tx::within`]): through
    // a pooler in transaction mode a statement's prepare and execution reach one server session only inside one,
    // with our limits (ADR 0012); and a caller dropped mid-probe leaves a connection the pool closes (diesel
    // knows a transaction is open), never one returned with the transaction still open.
    let probe = crate::tx::within(conn, async |conn| {
        let migrated = sql_query("SELECT to_regclass('work_items') IS NOT NULL AS yes");
        if !migrated.get_result::<Answer>(&mut *conn).await?.yes {
            return Ok(Probe::NotMigrated);
        }
        let full = sql_query("SELECT almanac_disk_refuses_writes() AS yes").get_result::<Answer>(conn).await?.yes;
        Ok(if full { Probe::DiskFull } else { Probe::Neither })
    })
    .await;
    match probe {
        Err(lost) if is_connection_lost(&lost) => {
            StoreError::Unavailable(Cause::with_source(format!("{e} (the connection was lost with it: {lost})"), e))
        }
        Ok(Probe::NotMigrated) => StoreError::Unexpected(Cause::with_source(
            format!("{e}: the database is not migrated; run `almanac-worker migrate`"),
            e,
        )),
        Ok(Probe::DiskFull) => StoreError::Unavailable(Cause::with_source(
            format!(
                "{e} (the database server cannot write: its disk is full. Free space on the volume that holds \
                 PostgreSQL's data; the work waits and goes on by itself)"
            ),
            e,
        )),
        Ok(Probe::Neither) => StoreError::Unexpected(Cause::from_error(e)),
        // The probe's own failure is said with the error (the probe runs as the role that migrated: one that may
        // not make temporary tables, say), since a full disk cannot then be told from a failure of the work.
        Err(unasked) => StoreError::Unexpected(Cause::with_source(
            format!(
                "{e} (asking the server whether its disk is full failed too, so a full disk cannot be told apart: \
                 {unasked})"
            ),
            e,
        )),
    }
}

/// The indexes that hold a file's path beside its config's id ([`almanac_domain::ports::LONGEST_PATH`]).
pub(crate) const PATH_INDEXES: [&str; 3] =
    ["ix_media_assets_active_path", "asset_extra_paths_pkey", "failed_files_pkey"];

/// Past this many bytes no path is held, whatever its names: an index entry of PostgreSQL is at most 8,191 bytes
/// however it compresses, and past it the server's error names no index, so it could not be told from a failure
/// of the catalogue. Such a path is refused before anything is written.
const NO_PATH_PAST: usize = 8_000;

/// A path the catalogue can hold, or the refusal of a longer one than any it holds ([`NO_PATH_PAST`]).
pub(crate) fn path_held(path: &[u8]) -> Result<(), CatalogueError> {
    if path.len() <= NO_PATH_PAST {
        return Ok(());
    }
    Err(CatalogueError::Refused(Cause::new(format!(
        "its path is {} bytes long, and the catalogue holds none past {NO_PATH_PAST} bytes ({}). {SHORTEN_THE_PATH}",
        path.len(),
        paths_held()
    ))))
}

/// What to do about a path the catalogue cannot hold, said with each refusal of one.
const SHORTEN_THE_PATH: &str = "Shorten the names of its folders or its own, or move it nearer the library's folder";

/// The paths the catalogue holds, in words ([`almanac_domain::ports::LONGEST_PATH`]).
fn paths_held() -> String {
    format!("{} bytes whatever its names, more only when they repeat", almanac_domain::ports::LONGEST_PATH)
}

/// What of a write's values its error refuses, if that is what it does: a check (a table's or a domain's) or a
/// not-null constraint, or a path longer than its index holds (an error of no kind diesel knows that names one of
/// [`PATH_INDEXES`]: PostgreSQL names the index whose entry would be too large). Told by the error's kind and the
/// constraint it names; the server's words are quoted, never read.
pub(crate) fn refused_values(e: &DieselError) -> Option<String> {
    let DieselError::DatabaseError(kind, info) = e else { return None };
    match kind {
        DatabaseErrorKind::CheckViolation => {
            Some(format!("{} (constraint {})", info.message(), info.constraint_name().unwrap_or("unknown")))
        }
        DatabaseErrorKind::NotNullViolation => {
            Some(format!("{} (column {})", info.message(), info.column_name().unwrap_or("unknown")))
        }
        DatabaseErrorKind::Unknown => info.constraint_name().filter(|c| PATH_INDEXES.contains(c)).map(|index| {
            format!(
                "its path is longer than the catalogue's index of paths ({index}) holds: {}. {SHORTEN_THE_PATH}",
                paths_held()
            )
        }),
        _ => None,
    }
}

pub(crate) fn queue(e: DieselError) -> QueueError {
    from_diesel(e).into()
}

impl From<StoreError> for CatalogueError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(m) => CatalogueError::Unavailable(m),
            other => CatalogueError::Unexpected(Cause::from_error(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(kind: DatabaseErrorKind, said: &str) -> DieselError {
        DieselError::DatabaseError(kind, Box::new(said.to_owned()))
    }

    #[test]
    fn errors_of_the_connection_itself_are_outages_whatever_they_say() {
        // What diesel-async reports for an error with no SQLSTATE (the socket, the connection task), in any words.
        for said in ["connection closed", "Verbindung geschlossen", ""] {
            assert!(matches!(
                from_diesel(db(DatabaseErrorKind::UnableToSendCommand, said)),
                StoreError::Unavailable(_)
            ));
            assert!(matches!(from_diesel(db(DatabaseErrorKind::ClosedConnection, said)), StoreError::Unavailable(_)));
        }
        assert!(matches!(from_diesel(DieselError::BrokenTransactionManager), StoreError::Unavailable(_)));
        // A commit whose answer was lost, and the rollback after it: the outcome is unknown, and it is an outage.
        let lost_commit = DieselError::RollbackErrorOnCommit {
            rollback_error: Box::new(db(DatabaseErrorKind::UnableToSendCommand, "")),
            commit_error: Box::new(db(DatabaseErrorKind::Unknown, "")),
        };
        assert!(matches!(from_diesel(lost_commit), StoreError::Unavailable(_)));
        // A server that only reads (a standby after a failover, SQLSTATE 25006).
        assert!(matches!(from_diesel(db(DatabaseErrorKind::ReadOnlyTransaction, "")), StoreError::Unavailable(_)));
    }

    #[test]
    fn the_server_s_words_never_make_an_outage() {
        // Before, these English words were read: a server error the kinds do not place is unexpected, whatever it
        // says (the connection is asked instead, in `placed`).
        for said in ["terminating connection due to administrator command", "connection reset", "timed out"] {
            assert!(matches!(from_diesel(db(DatabaseErrorKind::Unknown, said)), StoreError::Unexpected(_)));
        }
        let both_answered = DieselError::RollbackErrorOnCommit {
            rollback_error: Box::new(db(DatabaseErrorKind::Unknown, "")),
            commit_error: Box::new(db(DatabaseErrorKind::SerializationFailure, "")),
        };
        assert!(matches!(from_diesel(both_answered), StoreError::Unexpected(_)));
    }

    #[test]
    fn the_driver_s_error_is_kept_as_the_source_through_the_ports() {
        let lost = from_diesel(db(DatabaseErrorKind::UnableToSendCommand, "Verbindung geschlossen"));
        let kept = |e: &(dyn std::error::Error + 'static)| {
            let mut chain = std::iter::successors(Some(e), |e| e.source());
            chain
                .find_map(|e| e.downcast_ref::<DieselError>())
                .map(|d| matches!(d, DieselError::DatabaseError(DatabaseErrorKind::UnableToSendCommand, _)))
        };
        assert_eq!(kept(&lost), Some(true), "{lost:?}");
        assert_eq!(kept(&QueueError::from(lost.clone())), Some(true));
        assert_eq!(kept(&CatalogueError::from(lost)), Some(true));
        let unexpected = from_diesel(db(DatabaseErrorKind::Unknown, "syntax"));
        assert_eq!(kept(&QueueError::from(unexpected.clone())), Some(false), "a bug keeps its source too");
        assert_eq!(kept(&CatalogueError::from(unexpected)), Some(false));
    }

    #[test]
    fn violations_are_conflicts_by_their_kind() {
        for kind in [
            DatabaseErrorKind::UniqueViolation,
            DatabaseErrorKind::ForeignKeyViolation,
            DatabaseErrorKind::CheckViolation,
        ] {
            assert!(matches!(from_diesel(db(kind, "Schlüssel existiert bereits")), StoreError::Conflict(_)));
        }
        assert!(matches!(from_diesel(DieselError::NotFound), StoreError::NotFound(_)));
    }

    /// [`PATH_INDEXES`] names every index of the schema over a file's path (a `bytea` column named `file_path`), and
    /// no other: a path index added later, or renamed, fails here.
    #[tokio::test]
    async fn the_path_indexes_are_every_index_of_a_files_path() {
        use diesel::sql_types::Text;
        use diesel_async::{AsyncConnection, AsyncPgConnection};
        #[derive(QueryableByName)]
        struct Name {
            #[diesel(sql_type = Text)]
            name: String,
        }
        let db = almanac_testdb::TestDatabase::create().await;
        let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
        let found: Vec<Name> = sql_query(
            "SELECT DISTINCT i.indexrelid::regclass::text AS name
               FROM pg_index AS i
               JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
              WHERE a.attname = 'file_path' AND a.atttypid = 'bytea'::regtype
              ORDER BY 1",
        )
        .load(&mut conn)
        .await
        .unwrap();
        let mut named = PATH_INDEXES.to_vec();
        named.sort_unstable();
        assert_eq!(found.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), named);
    }

    /// A write's values are refused by its error's kind, and a path too long by the index the error names; nothing
    /// else, whatever the server says.
    #[test]
    fn refused_values_are_told_by_kind_and_by_the_index_named() {
        assert!(refused_values(&db(DatabaseErrorKind::CheckViolation, "Prüfung verletzt")).is_some());
        assert!(refused_values(&db(DatabaseErrorKind::NotNullViolation, "null")).is_some());
        for kind in
            [DatabaseErrorKind::UniqueViolation, DatabaseErrorKind::Unknown, DatabaseErrorKind::SerializationFailure]
        {
            assert!(
                refused_values(&db(kind, "index row size exceeds maximum")).is_none(),
                "{kind:?} names no path index"
            );
        }
    }
}
