//! Why an operator action was not done: one error type for the CLI and the page, which choose their exit codes
//! and HTTP statuses from its variants alone. The store's and the ports' errors become it here, each in one
//! `From`, so a change of theirs is a change in this file only.

use almanac_domain::{DomainError, QueueError, ports::CatalogueError};
use almanac_store_pg::StoreError;

/// An error of another layer kept as the source of an [`OpError`] (its words are shown as they are).
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why an action was not done. Every variant but the last three changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// The request itself is wrong (a malformed id, an unknown kind, a payload that is not the kind's).
    #[error("{0}")]
    BadInput(String),
    /// It names something that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// What it names is not in a state for it (retrying a running item, enqueueing for a deactivated config).
    #[error("{0}")]
    Refused(String),
    /// A rule that keeps the libraries safe forbids it (roots that overlap, a root that is not a folder,
    /// removing a config that is active): the operator has to change what they asked for.
    #[error("{0}")]
    Forbidden(String),
    /// The store refused it as conflicting with what is stored (a root registered twice, say).
    #[error("{0}")]
    Conflict(String),
    /// The database could not be reached or did not answer in time.
    #[error(transparent)]
    Unavailable(Cause),
    /// A setting to fix (a refused TLS certificate, a connection string that cannot be read).
    #[error(transparent)]
    Settings(Cause),
    /// Anything else the database or a port said.
    #[error(transparent)]
    Failed(Cause),
    /// The file system refused something the action needed.
    #[error("{what}")]
    Io {
        /// What was being done, with the path.
        what: String,
        /// The file system's answer.
        #[source]
        source: std::io::Error,
    },
}

impl OpError {
    /// Whether the action may have been partly done, or the database's state is unknown: an answer should not
    /// say that nothing was changed.
    pub fn state_unknown(&self) -> bool {
        matches!(self, OpError::Unavailable(_) | OpError::Settings(_) | OpError::Failed(_) | OpError::Io { .. })
    }
}

impl From<StoreError> for OpError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(m) => OpError::NotFound(m),
            StoreError::Conflict(m) => OpError::Conflict(m),
            e @ StoreError::Unavailable(_) => OpError::Unavailable(e.into()),
            e @ StoreError::Config(_) => OpError::Settings(e.into()),
            e @ (StoreError::Migration(_) | StoreError::Unexpected(_)) => OpError::Failed(e.into()),
        }
    }
}

impl From<QueueError> for OpError {
    fn from(e: QueueError) -> Self {
        match e {
            // An outage stays an outage (exit 3, 503).
            e @ QueueError::Unavailable(_) => OpError::Unavailable(e.into()),
            QueueError::Rejected(m) => OpError::Refused(m),
            e @ QueueError::Unexpected(_) => OpError::Failed(e.into()),
        }
    }
}

impl From<CatalogueError> for OpError {
    fn from(e: CatalogueError) -> Self {
        match e {
            e @ CatalogueError::Unavailable(_) => OpError::Unavailable(e.into()),
            e @ (CatalogueError::Lost | CatalogueError::Refused(_) | CatalogueError::Unexpected(_)) => {
                OpError::Failed(e.into())
            }
        }
    }
}

impl From<DomainError> for OpError {
    fn from(e: DomainError) -> Self {
        OpError::BadInput(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_stays_an_outage_and_a_missing_thing_is_not_found_whichever_layer_says_so() {
        let unavailable = [
            OpError::from(StoreError::Unavailable("gone".into())),
            OpError::from(QueueError::Unavailable("gone".into())),
            OpError::from(CatalogueError::Unavailable("gone".into())),
        ];
        for e in unavailable {
            assert!(matches!(e, OpError::Unavailable(_)) && e.state_unknown() && e.to_string().contains("gone"));
        }
        assert!(
            matches!(OpError::from(StoreError::NotFound("no config".into())), OpError::NotFound(m) if m == "no config")
        );
        assert!(matches!(OpError::from(StoreError::Config("tls".into())), OpError::Settings(_)));
        assert!(matches!(OpError::from(StoreError::Conflict("twice".into())), OpError::Conflict(_)));
        assert!(matches!(OpError::from(QueueError::Rejected("no".into())), OpError::Refused(m) if m == "no"));
        assert!(!OpError::Refused("no".into()).state_unknown());
    }
}
