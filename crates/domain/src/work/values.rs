//! The small values of the queue: a status, an attempt (the claim number), a claim's token, a dedup key, a
//! Worker's id, a lease.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{DomainError, Scope, WorkKind};

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

/// The number of the claim that started this attempt (1 for the first claim). Not unique on its own: a claim
/// that a failover lost leaves the item queued under its old number, and the next claim gets the lost one's
/// number again; the fence names its claim by [`ClaimToken`] too.
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

/// A claim's own token (`work_items.claim_token`): a random value that each claim sets and that no other claim
/// of any item has, not even one that got the same attempt number because a failover lost the first (ADR 0008,
/// amendment "a fence names its claim"). What a fence names its claim by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClaimToken(uuid::Uuid);

impl ClaimToken {
    /// The token a claim set, as the database gave it.
    pub const fn from_uuid(token: uuid::Uuid) -> Self {
        Self(token)
    }

    /// The token as the database stores it.
    pub const fn as_uuid(self) -> uuid::Uuid {
        self.0
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
