//! The statements of burst detection, purge, proxy deletion and sweep, token cleanup, retention and the
//! scheduler ([`MaintenanceStore`]).

use std::collections::BTreeMap;
use std::str::FromStr;

use almanac_domain::{
    AssetId, NewWorkItem, ProxyType, QueueError, StorageConfigId, WorkItemId,
    ports::{
        BurstFrame, BurstGroup, CatalogueError, DatabaseClock, FailingCrawl, Fence, MaintenanceStore, PurgeCandidate,
        QueueMaintenance, ServedConfigs, StoredProxy,
    },
};
use chrono::{DateTime, Utc};
use diesel::sql_types::{Array, BigInt, Bool, Integer, Nullable, Text, Timestamptz, Uuid};
use diesel::{QueryableByName, sql_query};
use diesel_async::RunQueryDsl;

use crate::PgStore;
use crate::tx::Lane;

pub(crate) mod failing_crawl;
mod proxy_rows;

fn uuids(ids: &[AssetId]) -> Vec<uuid::Uuid> {
    ids.iter().map(AssetId::as_uuid).collect()
}

#[derive(QueryableByName)]
struct FrameRow {
    #[diesel(sql_type = Uuid)]
    id: uuid::Uuid,
    #[diesel(sql_type = Nullable<Text>)]
    camera_make: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    camera_model: Option<String>,
    #[diesel(sql_type = Timestamptz)]
    captured_at: DateTime<Utc>,
    #[diesel(sql_type = Nullable<Text>)]
    camera_burst_id: Option<String>,
    #[diesel(sql_type = BigInt)]
    size_bytes: i64,
}

#[derive(QueryableByName)]
struct ProxyRow {
    #[diesel(sql_type = Uuid)]
    asset_id: uuid::Uuid,
    #[diesel(sql_type = Text)]
    proxy_type: String,
    #[diesel(sql_type = Nullable<Text>)]
    relative_path: Option<String>,
    #[diesel(sql_type = BigInt)]
    size_bytes: i64,
}

#[derive(QueryableByName)]
struct CandidateRow {
    #[diesel(sql_type = Uuid)]
    id: uuid::Uuid,
    #[diesel(sql_type = Timestamptz)]
    soft_deleted_at: DateTime<Utc>,
    #[diesel(sql_type = Bool)]
    content_still_active: bool,
}

#[derive(QueryableByName)]
struct IdRow {
    #[diesel(sql_type = Uuid)]
    id: uuid::Uuid,
}

#[derive(QueryableByName)]
struct PathRow {
    #[diesel(sql_type = Text)]
    relative_path: String,
}

fn stored(r: ProxyRow) -> Result<StoredProxy, CatalogueError> {
    Ok(StoredProxy {
        asset_id: AssetId::from_uuid(r.asset_id),
        proxy_type: ProxyType::from_str(&r.proxy_type).map_err(|e| CatalogueError::Unexpected(e.to_string().into()))?,
        relative_path: r.relative_path,
        size_bytes: u64::try_from(r.size_bytes).unwrap_or(0),
    })
}

impl MaintenanceStore for PgStore {
    #[mutants::skip]
    async fn burst_frames(&self, config: StorageConfigId) -> Result<Vec<BurstFrame>, CatalogueError> {
        let rows: Vec<FrameRow> = self
            .read(async |conn| {
                sql_query(
                    "SELECT a.id, m.camera_make, m.camera_model, a.captured_at, m.camera_burst_id, a.size_bytes
               FROM media_assets a JOIN asset_metadata m ON m.asset_id = a.id
              WHERE a.storage_config_id = $1 AND NOT a.is_soft_deleted AND a.media_type = 'image'
              ORDER BY a.captured_at, a.id",
                )
                .bind::<Uuid, _>(config.as_uuid())
                .load(conn)
                .await
            })
            .await
            .map_err(CatalogueError::from)?;
        Ok(rows
            .into_iter()
            .map(|r| BurstFrame {
                asset_id: AssetId::from_uuid(r.id),
                camera_make: r.camera_make,
                camera_model: r.camera_model,
                captured_at: r.captured_at,
                camera_burst_id: r.camera_burst_id,
                size: u64::try_from(r.size_bytes).unwrap_or(0),
            })
            .collect())
    }

    async fn still_holds(&self, fence: Fence) -> Result<(), CatalogueError> {
        self.fenced(fence, async |_| Ok(())).await
    }

    async fn proxies_going(&self, fence: Fence, asset: AssetId) -> Result<(), CatalogueError> {
        proxy_rows::going(self, fence, asset).await
    }

    #[mutants::skip]
    async fn replace_bursts(
        &self,
        fence: Fence,
        config: StorageConfigId,
        groups: &[BurstGroup],
    ) -> Result<(), CatalogueError> {
        let keep: Vec<uuid::Uuid> = groups.iter().map(|g| g.id.as_uuid()).collect();
        self.fenced(fence, async |conn| {
            sql_query("UPDATE media_assets SET burst_id = NULL WHERE storage_config_id = $1 AND burst_id IS NOT NULL")
                .bind::<Uuid, _>(config.as_uuid())
                .execute(conn)
                .await?;
            sql_query("DELETE FROM bursts WHERE storage_config_id = $1 AND id <> ALL($2)")
                .bind::<Uuid, _>(config.as_uuid())
                .bind::<Array<Uuid>, _>(&keep)
                .execute(conn)
                .await?;
            for g in groups {
                sql_query(
                    "INSERT INTO bursts (id, storage_config_id, primary_asset_id, camera_make, camera_model, source,
                                         started_at, ended_at, frame_count)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                     ON CONFLICT (id) DO UPDATE SET primary_asset_id = EXCLUDED.primary_asset_id,
                         camera_make = EXCLUDED.camera_make, camera_model = EXCLUDED.camera_model,
                         source = EXCLUDED.source, started_at = EXCLUDED.started_at, ended_at = EXCLUDED.ended_at,
                         frame_count = EXCLUDED.frame_count, updated_at = now()",
                )
                .bind::<Uuid, _>(g.id.as_uuid())
                .bind::<Uuid, _>(config.as_uuid())
                .bind::<Uuid, _>(g.primary.as_uuid())
                .bind::<Nullable<Text>, _>(g.camera_make.as_deref())
                .bind::<Nullable<Text>, _>(g.camera_model.as_deref())
                .bind::<Text, _>(if g.from_camera { "camera_burst_id" } else { "time_gap" })
                .bind::<Timestamptz, _>(g.started_at)
                .bind::<Timestamptz, _>(g.ended_at)
                .bind::<Integer, _>(g.members.len() as i32)
                .execute(conn)
                .await?;
                sql_query("UPDATE media_assets SET burst_id = $1 WHERE id = ANY($2)")
                    .bind::<Uuid, _>(g.id.as_uuid())
                    .bind::<Array<Uuid>, _>(uuids(&g.members))
                    .execute(conn)
                    .await?;
            }
            Ok(())
        })
        .await
    }

    #[mutants::skip]
    async fn purge_candidates(
        &self,
        config: StorageConfigId,
        before: DateTime<Utc>,
        after: Option<&PurgeCandidate>,
        limit: i64,
    ) -> Result<Vec<PurgeCandidate>, CatalogueError> {
        let (after_at, after_id) = (after.map(|c| c.soft_deleted_at), after.map(|c| c.asset_id.as_uuid()));
        let rows: Vec<CandidateRow> = self
            .read(async |conn| {
                sql_query(
                    "SELECT a.id, a.soft_deleted_at,
                            EXISTS (SELECT 1 FROM media_assets o WHERE o.storage_config_id = a.storage_config_id
                                       AND o.content_hash = a.content_hash AND NOT o.is_soft_deleted) AS content_still_active
                       FROM media_assets a
                      WHERE a.storage_config_id = $1 AND a.is_soft_deleted AND a.soft_deleted_at < $2
                        AND ($4::timestamptz IS NULL OR (a.soft_deleted_at, a.id) > ($4, $5))
                      ORDER BY a.soft_deleted_at, a.id
                      LIMIT $3",
                )
                .bind::<Uuid, _>(config.as_uuid())
                .bind::<Timestamptz, _>(before)
                .bind::<BigInt, _>(limit)
                .bind::<Nullable<Timestamptz>, _>(after_at)
                .bind::<Nullable<Uuid>, _>(after_id)
                .load(conn)
                .await
            })
            .await
            .map_err(CatalogueError::from)?;
        // `read` gave its connection back before the next statement takes one: holding it while asking for
        // another would starve (with a pool of one, deadlock) the very call (found by the fault suite).
        let ids: Vec<AssetId> = rows.iter().map(|r| AssetId::from_uuid(r.id)).collect();
        let mut proxies: BTreeMap<AssetId, Vec<StoredProxy>> = BTreeMap::new();
        for p in self.proxies_of(&ids, None).await? {
            proxies.entry(p.asset_id).or_default().push(p);
        }
        Ok(rows
            .into_iter()
            .map(|r| {
                let id = AssetId::from_uuid(r.id);
                PurgeCandidate {
                    asset_id: id,
                    proxies: proxies.remove(&id).unwrap_or_default(),
                    content_still_active: r.content_still_active,
                    soft_deleted_at: r.soft_deleted_at,
                }
            })
            .collect())
    }

    async fn failing_crawl(&self, config: StorageConfigId) -> Result<Option<FailingCrawl>, CatalogueError> {
        failing_crawl::of(self, config).await
    }

    #[mutants::skip]
    async fn purge_rows(
        &self,
        fence: Fence,
        config: StorageConfigId,
        assets: &[AssetId],
        before: DateTime<Utc>,
    ) -> Result<Vec<AssetId>, CatalogueError> {
        let rows: Vec<IdRow> = self
            .fenced(fence, async |conn| {
                // Re-check under a row lock: only assets still soft-deleted since before the cut-off go.
                let still: Vec<IdRow> = sql_query(
                    "SELECT id FROM media_assets
                      WHERE storage_config_id = $1 AND id = ANY($2) AND is_soft_deleted AND soft_deleted_at < $3
                        FOR UPDATE",
                )
                .bind::<Uuid, _>(config.as_uuid())
                .bind::<Array<Uuid>, _>(uuids(assets))
                .bind::<Timestamptz, _>(before)
                .load(conn)
                .await?;
                let ids: Vec<uuid::Uuid> = still.iter().map(|r| r.id).collect();
                // Bursts whose primary frame goes are dissolved (the next burst detection regroups).
                sql_query(
                    "UPDATE media_assets SET burst_id = NULL
                      WHERE burst_id IN (SELECT id FROM bursts WHERE primary_asset_id = ANY($1))",
                )
                .bind::<Array<Uuid>, _>(&ids)
                .execute(conn)
                .await?;
                sql_query("DELETE FROM bursts WHERE primary_asset_id = ANY($1)")
                    .bind::<Array<Uuid>, _>(&ids)
                    .execute(conn)
                    .await?;
                sql_query("UPDATE media_assets SET paired_asset_id = NULL WHERE paired_asset_id = ANY($1)")
                    .bind::<Array<Uuid>, _>(&ids)
                    .execute(conn)
                    .await?;
                // Metadata, proxy rows and extra paths go with the asset (ON DELETE CASCADE).
                sql_query("DELETE FROM media_assets WHERE id = ANY($1) RETURNING id")
                    .bind::<Array<Uuid>, _>(&ids)
                    .load(conn)
                    .await
            })
            .await?;
        Ok(rows.into_iter().map(|r| AssetId::from_uuid(r.id)).collect())
    }

    async fn proxies_of(
        &self,
        assets: &[AssetId],
        types: Option<&[ProxyType]>,
    ) -> Result<Vec<StoredProxy>, CatalogueError> {
        proxy_rows::of(self, assets, types).await?.into_iter().map(stored).collect()
    }

    #[mutants::skip]
    async fn assets_of_other_configs(
        &self,
        config: StorageConfigId,
        assets: &[AssetId],
    ) -> Result<Vec<AssetId>, CatalogueError> {
        let rows: Vec<IdRow> = self
            .read(async |conn| {
                sql_query("SELECT id FROM media_assets WHERE id = ANY($2) AND storage_config_id <> $1 ORDER BY id")
                    .bind::<Uuid, _>(config.as_uuid())
                    .bind::<Array<Uuid>, _>(uuids(assets))
                    .load(conn)
                    .await
            })
            .await
            .map_err(CatalogueError::from)?;
        Ok(rows.into_iter().map(|r| AssetId::from_uuid(r.id)).collect())
    }

    #[mutants::skip]
    async fn storage_config_ids(&self) -> Result<Vec<StorageConfigId>, CatalogueError> {
        Ok(self.list_storage_configs().await.map_err(CatalogueError::from)?.into_iter().map(|c| c.id).collect())
    }

    async fn delete_proxy_rows(&self, fence: Fence, proxies: &[StoredProxy]) -> Result<u64, CatalogueError> {
        proxy_rows::delete(self, fence, proxies).await
    }

    async fn referenced_proxy_paths(&self, paths: &[String]) -> Result<Vec<String>, CatalogueError> {
        proxy_rows::referenced(self, paths).await
    }

    async fn configs_to_check(&self, served: ServedConfigs) -> Result<Vec<StorageConfigId>, CatalogueError> {
        proxy_rows::configs_to_check(self, served).await
    }

    async fn proxy_folders(&self, config: StorageConfigId) -> Result<Vec<String>, CatalogueError> {
        proxy_rows::folders(self, config).await
    }

    async fn referenced_proxy_paths_in(
        &self,
        config: StorageConfigId,
        prefix: &str,
    ) -> Result<Vec<String>, CatalogueError> {
        proxy_rows::referenced_in(self, config, prefix).await
    }

    async fn proxies_to_check_in(
        &self,
        config: StorageConfigId,
        prefix: &str,
    ) -> Result<Vec<StoredProxy>, CatalogueError> {
        proxy_rows::to_check_in(self, config, prefix).await?.into_iter().map(stored).collect()
    }

    async fn proxies_to_check_of(
        &self,
        config: StorageConfigId,
        assets: &[AssetId],
    ) -> Result<Vec<StoredProxy>, CatalogueError> {
        proxy_rows::to_check_of(self, config, assets).await?.into_iter().map(stored).collect()
    }

    async fn enqueue_follow_ups(&self, fence: Fence, items: &[NewWorkItem]) -> Result<(), CatalogueError> {
        proxy_rows::enqueue_follow_ups(self, fence, items).await
    }

    #[mutants::skip]
    async fn delete_refresh_tokens(
        &self,
        fence: Fence,
        expired_before: DateTime<Utc>,
        revoked_before: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, CatalogueError> {
        let n = self
            .fenced(fence, async |conn| {
                sql_query(
                    "DELETE FROM refresh_tokens WHERE id IN (
                        SELECT id FROM refresh_tokens WHERE expires_at < $1 OR revoked_at < $2 LIMIT $3)",
                )
                .bind::<Timestamptz, _>(expired_before)
                .bind::<Timestamptz, _>(revoked_before)
                .bind::<BigInt, _>(limit)
                .execute(conn)
                .await
            })
            .await?;
        Ok(n as u64)
    }

    #[mutants::skip]
    async fn delete_finished_work(
        &self,
        fence: Fence,
        done_before: DateTime<Utc>,
        failed_before: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, CatalogueError> {
        let items = self
            .fenced(fence, async |conn| {
                let items =
                    crate::queue::delete_finished_query(done_before, failed_before, limit).execute(conn).await?;
                sql_query(
                    "DELETE FROM schedule_periods WHERE schedule_key IN (
                        SELECT schedule_key FROM schedule_periods WHERE created_at < $1 LIMIT $2)",
                )
                .bind::<Timestamptz, _>(failed_before)
                .bind::<BigInt, _>(limit)
                .execute(conn)
                .await?;
                Ok(items)
            })
            .await?;
        Ok(items as u64)
    }
}

impl DatabaseClock for PgStore {
    #[mutants::skip]
    async fn db_now(&self) -> Result<DateTime<Utc>, CatalogueError> {
        let row: Now = self
            .read(async |conn| sql_query("SELECT now() AS now").get_result(conn).await)
            .await
            .map_err(CatalogueError::from)?;
        Ok(row.now)
    }
}

#[derive(QueryableByName)]
struct Now {
    #[diesel(sql_type = Timestamptz)]
    now: DateTime<Utc>,
}

impl QueueMaintenance for PgStore {
    #[mutants::skip]
    async fn served_configs(&self, served: ServedConfigs) -> Result<Vec<StorageConfigId>, QueueError> {
        let configs = self.list_storage_configs().await.map_err(QueueError::from)?;
        Ok(configs.into_iter().filter(|c| c.is_active && served.includes(c.user_id)).map(|c| c.id).collect())
    }

    #[mutants::skip]
    async fn enqueue_once(&self, due: &[(String, NewWorkItem)]) -> Result<Vec<String>, QueueError> {
        if due.is_empty() {
            return Ok(Vec::new());
        }
        // In key order: racing schedulers then wait for each other's keys in one order, never in a cycle.
        let mut due: Vec<&(String, NewWorkItem)> = due.iter().collect();
        due.sort_by(|a, b| a.0.cmp(&b.0));
        let ids: Vec<WorkItemId> = due.iter().map(|_| WorkItemId::new()).collect();
        self.transaction(Lane::Shared, async |conn| {
            // The periods this call records first are the ones it enqueues: two statements, one commit.
            let won: Vec<IdRow> = sql_query(
                "INSERT INTO schedule_periods (schedule_key, work_item_id)
                 SELECT * FROM unnest($1::text[], $2::uuid[])
                 ON CONFLICT (schedule_key) DO NOTHING RETURNING work_item_id AS id",
            )
            .bind::<Array<Text>, _>(due.iter().map(|(key, _)| key.clone()).collect::<Vec<_>>())
            .bind::<Array<Uuid>, _>(ids.iter().map(WorkItemId::as_uuid).collect::<Vec<_>>())
            .load(conn)
            .await?;
            let won: std::collections::HashSet<uuid::Uuid> = won.into_iter().map(|r| r.id).collect();
            let (won_ids, won_due): (Vec<WorkItemId>, Vec<&(String, NewWorkItem)>) =
                ids.iter().zip(&due).filter(|(id, _)| won.contains(&id.as_uuid())).unzip();
            if !won_ids.is_empty() {
                crate::queue::enqueue_many_query(&won_ids, won_due.iter().map(|(_, item)| item)).execute(conn).await?;
            }
            Ok(won_due.into_iter().map(|(key, _)| key.clone()).collect())
        })
        .await
        .map_err(QueueError::from)
    }

    #[mutants::skip]
    async fn defer_scheduled(&self, configs: &[StorageConfigId], until: DateTime<Utc>) -> Result<u64, QueueError> {
        let configs: Vec<uuid::Uuid> = configs.iter().map(StorageConfigId::as_uuid).collect();
        let n = self
            .transaction(Lane::Shared, async |conn| {
                sql_query(
                    "UPDATE work_items SET run_after = $1
                      WHERE status = 'queued' AND run_after < $1
                        AND (storage_config_id IS NULL OR storage_config_id = ANY($2))
                        AND id IN (SELECT work_item_id FROM schedule_periods WHERE work_item_id IS NOT NULL)",
                )
                .bind::<Timestamptz, _>(until)
                .bind::<Array<Uuid>, _>(&configs)
                .execute(conn)
                .await
            })
            .await
            .map_err(QueueError::from)?;
        Ok(n as u64)
    }

    #[mutants::skip]
    async fn cancel_queued_of_inactive(&self) -> Result<u64, QueueError> {
        let n = self
            .read(async |conn| {
                sql_query(
                    "UPDATE work_items SET status = 'cancelled', finished_at = now(),
                            last_error = 'cancelled: its storage config is inactive'
                      WHERE status = 'queued'
                        AND storage_config_id IN (SELECT id FROM storage_configs WHERE NOT is_active)",
                )
                .execute(conn)
                .await
            })
            .await?;
        Ok(n as u64)
    }
}
