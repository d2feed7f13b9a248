//! The purge's question before it deletes anything: has the config's library been read since its crawls began to
//! fail ([`almanac_domain::ports::MaintenanceStore::failing_crawl`])?

use almanac_domain::{
    StorageConfigId, WorkItemId, WorkKind,
    ports::{CatalogueError, FailingCrawl},
};
use diesel::sql_types::{Bool, Text, Uuid};
use diesel::{QueryableByName, sql_query};
use diesel_async::RunQueryDsl;

use crate::PgStore;

/// Whether the crawl `t` (a `work_items` alias) read the whole root: no `folders` in its payload (as `CrawlArgs`
/// writes it, the field left out when empty), or among them the root's own `""`. A crawl of some folders reads only
/// those. Its one home: the purge's question below, and retention, which keeps each config's newest such success.
pub(crate) fn whole_root(t: &str) -> String {
    format!("(coalesce({t}.payload -> 'folders', '[]') IN ('[]', 'null') OR {t}.payload -> 'folders' ? '')")
}

/// The config's latest crawl with a failure on it since its last crawl of the whole root that succeeded (`r`): one
/// failed for good; or one not ended (queued again; running is never seen beside the purge, which holds the
/// config), cancelled (by the operator, by deactivation, or while failing) or put back by `retry`, that failed or
/// stalled before (`last_error`, `failures`, `stalls`). Its time is its end, or its last attempt's start.
fn failing() -> String {
    format!(
        "
WITH r AS (SELECT max(s.finished_at) AS read_at
             FROM work_items AS s
            WHERE s.storage_config_id = $1 AND s.kind = $2 AND s.status = 'succeeded' AND {whole})
SELECT w.id, coalesce(w.last_error, $3) AS error, w.status IN ('queued', 'running') AS retrying
  FROM work_items AS w, r
 WHERE w.storage_config_id = $1 AND w.kind = $2
   AND (w.status = 'failed'
        OR w.status <> 'succeeded' AND (w.last_error IS NOT NULL OR w.failures > 0 OR w.stalls > 0))
   AND (r.read_at IS NULL OR coalesce(w.finished_at, w.started_at, w.requested_at) > r.read_at)
 ORDER BY coalesce(w.finished_at, w.started_at, w.requested_at) DESC, w.id
 LIMIT 1",
        whole = whole_root("s")
    )
}

/// What a failing crawl that recorded no error (its attempts stalled) is said to have failed with.
const STALLED: &str = "its last attempt ended without an answer: the Worker running it stopped, or lost its lease";

#[derive(QueryableByName)]
struct FailingRow {
    #[diesel(sql_type = Uuid)]
    id: uuid::Uuid,
    #[diesel(sql_type = Text)]
    error: String,
    #[diesel(sql_type = Bool)]
    retrying: bool,
}

/// [`almanac_domain::ports::MaintenanceStore::failing_crawl`].
pub(super) async fn of(store: &PgStore, config: StorageConfigId) -> Result<Option<FailingCrawl>, CatalogueError> {
    let rows: Vec<FailingRow> = store
        .read(async |conn| {
            sql_query(failing())
                .bind::<Uuid, _>(config.as_uuid())
                .bind::<Text, _>(WorkKind::Crawl.as_str())
                .bind::<Text, _>(STALLED)
                .load(conn)
                .await
        })
        .await
        .map_err(CatalogueError::from)?;
    Ok(rows.into_iter().next().map(|r| FailingCrawl {
        item: WorkItemId::from_uuid(r.id),
        error: r.error,
        retrying: r.retrying,
    }))
}
