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
/// writes it, the field left out when empty), or among them the root's own `""` (`CrawlArgs::is_whole_root`). A
/// crawl of some folders reads only those.
pub(crate) fn whole_root(t: &str) -> String {
    format!("(coalesce({t}.payload -> 'folders', '[]') IN ('[]', 'null') OR {t}.payload -> 'folders' ? '')")
}

/// Whether the crawl `t` has a failure on it that no crawl of the whole root of its config answered (`s`, the alias
/// of the success looked for): it failed for good, or it is not a success and failed or stalled before
/// (`last_error`, `failures`, `stalls`: queued again, cancelled by the operator or by deactivation, put back by
/// `retry`, which keeps the last error), and no success of the whole root ended after its last attempt started.
/// A crawl of the config runs alone, so its attempt's start orders it against another crawl's end; a cancel's or a
/// retry's own time says nothing of the library. The one home of the rule: the purge's question below, and
/// retention, which keeps such a crawl and each config's newest success of the whole root.
pub(crate) fn unanswered_failure(t: &str, s: &str) -> String {
    format!(
        "(({t}.status = 'failed'
           OR {t}.status <> 'succeeded' AND ({t}.last_error IS NOT NULL OR {t}.failures > 0 OR {t}.stalls > 0))
          AND NOT {answered})",
        answered = read_whole_after(s, t, &attempted_at(t))
    )
}

/// Whether a crawl of the whole root (`s`) of the same config and kind as `t` succeeded and ended after `after`.
pub(crate) fn read_whole_after(s: &str, t: &str, after: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM work_items AS {s}
                  WHERE {s}.storage_config_id = {t}.storage_config_id AND {s}.kind = {t}.kind
                    AND {s}.status = 'succeeded' AND {whole} AND {s}.finished_at > {after})",
        whole = whole_root(s)
    )
}

/// When the crawl `t`'s last attempt started (one never tried: when it was asked for).
fn attempted_at(t: &str) -> String {
    format!("coalesce({t}.started_at, {t}.requested_at)")
}

/// The config's latest crawl with a failure on it no crawl of the whole root answered ([`unanswered_failure`]).
fn failing() -> String {
    format!(
        "
SELECT w.id, coalesce(w.last_error, $3) AS error, w.status IN ('queued', 'running') AS retrying
  FROM work_items AS w
 WHERE w.storage_config_id = $1 AND w.kind = $2 AND {unanswered}
 ORDER BY {at} DESC, w.id
 LIMIT 1",
        unanswered = unanswered_failure("w", "s"),
        at = attempted_at("w")
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

#[cfg(test)]
mod tests {
    use almanac_domain::{CrawlArgs, WorkArgs};
    use almanac_testdb::TestDatabase;
    use diesel::sql_types::{Bool, Jsonb};
    use diesel::{QueryableByName, sql_query};
    use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

    #[derive(QueryableByName)]
    struct Whole {
        #[diesel(sql_type = Bool)]
        whole: bool,
    }

    /// The statements' test of a crawl of the whole root says what the crawl's own arguments say of the payloads
    /// `CrawlArgs` writes: none, some folders, and some folders among which the root's own `""`.
    #[tokio::test]
    async fn the_statements_whole_root_is_the_crawl_arguments() {
        let db = TestDatabase::create().await;
        let mut conn = AsyncPgConnection::establish(db.url()).await.unwrap();
        let sql = format!("SELECT {} AS whole FROM (SELECT $1::jsonb AS payload) AS t", super::whole_root("t"));
        for folders in [vec![], vec!["2024"], vec!["2024/phone", ""], vec![""]] {
            let args = CrawlArgs::of_folders(folders.iter().map(|f| (*f).to_owned()).collect(), Vec::new());
            let row: Whole = sql_query(&sql).bind::<Jsonb, _>(args.to_payload()).get_result(&mut conn).await.unwrap();
            assert_eq!(row.whole, args.is_whole_root(), "{folders:?}");
        }
    }
}
