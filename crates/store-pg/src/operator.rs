//! Reads for operators (the operator's page, `status`): what each storage config looks like, and how items
//! ended hour by hour. Read-only; none of the queue's rules live here.

use almanac_domain::{Status, StorageConfigId};
use chrono::{DateTime, Utc};
use diesel::sql_types::{BigInt, Bool, Integer, Nullable, Text, Timestamptz, Uuid};
use diesel::{QueryableByName, sql_query};
use diesel_async::RunQueryDsl;

use crate::{PgStore, StoreError};

/// One storage config as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigOverview {
    /// The config.
    pub id: StorageConfigId,
    /// Its owner's name.
    pub username: String,
    /// The folder of originals.
    pub root: String,
    /// Whether it gets work at all.
    pub is_active: bool,
    /// Whether its queued work is held back (`pause`).
    pub paused: bool,
    /// Assets in its catalogue, soft-deleted ones not counted.
    pub assets: i64,
    /// Its latest finished crawl: when, and how it ended.
    pub last_crawl: Option<(DateTime<Utc>, Status)>,
}

/// How many items ended with `status` in the hour starting at `hour`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HourlyOutcome {
    /// The hour's start.
    pub hour: DateTime<Utc>,
    /// Succeeded, failed or cancelled.
    pub status: Status,
    /// How many.
    pub count: i64,
}

#[derive(QueryableByName)]
struct ConfigRow {
    #[diesel(sql_type = Uuid)]
    id: uuid::Uuid,
    #[diesel(sql_type = Text)]
    username: String,
    #[diesel(sql_type = Text)]
    root_path: String,
    #[diesel(sql_type = Bool)]
    is_active: bool,
    #[diesel(sql_type = Bool)]
    paused: bool,
    #[diesel(sql_type = BigInt)]
    assets: i64,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    crawled_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Text>)]
    crawl_status: Option<String>,
}

#[derive(QueryableByName)]
struct HourRow {
    #[diesel(sql_type = Timestamptz)]
    hour: DateTime<Utc>,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = BigInt)]
    count: i64,
}

impl PgStore {
    /// Every storage config with its owner, whether it is active or paused, its asset count and its latest
    /// finished crawl, ordered by user and root.
    #[mutants::skip]
    pub async fn config_overview(&self) -> Result<Vec<ConfigOverview>, StoreError> {
        let rows: Vec<ConfigRow> = self
            .read(async |conn| {
                sql_query(
                    "SELECT c.id, u.username, c.root_path, c.is_active, c.paused_at IS NOT NULL AS paused,
                    (SELECT count(*) FROM media_assets a WHERE a.storage_config_id = c.id AND NOT a.is_soft_deleted)
                      AS assets,
                    last.finished_at AS crawled_at, last.status AS crawl_status
               FROM storage_configs c JOIN users u ON u.id = c.user_id
               LEFT JOIN LATERAL (
                    SELECT w.finished_at, w.status FROM work_items w
                     WHERE w.storage_config_id = c.id AND w.kind = 'crawl' AND w.finished_at IS NOT NULL
                     ORDER BY w.finished_at DESC LIMIT 1) last ON true
              ORDER BY u.username, c.root_path",
                )
                .load(conn)
                .await
            })
            .await?;
        rows.into_iter()
            .map(|r| {
                let last_crawl = match (r.crawled_at, r.crawl_status) {
                    (Some(at), Some(s)) => Some((at, s.parse::<Status>().map_err(|e| bad(&e))?)),
                    _ => None,
                };
                Ok(ConfigOverview {
                    id: StorageConfigId::from_uuid(r.id),
                    username: r.username,
                    root: r.root_path,
                    is_active: r.is_active,
                    paused: r.paused,
                    assets: r.assets,
                    last_crawl,
                })
            })
            .collect()
    }

    /// Items that ended in each of the last `hours` hours, by outcome (hours with none are absent).
    #[mutants::skip]
    pub async fn outcomes_by_hour(&self, hours: i32) -> Result<Vec<HourlyOutcome>, StoreError> {
        let rows: Vec<HourRow> = self
            .read(async |conn| {
                sql_query(
                    "SELECT date_trunc('hour', finished_at) AS hour, status, count(*) AS count FROM work_items
              WHERE status IN ('succeeded', 'failed', 'cancelled')
                AND finished_at > date_trunc('hour', now()) - make_interval(hours => $1 - 1)
              GROUP BY 1, 2 ORDER BY 1, 2",
                )
                .bind::<Integer, _>(hours.max(1))
                .load(conn)
                .await
            })
            .await?;
        rows.into_iter()
            .map(|r| Ok(HourlyOutcome { hour: r.hour, status: r.status.parse().map_err(|e| bad(&e))?, count: r.count }))
            .collect()
    }
}

fn bad(e: &dyn std::fmt::Display) -> StoreError {
    StoreError::Unexpected(format!("an unreadable row: {e}").into())
}
