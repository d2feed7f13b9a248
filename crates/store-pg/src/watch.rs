//! The statements of watching ([`WatchStore`], ADR 0014): the configs a Worker may watch, the watch's lease
//! (table `config_watches`: one holder per config, by the database clock) and what its holder last reported.
//! No statement depends on a session (ADR 0012): each is one statement, run through [`PgStore::read`].

use std::path::PathBuf;
use std::time::Duration;

use almanac_domain::ports::{
    HeldWatch, ServedConfigs, WatchChoice, WatchHolder, WatchMode, WatchReport, WatchState, WatchStore, WatchTarget,
};
use almanac_domain::{Cause, QueueError, StorageConfigId, WorkerId};
use chrono::{DateTime, Utc};
use diesel::sql_types::{BigInt, Double, Nullable, Text, Timestamptz, Uuid};
use diesel::{QueryableByName, sql_query};
use diesel_async::RunQueryDsl;

use crate::PgStore;

/// Takes or renews a watch in one statement: inserted when no row exists, updated when the row is this holder's
/// (its Worker process's token, not its Worker id: two Workers may be given one id) or its lease has run out by
/// the database clock; a row is returned only when this holder holds the watch afterwards. Concurrent callers for one config meet on the primary key: the second waits for the first's
/// commit and then reads the row it wrote (`ON CONFLICT … DO UPDATE … WHERE` sees the latest version), so
/// exactly one holds it. `since` changes only when the holder changes. A config that does not exist (removed)
/// gives no row: not held.
const HOLD: &str = "
INSERT INTO config_watches AS w
       (storage_config_id, worker_id, holder, since, lease_expires_at, mode, last_change_at, pending_files, note)
SELECT c.id, $2, $8, now(), now() + $3 * interval '1 second', $4, $5, $6, $7
  FROM storage_configs c WHERE c.id = $1
    ON CONFLICT (storage_config_id) DO UPDATE
   SET worker_id = EXCLUDED.worker_id,
       holder = EXCLUDED.holder,
       since = CASE WHEN w.holder = EXCLUDED.holder THEN w.since ELSE EXCLUDED.since END,
       lease_expires_at = EXCLUDED.lease_expires_at,
       mode = EXCLUDED.mode,
       last_change_at = EXCLUDED.last_change_at,
       pending_files = EXCLUDED.pending_files,
       note = EXCLUDED.note
 WHERE w.holder = EXCLUDED.holder OR w.lease_expires_at <= now()
RETURNING w.storage_config_id AS id";

#[derive(QueryableByName)]
struct IdRow {
    #[diesel(sql_type = Uuid)]
    #[allow(dead_code)]
    id: uuid::Uuid,
}

#[derive(QueryableByName)]
struct TargetRow {
    #[diesel(sql_type = Uuid)]
    id: uuid::Uuid,
    #[diesel(sql_type = Text)]
    root_path: String,
    #[diesel(sql_type = Text)]
    watch: String,
}

#[derive(QueryableByName)]
struct StateRow {
    #[diesel(sql_type = Uuid)]
    id: uuid::Uuid,
    #[diesel(sql_type = Text)]
    watch: String,
    #[diesel(sql_type = Nullable<Text>)]
    worker_id: Option<String>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    since: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    lease_expires_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Text>)]
    mode: Option<String>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    last_change_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<BigInt>)]
    pending_files: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    note: Option<String>,
}

/// A value the database holds that this binary cannot read (a schema newer than it, or a hand-written row).
fn unreadable(what: &str, got: &str) -> QueueError {
    QueueError::Unexpected(Cause::new(format!(
        "config_watches: {what} {got:?} is not one this Worker knows; is the schema newer than this binary?"
    )))
}

fn choice(s: &str) -> Result<WatchChoice, QueueError> {
    s.parse().map_err(|_| unreadable("watch choice", s))
}

fn mode(s: &str) -> Result<WatchMode, QueueError> {
    s.parse().map_err(|_| unreadable("watch mode", s))
}

impl StateRow {
    fn into_state(self) -> Result<WatchState, QueueError> {
        let held = match (self.worker_id, self.since, self.lease_expires_at, self.mode) {
            (Some(worker), Some(since), Some(lease_expires_at), Some(m)) => Some(HeldWatch {
                worker_id: WorkerId::new(worker).map_err(|e| QueueError::Unexpected(Cause::from_error(e)))?,
                report: WatchReport {
                    mode: mode(&m)?,
                    last_change_at: self.last_change_at,
                    pending_files: u64::try_from(self.pending_files.unwrap_or(0)).unwrap_or(0),
                    note: self.note,
                },
                since,
                lease_expires_at,
            }),
            _ => None,
        };
        Ok(WatchState { config: StorageConfigId::from_uuid(self.id), choice: choice(&self.watch)?, held })
    }
}

impl WatchStore for PgStore {
    #[mutants::skip]
    async fn watch_targets(&self, served: ServedConfigs) -> Result<Vec<WatchTarget>, QueueError> {
        let user = match served {
            ServedConfigs::All => None,
            ServedConfigs::User(user) => Some(user.as_uuid()),
        };
        let rows: Vec<TargetRow> = self
            .read(async |conn| {
                sql_query(
                    "SELECT id, root_path, watch FROM storage_configs
                      WHERE is_active AND ($1::uuid IS NULL OR user_id = $1)
                      ORDER BY created_at, id",
                )
                .bind::<Nullable<Uuid>, _>(user)
                .load(conn)
                .await
            })
            .await?;
        rows.into_iter()
            .map(|r| {
                Ok(WatchTarget {
                    config: StorageConfigId::from_uuid(r.id),
                    root: PathBuf::from(r.root_path),
                    choice: choice(&r.watch)?,
                })
            })
            .collect()
    }

    #[mutants::skip]
    async fn hold_watch(
        &self,
        config: StorageConfigId,
        holder: &WatchHolder,
        lease: Duration,
        report: &WatchReport,
    ) -> Result<bool, QueueError> {
        let pending = i64::try_from(report.pending_files).unwrap_or(i64::MAX);
        let held: Vec<IdRow> = self
            .read(async |conn| {
                sql_query(HOLD)
                    .bind::<Uuid, _>(config.as_uuid())
                    .bind::<Text, _>(holder.worker().as_str())
                    .bind::<Double, _>(lease.as_secs_f64())
                    .bind::<Text, _>(report.mode.as_str())
                    .bind::<Nullable<Timestamptz>, _>(report.last_change_at)
                    .bind::<BigInt, _>(pending)
                    .bind::<Nullable<Text>, _>(report.note.as_deref())
                    .bind::<Uuid, _>(holder.token().as_uuid())
                    .load(conn)
                    .await
            })
            .await?;
        Ok(!held.is_empty())
    }

    #[mutants::skip]
    async fn release_watch(&self, config: StorageConfigId, holder: &WatchHolder) -> Result<(), QueueError> {
        self.read(async |conn| {
            sql_query("DELETE FROM config_watches WHERE storage_config_id = $1 AND holder = $2")
                .bind::<Uuid, _>(config.as_uuid())
                .bind::<Uuid, _>(holder.token().as_uuid())
                .execute(conn)
                .await
        })
        .await?;
        Ok(())
    }

    #[mutants::skip]
    async fn watch_states(&self) -> Result<Vec<WatchState>, QueueError> {
        let rows: Vec<StateRow> = self
            .read(async |conn| {
                sql_query(
                    "SELECT c.id, c.watch, w.worker_id, w.since, w.lease_expires_at, w.mode, w.last_change_at,
                            w.pending_files, w.note
                       FROM storage_configs c
                       LEFT JOIN config_watches w ON w.storage_config_id = c.id AND w.lease_expires_at > now()
                      ORDER BY c.created_at, c.id",
                )
                .load(conn)
                .await
            })
            .await?;
        rows.into_iter().map(StateRow::into_state).collect()
    }
}

#[derive(QueryableByName)]
struct WasRow {
    #[diesel(sql_type = Text)]
    was: String,
}

impl PgStore {
    /// Sets how the operator chose to watch a config (`config watch`), answering the choice it replaced. The
    /// Worker watching it follows at its next look at its targets.
    #[mutants::skip]
    pub async fn set_storage_config_watch(
        &self,
        id: StorageConfigId,
        choice: WatchChoice,
    ) -> Result<WatchChoice, crate::StoreError> {
        let rows: Vec<WasRow> = self
            .read(async |conn| {
                sql_query(
                    "UPDATE storage_configs s SET watch = $2
                       FROM (SELECT id, watch FROM storage_configs WHERE id = $1 FOR UPDATE) was
                      WHERE s.id = was.id
                  RETURNING was.watch AS was",
                )
                .bind::<Uuid, _>(id.as_uuid())
                .bind::<Text, _>(choice.as_str())
                .load(conn)
                .await
            })
            .await?;
        let was =
            rows.into_iter().next().ok_or_else(|| crate::StoreError::NotFound(format!("no storage config {id}")))?;
        was.was.parse().map_err(|e: String| crate::StoreError::Unexpected(e.into()))
    }
}
