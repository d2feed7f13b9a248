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

/// A crawl to be tried again after a failure (queued, or running: never beside the purge, which holds the config),
/// else the config's crawl that ended last (succeeded or failed; a cancelled one says nothing of the library) when it
/// failed. A failed crawl's `last_error` is always written (a failure, or the stalls the recovery gave up on).
const FAILING: &str = "
SELECT w.id, coalesce(w.last_error, 'no error was recorded') AS error, w.status <> 'failed' AS retrying
  FROM work_items AS w
 WHERE w.storage_config_id = $1 AND w.kind = $2
   AND (w.status IN ('queued', 'running') AND w.failures > 0
        OR w.status = 'failed'
           AND w.finished_at = (SELECT max(e.finished_at) FROM work_items AS e
                                 WHERE e.storage_config_id = $1 AND e.kind = $2
                                   AND e.status IN ('succeeded', 'failed')))
 ORDER BY w.status = 'failed', w.id
 LIMIT 1";

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
            sql_query(FAILING)
                .bind::<Uuid, _>(config.as_uuid())
                .bind::<Text, _>(WorkKind::Crawl.as_str())
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
