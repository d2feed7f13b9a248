use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{StorageConfigId, WorkItemId};

/// A value that breaks one of the domain's rules. The message names the rule and the offending value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
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
}

/// What a work item does. Stored as text (`crawl`, `burst_detection`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkKind {
    /// Walk a config's folder, ingest new or changed media, soft-delete what vanished.
    Crawl,
    /// Group a config's rapid-fire shots into bursts.
    BurstDetection,
    /// Remove a config's soft-deleted assets past retention: proxy files first, then rows.
    Purge,
    /// Delete the proxies of given assets, so they are regenerated.
    ProxyDeletion,
    /// Delete orphan proxy files older than an hour.
    ProxySweep,
    /// Delete expired refresh tokens.
    TokenCleanup,
    /// Delete finished work items past retention.
    WorkItemRetention,
}

/// Which scope a kind takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeRule {
    /// Always scoped to a storage config.
    Config,
    /// Never scoped.
    Unscoped,
    /// Either.
    Either,
}

impl WorkKind {
    /// Every kind, in a stable order.
    pub const ALL: [WorkKind; 7] = [
        WorkKind::Crawl,
        WorkKind::BurstDetection,
        WorkKind::Purge,
        WorkKind::ProxyDeletion,
        WorkKind::ProxySweep,
        WorkKind::TokenCleanup,
        WorkKind::WorkItemRetention,
    ];

    /// The kind's name as stored in the database.
    pub const fn as_str(self) -> &'static str {
        match self {
            WorkKind::Crawl => "crawl",
            WorkKind::BurstDetection => "burst_detection",
            WorkKind::Purge => "purge",
            WorkKind::ProxyDeletion => "proxy_deletion",
            WorkKind::ProxySweep => "proxy_sweep",
            WorkKind::TokenCleanup => "token_cleanup",
            WorkKind::WorkItemRetention => "work_item_retention",
        }
    }

    /// The scope this kind takes.
    pub const fn scope_rule(self) -> ScopeRule {
        match self {
            WorkKind::Crawl | WorkKind::BurstDetection | WorkKind::Purge => ScopeRule::Config,
            WorkKind::ProxySweep | WorkKind::TokenCleanup | WorkKind::WorkItemRetention => ScopeRule::Unscoped,
            WorkKind::ProxyDeletion => ScopeRule::Either,
        }
    }

    fn names() -> String {
        Self::ALL.map(WorkKind::as_str).join(", ")
    }
}

impl fmt::Display for WorkKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WorkKind {
    type Err = DomainError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| DomainError::UnknownKind(s.to_owned()))
    }
}

/// Where a work item works: one storage config (serialised with the config's other items), or nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Scope {
    /// Scoped to one storage config: at most one such item runs at a time.
    Config(StorageConfigId),
    /// Not serialised against anything.
    Unscoped,
}

impl Scope {
    /// The storage config, when scoped.
    pub const fn storage_config(self) -> Option<StorageConfigId> {
        match self {
            Scope::Config(id) => Some(id),
            Scope::Unscoped => None,
        }
    }
}

impl From<Option<StorageConfigId>> for Scope {
    fn from(id: Option<StorageConfigId>) -> Self {
        id.map_or(Scope::Unscoped, Scope::Config)
    }
}

/// A work item's status. Stored as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Waiting to be claimed (once `run_after` has passed).
    Queued,
    /// Claimed by a Worker, whose lease has not been recovered.
    Running,
    /// Finished: the handler succeeded.
    Succeeded,
    /// Finished: out of retries, not retryable, or stalled too often.
    Failed,
    /// Finished: cancelled on request.
    Cancelled,
}

impl Status {
    /// Every status, in a stable order.
    pub const ALL: [Status; 5] =
        [Status::Queued, Status::Running, Status::Succeeded, Status::Failed, Status::Cancelled];

    /// The status as stored in the database.
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Running => "running",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    /// Whether the item is finished (nothing will run it again).
    pub const fn is_finished(self) -> bool {
        matches!(self, Status::Succeeded | Status::Failed | Status::Cancelled)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Status {
    type Err = DomainError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| DomainError::UnknownStatus(s.to_owned()))
    }
}

/// The fencing token: the number of the claim that started this attempt (1 for the first claim).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Attempt(i32);

impl Attempt {
    /// Wraps a claim number; claims count from 1.
    pub fn new(n: i32) -> Result<Self, DomainError> {
        if n >= 1 {
            Ok(Self(n))
        } else {
            Err(DomainError::OutOfRange { what: "attempt", accepted: "at least 1", got: n.to_string() })
        }
    }

    /// The claim number.
    pub const fn get(self) -> i32 {
        self.0
    }
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A key under which at most one item is queued at a time.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DedupKey(String);

impl DedupKey {
    /// A non-blank key of at most 200 characters.
    pub fn new(key: impl Into<String>) -> Result<Self, DomainError> {
        let key = key.into();
        if key.trim().is_empty() || key.chars().count() > 200 {
            return Err(DomainError::OutOfRange {
                what: "dedup key",
                accepted: "1 to 200 characters, not blank",
                got: format!("{key:?}"),
            });
        }
        Ok(Self(key))
    }

    /// The key under which one kind's work of one scope is queued once: `crawl:<config id>` for a config's
    /// crawl, `proxy_sweep` for an unscoped kind. The scheduler, the operator's page and the web backend use
    /// it, so a crawl asked for by hand joins a scheduled one already queued instead of running twice.
    pub fn for_work(kind: WorkKind, scope: Scope) -> Self {
        match scope {
            Scope::Config(config) => Self(format!("{kind}:{config}")),
            Scope::Unscoped => Self(kind.to_string()),
        }
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DedupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Read as the text it is (`item.dedup_key.as_deref()`).
impl std::ops::Deref for DedupKey {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

/// Names one Worker process in the queue (`work_items.worker_id`) and in logs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WorkerId(String);

impl WorkerId {
    /// A non-blank id of at most 200 characters.
    pub fn new(id: impl Into<String>) -> Result<Self, DomainError> {
        let id = id.into();
        if id.trim().is_empty() || id.chars().count() > 200 {
            return Err(DomainError::OutOfRange {
                what: "worker id",
                accepted: "1 to 200 characters, not blank",
                got: format!("{id:?}"),
            });
        }
        Ok(Self(id))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Read as the text it is (`item.worker_id.as_deref()`).
impl std::ops::Deref for WorkerId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

/// How long a claim or heartbeat holds an item before any Worker may recover it. At least one second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeaseDuration(Duration);

impl LeaseDuration {
    /// The default lease: 60 seconds.
    pub const DEFAULT: LeaseDuration = LeaseDuration(Duration::from_secs(60));

    /// A lease of at least one second and at most one day.
    pub fn new(lease: Duration) -> Result<Self, DomainError> {
        if lease < Duration::from_secs(1) || lease > Duration::from_secs(86_400) {
            return Err(DomainError::OutOfRange {
                what: "lease",
                accepted: "between 1s and 24h",
                got: format!("{lease:?}"),
            });
        }
        Ok(Self(lease))
    }

    /// The lease.
    pub const fn get(self) -> Duration {
        self.0
    }

    /// Half the lease: the self-stop deadline after the last successful heartbeat (rule 7).
    pub fn half(self) -> Duration {
        self.0 / 2
    }
}

/// A request to enqueue work. Build it with [`NewWorkItem::new`], which checks kind against scope.
#[derive(Debug, Clone, PartialEq)]
pub struct NewWorkItem {
    kind: WorkKind,
    scope: Scope,
    /// Kind-specific input.
    pub payload: serde_json::Value,
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

    /// Work of `kind` on `scope`, with an empty payload. Fails when the kind does not take that scope.
    pub fn new(kind: WorkKind, scope: Scope) -> Result<Self, DomainError> {
        let rule = match (kind.scope_rule(), scope) {
            (ScopeRule::Config, Scope::Unscoped) => Some("needs a storage config"),
            (ScopeRule::Unscoped, Scope::Config(_)) => Some("takes no storage config"),
            _ => None,
        };
        if let Some(rule) = rule {
            return Err(DomainError::ScopeMismatch { kind, rule });
        }
        Ok(Self {
            kind,
            scope,
            payload: serde_json::Value::Object(Default::default()),
            dedup_key: None,
            run_after: None,
            max_attempts: Self::DEFAULT_MAX_ATTEMPTS,
        })
    }

    /// Sets the payload.
    pub fn with_payload(mut self, payload: serde_json::Value) -> Self {
        self.payload = payload;
        self
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
    /// The fencing token: number of claims so far.
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
mod tests {
    use super::*;

    #[test]
    fn keys_and_worker_ids_read_as_their_text() {
        let key = DedupKey::new("crawl:x").unwrap();
        assert_eq!((key.to_string(), &*key), ("crawl:x".to_owned(), "crawl:x"));
        assert_eq!(Some(key).as_deref(), Some("crawl:x"));
        let worker = WorkerId::new("nas-1").unwrap();
        assert_eq!((worker.to_string(), &*worker), ("nas-1".to_owned(), "nas-1"));
    }

    #[test]
    fn dedup_keys_for_work_name_the_kind_and_the_config() {
        let config = StorageConfigId::from_uuid(uuid::Uuid::nil());
        assert_eq!(
            DedupKey::for_work(WorkKind::Crawl, Scope::Config(config)).as_str(),
            "crawl:00000000-0000-0000-0000-000000000000"
        );
        assert_eq!(DedupKey::for_work(WorkKind::ProxySweep, Scope::Unscoped).as_str(), "proxy_sweep");
        assert_ne!(
            DedupKey::for_work(WorkKind::Purge, Scope::Config(config)),
            DedupKey::for_work(WorkKind::Crawl, Scope::Config(config))
        );
    }

    #[test]
    fn kinds_round_trip_through_their_stored_names() {
        for kind in WorkKind::ALL {
            assert_eq!(kind.as_str().parse::<WorkKind>(), Ok(kind));
        }
        assert!(matches!("crawling".parse::<WorkKind>(), Err(DomainError::UnknownKind(_))));
    }

    #[test]
    fn statuses_round_trip_and_only_three_are_finished() {
        for status in Status::ALL {
            assert_eq!(status.as_str().parse::<Status>(), Ok(status));
        }
        let finished: Vec<_> = Status::ALL.into_iter().filter(|s| s.is_finished()).collect();
        assert_eq!(finished, [Status::Succeeded, Status::Failed, Status::Cancelled]);
        assert!("done".parse::<Status>().is_err());
    }

    #[test]
    fn config_kinds_need_a_config_and_unscoped_kinds_refuse_one() {
        let config = Scope::Config(StorageConfigId::new());
        for kind in WorkKind::ALL {
            let scoped = NewWorkItem::new(kind, config).is_ok();
            let unscoped = NewWorkItem::new(kind, Scope::Unscoped).is_ok();
            let expected = match kind.scope_rule() {
                ScopeRule::Config => (true, false),
                ScopeRule::Unscoped => (false, true),
                ScopeRule::Either => (true, true),
            };
            assert_eq!((scoped, unscoped), expected, "{kind}");
        }
        assert_eq!(WorkKind::ProxyDeletion.scope_rule(), ScopeRule::Either);
        assert_eq!(WorkKind::Purge.scope_rule(), ScopeRule::Config);
        assert_eq!(WorkKind::TokenCleanup.scope_rule(), ScopeRule::Unscoped);
    }

    #[test]
    fn attempts_count_from_one() {
        assert!(Attempt::new(0).is_err());
        assert_eq!(Attempt::new(1).map(Attempt::get), Ok(1));
        assert_eq!(Attempt::new(7).map(|a| (a.get(), a.to_string())), Ok((7, "7".to_owned())));
    }

    #[test]
    fn display_forms_are_the_stored_forms_and_errors_list_the_choices() {
        assert_eq!(WorkKind::BurstDetection.to_string(), "burst_detection");
        assert_eq!(Status::Cancelled.to_string(), "cancelled");
        let err = "crawling".parse::<WorkKind>().unwrap_err().to_string();
        assert!(
            err.contains(
                "crawl, burst_detection, purge, proxy_deletion, proxy_sweep, token_cleanup, work_item_retention"
            ),
            "{err}"
        );
    }

    #[test]
    fn a_scope_names_its_config() {
        let c = StorageConfigId::new();
        assert_eq!(Scope::Config(c).storage_config(), Some(c));
        assert_eq!(Scope::Unscoped.storage_config(), None);
        assert_eq!(Scope::from(Some(c)), Scope::Config(c));
        assert_eq!(Scope::from(None), Scope::Unscoped);
    }

    #[test]
    fn new_items_default_to_five_attempts() {
        let item = NewWorkItem::new(WorkKind::Crawl, Scope::Config(StorageConfigId::new())).unwrap();
        assert_eq!(item.max_attempts(), NewWorkItem::DEFAULT_MAX_ATTEMPTS);
        assert_eq!(item.max_attempts(), 5);
        assert_eq!(item.with_max_attempts(3).map(|i| i.max_attempts()), Ok(3));
    }

    #[test]
    fn blank_or_overlong_keys_and_ids_are_refused() {
        assert!(DedupKey::new(" ").is_err());
        assert!(DedupKey::new("x".repeat(201)).is_err());
        assert_eq!(DedupKey::new("x".repeat(200)).map(|k| k.as_str().len()), Ok(200));
        assert!(WorkerId::new("").is_err());
        assert!(WorkerId::new("w".repeat(201)).is_err());
        assert_eq!(WorkerId::new("nas-1").map(|w| w.to_string()), Ok("nas-1".to_owned()));
        assert_eq!(WorkerId::new("nas-2").map(|w| w.as_str().to_owned()), Ok("nas-2".to_owned()));
    }

    #[test]
    fn leases_are_between_a_second_and_a_day() {
        assert!(LeaseDuration::new(Duration::from_millis(999)).is_err());
        assert!(LeaseDuration::new(Duration::from_secs(86_401)).is_err());
        let lease = LeaseDuration::new(Duration::from_secs(1)).unwrap();
        assert_eq!(lease.half(), Duration::from_millis(500));
        assert_eq!(
            LeaseDuration::new(Duration::from_secs(86_400)).map(LeaseDuration::get),
            Ok(Duration::from_secs(86_400))
        );
        assert_eq!(LeaseDuration::DEFAULT.half(), Duration::from_secs(30));
    }

    #[test]
    fn max_attempts_must_be_positive() {
        let item = NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped).unwrap();
        assert!(item.clone().with_max_attempts(0).is_err());
        assert_eq!(item.with_max_attempts(1).map(|i| i.max_attempts()), Ok(1));
    }
}
