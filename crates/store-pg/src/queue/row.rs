//! A work item's row, as every statement of the queue reads it back.

use std::str::FromStr;

use almanac_domain::{DedupKey, QueueError, Scope, Status, StorageConfigId, WorkItem, WorkItemId, WorkKind, WorkerId};
use chrono::{DateTime, Utc};
use diesel::QueryableByName;
use diesel::sql_types::{Integer, Jsonb, Nullable, Text, Timestamptz, Uuid};

/// `SELECT *` of `work_items`.
#[derive(QueryableByName)]
pub(crate) struct WorkItemRow {
    #[diesel(sql_type = Uuid)]
    pub(super) id: uuid::Uuid,
    #[diesel(sql_type = Text)]
    pub(super) kind: String,
    #[diesel(sql_type = Nullable<Uuid>)]
    pub(super) storage_config_id: Option<uuid::Uuid>,
    #[diesel(sql_type = Text)]
    pub(super) status: String,
    #[diesel(sql_type = Jsonb)]
    pub(super) payload: serde_json::Value,
    #[diesel(sql_type = Nullable<Text>)]
    pub(super) dedup_key: Option<String>,
    #[diesel(sql_type = Timestamptz)]
    pub(super) requested_at: DateTime<Utc>,
    #[diesel(sql_type = Timestamptz)]
    pub(super) run_after: DateTime<Utc>,
    #[diesel(sql_type = Integer)]
    pub(super) attempt: i32,
    /// The claim's token (the fence's; not part of [`WorkItem`], which the web backend reads too).
    #[diesel(sql_type = Nullable<Uuid>)]
    pub(super) claim_token: Option<uuid::Uuid>,
    #[diesel(sql_type = Integer)]
    pub(super) failures: i32,
    #[diesel(sql_type = Integer)]
    pub(super) stalls: i32,
    #[diesel(sql_type = Integer)]
    pub(super) max_attempts: i32,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub(super) lease_expires_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Text>)]
    pub(super) worker_id: Option<String>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub(super) started_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub(super) heartbeat_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub(super) finished_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub(super) cancel_requested_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Text>)]
    pub(super) last_error: Option<String>,
    #[diesel(sql_type = Nullable<Jsonb>)]
    pub(super) progress: Option<serde_json::Value>,
    #[diesel(sql_type = Nullable<Jsonb>)]
    pub(super) result: Option<serde_json::Value>,
}

impl TryFrom<WorkItemRow> for WorkItem {
    type Error = QueueError;
    fn try_from(r: WorkItemRow) -> Result<Self, QueueError> {
        let bad = |e: almanac_domain::DomainError| QueueError::Unexpected(format!("work item {}: {e}", r.id).into());
        Ok(WorkItem {
            id: WorkItemId::from_uuid(r.id),
            kind: WorkKind::from_str(&r.kind).map_err(bad)?,
            scope: Scope::from(r.storage_config_id.map(StorageConfigId::from_uuid)),
            status: Status::from_str(&r.status).map_err(bad)?,
            payload: r.payload,
            dedup_key: r.dedup_key.map(DedupKey::new).transpose().map_err(bad)?,
            requested_at: r.requested_at,
            run_after: r.run_after,
            attempt: r.attempt,
            failures: r.failures,
            stalls: r.stalls,
            max_attempts: r.max_attempts,
            lease_expires_at: r.lease_expires_at,
            worker_id: r.worker_id.map(WorkerId::new).transpose().map_err(bad)?,
            started_at: r.started_at,
            heartbeat_at: r.heartbeat_at,
            finished_at: r.finished_at,
            cancel_requested_at: r.cancel_requested_at,
            last_error: r.last_error,
            progress: r.progress,
            result: r.result,
        })
    }
}

/// A status as the database spells it.
pub(super) fn parse_status(s: &str) -> Result<Status, QueueError> {
    Status::from_str(s).map_err(|e| QueueError::Unexpected(e.to_string().into()))
}

/// A row's status and when it may run next.
#[derive(QueryableByName)]
pub(super) struct StatusRow {
    #[diesel(sql_type = Text)]
    pub(super) status: String,
    #[diesel(sql_type = Timestamptz)]
    pub(super) run_after: DateTime<Utc>,
}
