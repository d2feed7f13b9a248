//! The one place database errors become port errors.

use almanac_domain::{CatalogueError, QueueError};
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel_async::pooled_connection::deadpool::PoolError;

/// The index that keeps at most one running item per storage config (ADR 0008, rule 2).
pub(crate) const RUNNING_CONFIG_INDEX: &str = "ix_work_items_running_config";

/// What went wrong in the store, for callers outside the work queue port (CLI, web backend).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The database could not be reached or did not answer in time.
    #[error("the database is unavailable: {0}. Check that PostgreSQL is running and that DATABASE_URL points at it")]
    Unavailable(String),
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
    Migration(String),
    /// Anything else the database said.
    #[error("database error: {0}")]
    Unexpected(String),
}

impl From<StoreError> for QueueError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(m) => QueueError::Unavailable(m),
            StoreError::Conflict(m) | StoreError::NotFound(m) => QueueError::Rejected(m),
            other => QueueError::Unexpected(other.to_string()),
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
        other => StoreError::Unavailable(other.to_string()),
    }
}

/// Whether `e` is a unique violation of the index or constraint named `name`.
pub(crate) fn is_unique_violation_of(e: &DieselError, name: &str) -> bool {
    matches!(e, DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, info) if info.constraint_name() == Some(name))
}

/// Whether a statement was cancelled by `lock_timeout` (SQLSTATE 55P03, which diesel does not name: recognised
/// by the server's message, so a server whose messages are translated reports it as any other error).
pub(crate) fn is_lock_timeout(e: &DieselError) -> bool {
    matches!(e, DieselError::DatabaseError(_, info) if info.message().contains("lock timeout"))
}

/// Maps a query error: lost connections are outages, constraint violations are conflicts, the rest unexpected.
pub(crate) fn from_diesel(e: DieselError) -> StoreError {
    match &e {
        DieselError::DatabaseError(DatabaseErrorKind::ClosedConnection, _) => StoreError::Unavailable(e.to_string()),
        DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, info) => StoreError::Conflict(format!(
            "{} (constraint {})",
            info.message(),
            info.constraint_name().unwrap_or("unknown")
        )),
        DieselError::DatabaseError(
            DatabaseErrorKind::ForeignKeyViolation | DatabaseErrorKind::CheckViolation,
            info,
        ) => StoreError::Conflict(format!(
            "{} (constraint {})",
            info.message(),
            info.constraint_name().unwrap_or("unknown")
        )),
        DieselError::NotFound => StoreError::NotFound(e.to_string()),
        // 42P01: the schema is missing, i.e. the database was never migrated.
        DieselError::DatabaseError(_, info)
            if info.message().starts_with("relation") && info.message().ends_with("does not exist") =>
        {
            StoreError::Unexpected(format!(
                "{}: the database is not migrated; run `almanac-worker migrate`",
                info.message()
            ))
        }
        DieselError::DatabaseError(DatabaseErrorKind::Unknown, info) if is_connection_message(info.message()) => {
            StoreError::Unavailable(e.to_string())
        }
        _ => StoreError::Unexpected(e.to_string()),
    }
}

fn is_connection_message(message: &str) -> bool {
    ["connection closed", "terminating connection", "error communicating", "timed out", "connection reset"]
        .iter()
        .any(|m| message.to_ascii_lowercase().contains(m))
}

pub(crate) fn queue(e: DieselError) -> QueueError {
    from_diesel(e).into()
}

impl From<StoreError> for CatalogueError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(m) => CatalogueError::Unavailable(m),
            other => CatalogueError::Unexpected(other.to_string()),
        }
    }
}

pub(crate) fn catalogue(e: DieselError) -> CatalogueError {
    from_diesel(e).into()
}
