//! Work items: their kinds (one table, `kinds`), the queue's small values (`values`), what is enqueued
//! ([`NewWorkItem`], built from a kind's typed arguments) and what is stored ([`WorkItem`]).

mod kinds;
mod values;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::args::WorkArgs;
use crate::ids::WorkItemId;

pub use kinds::{Scope, ScopeRule, WorkKind};
pub use values::{Attempt, ClaimToken, DedupKey, LeaseDuration, Status, WorkerId};

/// A value that breaks one of the domain's rules. The message names the rule and the offending value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DomainError {
    /// A kind was given the wrong scope (e.g. a crawl without a storage config).
    #[error("a {kind} work item {rule}")]
    ScopeMismatch {
        /// The kind.
        kind: WorkKind,
        /// What the kind requires, in words.
        rule: &'static str,
    },
    /// Text that names no known work kind.
    #[error("unknown work kind {0:?}: expected one of {kinds}", kinds = WorkKind::names())]
    UnknownKind(String),
    /// Text that names no known status.
    #[error("unknown work item status {0:?}: expected queued, running, succeeded, failed or cancelled")]
    UnknownStatus(String),
    /// A value outside its accepted range.
    #[error("{what} must be {accepted}, got {got}")]
    OutOfRange {
        /// What was being checked.
        what: &'static str,
        /// The accepted range, in words.
        accepted: &'static str,
        /// The value given.
        got: String,
    },
    /// A work item's payload that is not that kind's arguments.
    #[error("the payload of a {kind} work item is not valid: {reason}")]
    Payload {
        /// The kind.
        kind: WorkKind,
        /// What is wrong with it (serde's words: the field, and what was expected).
        reason: String,
    },
    /// A work item's payload with a field this build's arguments of its kind do not have: a typo, or an item
    /// queued by a newer version of Almanac (a web backend or Worker upgraded first), which a newer Worker runs.
    #[error(
        "the payload of a {kind} work item has a field this build does not know ({reason}): a typo, or an item \
         queued by a newer version of Almanac"
    )]
    UnknownField {
        /// The kind.
        kind: WorkKind,
        /// serde's words: the field, and the fields expected.
        reason: String,
    },
}
/// A request to enqueue work: a kind's typed arguments on a scope ([`NewWorkItem::from_args`], or
/// [`WorkArgs::into_item`]), which checks the kind against the scope.
#[derive(Debug, Clone, PartialEq)]
pub struct NewWorkItem {
    kind: WorkKind,
    scope: Scope,
    /// The kind's arguments, serialized.
    payload: serde_json::Value,
    /// When set and an item with this key is queued, enqueue returns that item instead.
    pub dedup_key: Option<DedupKey>,
    /// Not claimed before this instant; `None` means now (database clock).
    pub run_after: Option<DateTime<Utc>>,
    /// Retry budget; at least 1.
    max_attempts: i32,
}

impl NewWorkItem {
    /// Default retry budget: an item fails for good on its fifth handler error.
    pub const DEFAULT_MAX_ATTEMPTS: i32 = 5;

    /// Work of `kind` on `scope` without arguments (an empty payload, which a kind reads as its defaults).
    /// Fails when the kind does not take that scope.
    pub fn new(kind: WorkKind, scope: Scope) -> Result<Self, DomainError> {
        kind.check_scope(scope)?;
        Ok(Self {
            kind,
            scope,
            payload: serde_json::Value::Object(Default::default()),
            dedup_key: None,
            run_after: None,
            max_attempts: Self::DEFAULT_MAX_ATTEMPTS,
        })
    }

    /// Work of the arguments' kind on `scope`, with these arguments. Fails when the kind does not take that
    /// scope, or the arguments break a rule of the kind ([`WorkArgs::check`]).
    pub fn from_args<A: WorkArgs>(args: &A, scope: Scope) -> Result<Self, DomainError> {
        args.check()?;
        let mut item = Self::new(A::KIND, scope)?;
        item.payload = args.to_payload();
        Ok(item)
    }

    /// Work of `kind` on `scope` whose arguments a person wrote as JSON (the CLI's `--payload`): read as that
    /// kind's arguments, so a wrong payload is refused at once (naming the field at fault) instead of failing
    /// in the handler later, and stored as those arguments serialize. Fails when the kind does not take that
    /// scope.
    pub fn from_json(kind: WorkKind, scope: Scope, payload: &serde_json::Value) -> Result<Self, DomainError> {
        kind.check_scope(scope)?;
        kind.typed_item(payload, scope)
    }

    /// Sets the dedup key.
    pub fn with_dedup_key(mut self, key: DedupKey) -> Self {
        self.dedup_key = Some(key);
        self
    }

    /// Sets the earliest instant the item may run.
    pub fn with_run_after(mut self, at: DateTime<Utc>) -> Self {
        self.run_after = Some(at);
        self
    }

    /// Sets the retry budget (at least 1).
    pub fn with_max_attempts(mut self, max_attempts: i32) -> Result<Self, DomainError> {
        if max_attempts < 1 {
            return Err(DomainError::OutOfRange {
                what: "max attempts",
                accepted: "at least 1",
                got: max_attempts.to_string(),
            });
        }
        self.max_attempts = max_attempts;
        Ok(self)
    }

    /// The kind.
    pub fn kind(&self) -> WorkKind {
        self.kind
    }

    /// The scope.
    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// The retry budget.
    pub fn max_attempts(&self) -> i32 {
        self.max_attempts
    }

    /// The arguments, as they are stored in `work_items.payload`.
    pub fn payload(&self) -> &serde_json::Value {
        &self.payload
    }
}

/// A work item as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkItem {
    /// Its id.
    pub id: WorkItemId,
    /// What it does.
    pub kind: WorkKind,
    /// Where it works.
    pub scope: Scope,
    /// Where it is in its life.
    pub status: Status,
    /// Kind-specific input.
    pub payload: serde_json::Value,
    /// Its dedup key, if any.
    pub dedup_key: Option<DedupKey>,
    /// Claim order, oldest first.
    pub requested_at: DateTime<Utc>,
    /// Not claimed before this instant.
    pub run_after: DateTime<Utc>,
    /// Claims so far: the number of the current or last attempt (the fence names it with the claim's token).
    pub attempt: i32,
    /// Handler errors so far.
    pub failures: i32,
    /// Lease expiries so far.
    pub stalls: i32,
    /// Retry budget.
    pub max_attempts: i32,
    /// When a running item's lease expires.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// The Worker that holds or last held it.
    pub worker_id: Option<WorkerId>,
    /// When the current or last attempt was claimed.
    pub started_at: Option<DateTime<Utc>>,
    /// Last successful heartbeat of the current attempt.
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// When it finished.
    pub finished_at: Option<DateTime<Utc>>,
    /// When a cancel was requested while it ran.
    pub cancel_requested_at: Option<DateTime<Utc>>,
    /// The last error.
    pub last_error: Option<String>,
    /// The handler's last reported progress.
    pub progress: Option<serde_json::Value>,
    /// The handler's result on success.
    pub result: Option<serde_json::Value>,
}

#[cfg(test)]
mod tests;
