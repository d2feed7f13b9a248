//! The operator's statements on the queue, for the CLI and the page: the summary, listings, retries, pauses and
//! the deletion of finished items. The queue's rules (enqueue, claim, fenced outcomes, recovery) are in
//! `queue.rs`.

use std::str::FromStr;

use almanac_domain::{Status, StorageConfigId, WorkItem, WorkItemId, WorkKind};
use chrono::{DateTime, Utc};
use diesel::QueryableByName;
use diesel::sql_query;
use diesel::sql_types::{Array, BigInt, Bool, Nullable, Text, Uuid};
use diesel_async::RunQueryDsl;

use crate::queue::{WorkItemRow, delete_finished_query};
use crate::tx::Lane;
use crate::{PgStore, StoreError};

/// Which items to list or retry: each field, when set, narrows the choice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ItemFilter {
    /// Of this status.
    pub status: Option<Status>,
    /// Of this kind.
    pub kind: Option<WorkKind>,
    /// Of this storage config.
    pub config: Option<StorageConfigId>,
}

/// One row of the queue summary: how many items of a kind have a status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSummaryRow {
    /// The kind.
    pub kind: WorkKind,
    /// The status.
    pub status: Status,
    /// How many.
    pub count: i64,
}

#[derive(QueryableByName)]
struct SummaryRow {
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = BigInt)]
    count: i64,
}

impl PgStore {
    /// How many items of each kind have each status.
    #[mutants::skip]
    pub async fn queue_summary(&self) -> Result<Vec<QueueSummaryRow>, StoreError> {
        let rows: Vec<SummaryRow> = self
            .read(async |conn| {
                sql_query(
            "SELECT kind, status, count(*) AS count FROM work_items GROUP BY kind, status ORDER BY kind, status",
        )
        .load(conn)
        .await
            })
            .await?;
        rows.into_iter()
            .map(|r| {
                let bad = |e: almanac_domain::DomainError| StoreError::Unexpected(format!("queue summary: {e}").into());
                Ok(QueueSummaryRow {
                    kind: WorkKind::from_str(&r.kind).map_err(bad)?,
                    status: Status::from_str(&r.status).map_err(bad)?,
                    count: r.count,
                })
            })
            .collect()
    }

    /// The operator asks for queued item `id` now: it is due at once (a retry's backoff or the quiet hours'
    /// hold are lifted) and no longer the scheduler's, so quiet hours do not hold it again. Answers whether it
    /// was waiting.
    #[mutants::skip]
    pub async fn run_now(&self, id: WorkItemId) -> Result<bool, StoreError> {
        let moved = self
            .transaction(Lane::Shared, async |conn| {
                sql_query(
                    "WITH disowned AS (UPDATE schedule_periods SET work_item_id = NULL WHERE work_item_id = $1)
                     UPDATE work_items SET run_after = now() WHERE id = $1 AND status = 'queued' AND run_after > now()",
                )
                .bind::<Uuid, _>(id.as_uuid())
                .execute(conn)
                .await
            })
            .await?;
        Ok(moved > 0)
    }

    /// Pauses (or resumes) a storage config: its queued work is not claimed while paused; what runs finishes.
    /// Answers whether it was paused before.
    #[mutants::skip]
    pub async fn set_config_paused(&self, id: StorageConfigId, paused: bool) -> Result<bool, StoreError> {
        #[derive(QueryableByName)]
        struct Was {
            #[diesel(sql_type = Bool)]
            was: bool,
        }
        let rows: Vec<Was> = self
            .transaction(Lane::Shared, async |conn| {
                sql_query(
                    "UPDATE storage_configs AS s
                        SET paused_at = CASE WHEN $2 THEN COALESCE(o.paused_at, now()) END
                       FROM storage_configs AS o
                      WHERE s.id = $1 AND o.id = s.id
                  RETURNING o.paused_at IS NOT NULL AS was",
                )
                .bind::<Uuid, _>(id.as_uuid())
                .bind::<Bool, _>(paused)
                .load(conn)
                .await
            })
            .await?;
        rows.into_iter().next().map(|r| r.was).ok_or_else(|| StoreError::NotFound(format!("no storage config {id}")))
    }

    /// Pauses (or resumes) a kind everywhere: its queued items are not claimed while paused. Answers whether it
    /// was paused before.
    #[mutants::skip]
    pub async fn set_kind_paused(&self, kind: WorkKind, paused: bool) -> Result<bool, StoreError> {
        let changed = self
            .transaction(Lane::Shared, async |conn| {
                let sql = if paused {
                    "INSERT INTO paused_kinds (kind) VALUES ($1) ON CONFLICT (kind) DO NOTHING"
                } else {
                    "DELETE FROM paused_kinds WHERE kind = $1"
                };
                sql_query(sql).bind::<Text, _>(kind.as_str()).execute(conn).await
            })
            .await?;
        // Pausing changed a row when it was not paused before; resuming when it was.
        Ok(if paused { changed == 0 } else { changed == 1 })
    }

    /// What is paused: the kinds, and the configs (id and root), oldest pause first.
    #[mutants::skip]
    pub async fn paused(&self) -> Result<(Vec<WorkKind>, Vec<(StorageConfigId, String)>), StoreError> {
        #[derive(QueryableByName)]
        struct Row {
            #[diesel(sql_type = Text)]
            what: String,
            #[diesel(sql_type = Nullable<Uuid>)]
            id: Option<uuid::Uuid>,
        }
        let rows: Vec<Row> = self
            .read(async |conn| {
                sql_query(
                    "SELECT what, id FROM (
                 SELECT kind AS what, NULL::uuid AS id, paused_at FROM paused_kinds
                 UNION ALL
                 SELECT root_path, id, paused_at FROM storage_configs WHERE paused_at IS NOT NULL) AS p
              ORDER BY paused_at",
                )
                .load(conn)
                .await
            })
            .await?;
        let mut kinds = Vec::new();
        let mut configs = Vec::new();
        for row in rows {
            match row.id {
                Some(id) => configs.push((StorageConfigId::from_uuid(id), row.what)),
                None => {
                    kinds.push(WorkKind::from_str(&row.what).map_err(|e| StoreError::Unexpected(e.to_string().into()))?)
                }
            }
        }
        Ok((kinds, configs))
    }

    /// The most recently requested items, optionally of one status, newest first.
    pub async fn list_items(&self, status: Option<Status>, limit: i64) -> Result<Vec<WorkItem>, StoreError> {
        self.find_items(&ItemFilter { status, ..ItemFilter::default() }, limit).await
    }

    /// The most recently requested items that match `filter`, newest first, at most `limit`.
    #[mutants::skip]
    pub async fn find_items(&self, filter: &ItemFilter, limit: i64) -> Result<Vec<WorkItem>, StoreError> {
        let rows: Vec<WorkItemRow> = self
            .read(async |conn| {
                sql_query(
                    "SELECT * FROM work_items
              WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR kind = $2)
                AND ($3::uuid IS NULL OR storage_config_id = $3)
              ORDER BY requested_at DESC, id DESC LIMIT $4",
                )
                .bind::<Nullable<Text>, _>(filter.status.map(Status::as_str))
                .bind::<Nullable<Text>, _>(filter.kind.map(WorkKind::as_str))
                .bind::<Nullable<Uuid>, _>(filter.config.map(|c| c.as_uuid()))
                .bind::<BigInt, _>(limit)
                .load(conn)
                .await
            })
            .await?;
        rows.into_iter()
            .map(|r| WorkItem::try_from(r).map_err(|e| StoreError::Unexpected(e.to_string().into())))
            .collect()
    }

    /// Puts failed or cancelled items that match `filter` (its status must be failed or cancelled, or none for
    /// both) back in the queue, to run as soon as a Worker can: failures and stalls start again from zero (the
    /// attempt number goes on; the claim's token is cleared, as whenever an item is queued again), the last error
    /// is kept until the next outcome. A requeued item whose dedup key another queued item holds drops its key
    /// (both stay; nothing is lost). `ids`, when given, limits it to those items. Returns the ids requeued.
    #[mutants::skip]
    pub async fn retry_items(
        &self,
        filter: &ItemFilter,
        ids: Option<&[WorkItemId]>,
    ) -> Result<Vec<WorkItemId>, StoreError> {
        let statuses: Vec<String> = match filter.status {
            None => vec!["failed".into(), "cancelled".into()],
            Some(s @ (Status::Failed | Status::Cancelled)) => vec![s.as_str().into()],
            Some(other) => {
                return Err(StoreError::Config(format!(
                    "only failed or cancelled items are retried, not {other} ones"
                )));
            }
        };
        #[derive(QueryableByName)]
        struct IdRow {
            #[diesel(sql_type = Uuid)]
            id: uuid::Uuid,
        }
        let rows: Vec<IdRow> = self
            .transaction(Lane::Shared, async |conn| {
                // Items of one batch may share a dedup key: as in lease recovery, the batch decides (the oldest
                // keeps it, unless a queued item holds it already; the others drop it), or the statement would
                // fail on the dedup index.
                sql_query(
                    "WITH chosen AS (
                         SELECT c.id, c.dedup_key, c.requested_at
                           FROM work_items AS c
                          WHERE c.status = ANY($1) AND ($2::text IS NULL OR c.kind = $2)
                            AND ($3::uuid IS NULL OR c.storage_config_id = $3)
                            AND ($4::uuid[] IS NULL OR c.id = ANY($4))
                            FOR UPDATE),
                     decided AS (
                         SELECT x.id,
                                CASE WHEN x.dedup_key IS NULL THEN NULL
                                     WHEN EXISTS (SELECT 1 FROM work_items AS o
                                                   WHERE o.dedup_key = x.dedup_key AND o.status = 'queued') THEN NULL
                                     WHEN row_number() OVER (PARTITION BY x.dedup_key
                                                                 ORDER BY x.requested_at, x.id) = 1 THEN x.dedup_key
                                     ELSE NULL END AS dedup_key
                           FROM chosen AS x)
                     UPDATE work_items AS w
                        SET status = 'queued', failures = 0, stalls = 0, finished_at = NULL, run_after = now(),
                            cancel_requested_at = NULL, lease_expires_at = NULL, claim_token = NULL,
                            dedup_key = d.dedup_key
                       FROM decided AS d
                      WHERE w.id = d.id
                    RETURNING w.id",
                )
                .bind::<Array<Text>, _>(statuses)
                .bind::<Nullable<Text>, _>(filter.kind.map(WorkKind::as_str))
                .bind::<Nullable<Uuid>, _>(filter.config.map(|c| c.as_uuid()))
                .bind::<Nullable<Array<Uuid>>, _>(ids.map(|ids| ids.iter().map(|i| i.as_uuid()).collect::<Vec<_>>()))
                .load(conn)
                .await
            })
            .await?;
        Ok(rows.into_iter().map(|r| WorkItemId::from_uuid(r.id)).collect())
    }

    /// Deletes at most `batch` finished items: succeeded or cancelled ones finished before `done_before`,
    /// failed ones finished before `failed_before`. Never touches a queued or running item, nor what the purge reads
    /// of a config's crawls (see `MaintenanceStore::delete_finished_work`). Returns how many were deleted; call again
    /// until it returns less than `batch`.
    #[mutants::skip]
    pub async fn delete_finished(
        &self,
        done_before: DateTime<Utc>,
        failed_before: DateTime<Utc>,
        batch: i64,
    ) -> Result<u64, StoreError> {
        let deleted = self
            .read(async |conn| delete_finished_query(done_before, failed_before, batch).execute(conn).await)
            .await?;
        Ok(deleted as u64)
    }
}
