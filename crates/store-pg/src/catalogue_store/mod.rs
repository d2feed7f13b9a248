//! The catalogue statements the crawl needs ([`CatalogueStore`]).

use almanac_domain::{
    AssetId, AssetMetadata, CaptureTime, ContentHash, NewWorkItem, StorageConfig, StorageConfigId,
    ports::{
        CatalogueError, CatalogueStore, FailedFile, Fence, FileFacts, HashMatch, IngestOutcome, KnownFile, NewAsset,
        NewProxy, PairingCandidate, Sidecar,
    },
};
use diesel::sql_query;
use diesel::sql_types::{Array, BigInt, Binary, Bool, Integer, Nullable, SmallInt, Text, Timestamptz, Uuid};
use diesel_async::RunQueryDsl;

use crate::PgStore;
use crate::error;
use crate::tx::{Refused, fenced_within};

mod failed_files;
mod paths;
mod rows;

use paths::load_in_folders;
use rows::{
    ACTIVE_CONTENT_INDEX, CandidateRow, HashRow, IdRow, KnownRow, first_page, insert_asset, insert_metadata,
    insert_proxy, media_type, size,
};

impl CatalogueStore for PgStore {
    #[mutants::skip]
    async fn storage_config(&self, id: StorageConfigId) -> Result<Option<StorageConfig>, CatalogueError> {
        Ok(self.list_storage_configs().await.map_err(CatalogueError::from)?.into_iter().find(|c| c.id == id))
    }

    #[mutants::skip]
    async fn overlapping_roots(&self, config: StorageConfigId) -> Result<Vec<StorageConfig>, CatalogueError> {
        self.roots_overlapping(config).await.map_err(CatalogueError::from)
    }

    #[mutants::skip]
    async fn has_proxy_files(&self, config: StorageConfigId) -> Result<bool, CatalogueError> {
        // A range of paths on the proxy files' index: `<config id>/` up to `<config id>0`, '0' following '/'. Only
        // active assets' count: a soft-deleted one keeps its rows until the purge, and `regenerate` (the way to
        // have proxies made again) leaves it alone.
        let found: rows::YesRow = self
            .read(async |conn| {
                sql_query(
                    "SELECT EXISTS (SELECT 1 FROM proxy_files AS p JOIN media_assets AS a ON a.id = p.asset_id
                                     WHERE p.relative_path IS NOT NULL AND NOT a.is_soft_deleted
                                       AND p.relative_path COLLATE \"C\" >= $1
                                       AND p.relative_path COLLATE \"C\" < $2) AS yes",
                )
                .bind::<Text, _>(format!("{config}/"))
                .bind::<Text, _>(format!("{config}0"))
                .get_result(conn)
                .await
            })
            .await
            .map_err(CatalogueError::from)?;
        Ok(found.yes)
    }

    #[mutants::skip]
    async fn record_root_identity(
        &self,
        fence: Fence,
        config: StorageConfigId,
        is_mount_point: bool,
        mounts_below: &[Vec<u8>],
    ) -> Result<(), CatalogueError> {
        self.fenced(fence, async |conn| {
            sql_query("UPDATE storage_configs SET root_is_mount_point = $2, mounts_below = $3 WHERE id = $1")
                .bind::<Uuid, _>(config.as_uuid())
                .bind::<Bool, _>(is_mount_point)
                .bind::<diesel::sql_types::Array<diesel::sql_types::Bytea>, _>(mounts_below)
                .execute(conn)
                .await?;
            Ok(())
        })
        .await
    }

    #[mutants::skip]
    async fn known_files(
        &self,
        config: StorageConfigId,
        folder: &[u8],
        after: Option<&KnownFile>,
        limit: i64,
    ) -> Result<Vec<KnownFile>, CatalogueError> {
        // Keyset paging in (path, extra) order: each arm reads its index in path order from where the last page
        // ended (an own path sorts before an extra path at the same bytes), so a page costs the same at the end
        // of a library of a million files as at its start. A folder is the range of paths from `folder/` up to
        // `folder0` (`0` follows `/`), both bounds in the index condition; its first page starts at `folder/`,
        // which no path equals. The statement orders by path alone, which the two arms' index walks give merged
        // as they come; ordering by `extra` too made the server sort every page again (about 40% of a page's
        // time at 10,000 rows). It reads one row more than the page (`$4`), and `first_page` puts equal paths in
        // order.
        let (lower, upper) = if folder.is_empty() {
            (Vec::new(), None)
        } else {
            ([folder, b"/"].concat(), Some([folder, b"0"].concat()))
        };
        let (after_path, after_extra) = after.map_or((&lower[..], false), |k| (&k.facts.file_path[..], k.extra));
        let (own_below, extra_below) = match upper {
            Some(_) => ("AND a.file_path < $5", "AND e.file_path < $5"),
            None => ("", ""),
        };
        let statement = format!(
            "(SELECT a.id AS asset_id, a.file_path, a.size_bytes, a.file_modified_at,
                    false AS extra, NOT a.proxies_missing AS proxies_complete, NOT a.date_outdated AS date_current,
                    a.sidecar_path, a.sidecar_size, a.sidecar_modified_at
               FROM media_assets a
              WHERE a.storage_config_id = $1 AND NOT a.is_soft_deleted AND a.file_path > $2 {own_below}
              ORDER BY a.file_path
              LIMIT $4)
             UNION ALL
             (SELECT e.asset_id, e.file_path, e.size_bytes, e.file_modified_at, true, true, true,
                     NULL, NULL, NULL
                FROM asset_extra_paths e JOIN media_assets a ON a.id = e.asset_id
               WHERE e.storage_config_id = $1 AND NOT a.is_soft_deleted
                 AND e.file_path >= $2 AND NOT ($3 AND e.file_path = $2) {extra_below}
               ORDER BY e.file_path
               LIMIT $4)
             ORDER BY file_path
             LIMIT $4"
        );
        let rows: Vec<KnownRow> = self
            .read(async |conn| {
                let query = sql_query(statement.as_str())
                    .bind::<Uuid, _>(config.as_uuid())
                    .bind::<Binary, _>(after_path)
                    .bind::<Bool, _>(after_extra)
                    .bind::<BigInt, _>(limit.saturating_add(1));
                match &upper {
                    Some(upper) => query.bind::<Binary, _>(upper).load(conn).await,
                    None => query.load(conn).await,
                }
            })
            .await
            .map_err(CatalogueError::from)?;
        Ok(first_page(rows.into_iter().map(KnownRow::known).collect(), limit))
    }

    async fn extra_paths_of(
        &self,
        config: StorageConfigId,
        assets: &[AssetId],
    ) -> Result<Vec<KnownFile>, CatalogueError> {
        let ids: Vec<uuid::Uuid> = assets.iter().map(AssetId::as_uuid).collect();
        let mut known = Vec::new();
        for chunk in ids.chunks(10_000) {
            let rows: Vec<KnownRow> = self
                .read(async |conn| {
                    sql_query(
                        "SELECT e.asset_id, e.file_path, e.size_bytes, e.file_modified_at,
                                true AS extra, true AS proxies_complete, true AS date_current,
                                NULL AS sidecar_path, NULL AS sidecar_size, NULL AS sidecar_modified_at
                           FROM asset_extra_paths e
                          WHERE e.storage_config_id = $1 AND e.asset_id = ANY($2)
                          ORDER BY e.file_path",
                    )
                    .bind::<Uuid, _>(config.as_uuid())
                    .bind::<Array<Uuid>, _>(chunk)
                    .load(conn)
                    .await
                })
                .await
                .map_err(CatalogueError::from)?;
            known.extend(rows.into_iter().map(KnownRow::known));
        }
        Ok(known)
    }

    #[mutants::skip]
    async fn active_assets(&self, config: StorageConfigId) -> Result<u64, CatalogueError> {
        // Counted on the partial index of active paths.
        let row: rows::CountRow = self
            .read(async |conn| {
                sql_query("SELECT count(*) AS n FROM media_assets WHERE storage_config_id = $1 AND NOT is_soft_deleted")
                    .bind::<Uuid, _>(config.as_uuid())
                    .get_result(conn)
                    .await
            })
            .await
            .map_err(CatalogueError::from)?;
        Ok(u64::try_from(row.n).unwrap_or(0))
    }

    #[mutants::skip]
    async fn find_by_hash(
        &self,
        config: StorageConfigId,
        hash: &ContentHash,
    ) -> Result<Vec<HashMatch>, CatalogueError> {
        let rows: Vec<HashRow> = self
            .read(async |conn| {
                sql_query(
                    "SELECT id, file_path, is_soft_deleted FROM media_assets
              WHERE storage_config_id = $1 AND content_hash = $2
              ORDER BY is_soft_deleted, soft_deleted_at DESC",
                )
                .bind::<Uuid, _>(config.as_uuid())
                .bind::<Text, _>(hash.as_hex())
                .load(conn)
                .await
            })
            .await
            .map_err(CatalogueError::from)?;
        Ok(rows
            .into_iter()
            .map(|r| HashMatch {
                asset_id: AssetId::from_uuid(r.id),
                file_path: r.file_path,
                soft_deleted: r.is_soft_deleted,
            })
            .collect())
    }

    #[mutants::skip]
    async fn relocate(&self, fence: Fence, asset: AssetId, facts: &FileFacts) -> Result<(), CatalogueError> {
        crate::error::path_held(&facts.file_path)?;
        self.fenced(fence, async |conn| {
            let config: IdRow = sql_query("SELECT storage_config_id AS id FROM media_assets WHERE id = $1")
                .bind::<Uuid, _>(asset.as_uuid())
                .get_result(conn)
                .await?;
            // Whatever active asset held this path before has lost it (its content changed into this one's).
            paths::take_path(conn, StorageConfigId::from_uuid(config.id), &facts.file_path, asset).await?;
            paths::place_at(conn, asset, facts).await
        })
        .await
    }

    #[mutants::skip]
    async fn record_extra_path(
        &self,
        fence: Fence,
        config: StorageConfigId,
        asset: AssetId,
        facts: &FileFacts,
    ) -> Result<(), CatalogueError> {
        crate::error::path_held(&facts.file_path)?;
        self.fenced(fence, async |conn| {
            // An active asset whose own path this was has lost it (its content changed into this asset's).
            paths::take_path(conn, config, &facts.file_path, asset).await?;
            if !paths::add_copy(conn, config, asset, facts).await? {
                // The asset lost its own path after this file was placed (a file beside this one, written
                // just before, took it): its content is here, and it lives on here.
                paths::place_at(conn, asset, facts).await?;
            }
            Ok(())
        })
        .await
    }

    #[mutants::skip]
    async fn put_proxies(
        &self,
        fence: Fence,
        asset: AssetId,
        proxies: &[NewProxy],
        metadata: &AssetMetadata,
    ) -> Result<(), CatalogueError> {
        self.fenced(fence, async |conn| {
            for p in proxies {
                insert_proxy(asset, p).execute(conn).await?;
            }
            insert_metadata(asset, metadata).execute(conn).await?;
            sql_query("UPDATE media_assets SET proxies_missing = false WHERE id = $1")
                .bind::<Uuid, _>(asset.as_uuid())
                .execute(conn)
                .await?;
            Ok(())
        })
        .await
    }

    #[mutants::skip]
    async fn redate(
        &self,
        fence: Fence,
        asset: AssetId,
        capture: Option<&CaptureTime>,
        sidecar: Option<&Sidecar>,
    ) -> Result<(), CatalogueError> {
        // One statement either way: a capture replaces the date (its offset too, unknown included); none keeps it.
        let month_day = capture.map(CaptureTime::local_month_day);
        self.fenced(fence, async |conn| {
            sql_query(
                "UPDATE media_assets
                    SET captured_at = coalesce($2, captured_at),
                        captured_offset_minutes = CASE WHEN $2 IS NULL THEN captured_offset_minutes ELSE $3 END,
                        captured_at_source = coalesce($4, captured_at_source),
                        capture_month = coalesce($5, capture_month), capture_day = coalesce($6, capture_day),
                        sidecar_path = $7, sidecar_size = $8, sidecar_modified_at = $9, date_outdated = false
                  WHERE id = $1",
            )
            .bind::<Uuid, _>(asset.as_uuid())
            .bind::<Nullable<Timestamptz>, _>(capture.map(|c| c.at))
            .bind::<Nullable<Integer>, _>(capture.and_then(|c| c.offset_minutes))
            .bind::<Nullable<Text>, _>(capture.map(|c| c.source.as_str()))
            .bind::<Nullable<SmallInt>, _>(month_day.map(|(month, _)| month as i16))
            .bind::<Nullable<SmallInt>, _>(month_day.map(|(_, day)| day as i16))
            .bind::<Nullable<Binary>, _>(sidecar.map(|s| s.path.as_slice()))
            .bind::<Nullable<BigInt>, _>(sidecar.map(|s| size(s.size)))
            .bind::<Nullable<Timestamptz>, _>(sidecar.map(|s| s.mtime))
            .execute(conn)
            .await?;
            Ok(())
        })
        .await
    }

    #[mutants::skip]
    async fn ingest(&self, fence: Fence, asset: &NewAsset) -> Result<IngestOutcome, CatalogueError> {
        crate::error::path_held(&asset.facts.file_path)?;
        let id = AssetId::new();
        let mut conn = self.conn().await?;
        // The fenced transaction by hand (`tx::fenced_within`): a lost race on the content index is told apart,
        // and answered with the asset that holds the content.
        let stored = fenced_within(&mut conn, Some(fence), async |conn| {
            if asset.replaces.is_some() {
                // The active asset whose own path this is loses it (its content changed), as in every write
                // that gives a path.
                paths::take_path(conn, asset.storage_config_id, &asset.facts.file_path, id).await?;
            }
            insert_asset(id, asset).execute(conn).await?;
            insert_metadata(id, &asset.metadata).execute(conn).await?;
            for p in &asset.proxies {
                insert_proxy(id, p).execute(conn).await?;
            }
            Ok(())
        })
        .await;
        match stored {
            Ok(()) => Ok(IngestOutcome::Ingested(id)),
            Err(Refused::Db(e)) if error::is_unique_violation_of(&e, ACTIVE_CONTENT_INDEX) => {
                drop(conn);
                self.holder_of_content(asset).await
            }
            Err(refused) => Err(refused.placed(&mut conn).await),
        }
    }

    #[mutants::skip]
    async fn soft_delete(
        &self,
        fence: Fence,
        config: StorageConfigId,
        assets: &[AssetId],
        extra_paths: &[Vec<u8>],
    ) -> Result<u64, CatalogueError> {
        let ids: Vec<uuid::Uuid> = assets.iter().map(AssetId::as_uuid).collect();
        self.fenced(fence, async |conn| {
            let mut deleted = 0;
            for chunk in ids.chunks(10_000) {
                deleted += sql_query(
                    "UPDATE media_assets SET is_soft_deleted = true, soft_deleted_at = now()
                      WHERE storage_config_id = $1 AND id = ANY($2) AND NOT is_soft_deleted",
                )
                .bind::<Uuid, _>(config.as_uuid())
                .bind::<Array<Uuid>, _>(chunk)
                .execute(conn)
                .await? as u64;
            }
            for chunk in extra_paths.chunks(10_000) {
                sql_query("DELETE FROM asset_extra_paths WHERE storage_config_id = $1 AND file_path = ANY($2)")
                    .bind::<Uuid, _>(config.as_uuid())
                    .bind::<Array<Binary>, _>(chunk)
                    .execute(conn)
                    .await?;
            }
            Ok(deleted)
        })
        .await
    }

    #[mutants::skip]
    async fn pairing_candidates(
        &self,
        config: StorageConfigId,
        under: Option<&[Vec<u8>]>,
    ) -> Result<Vec<PairingCandidate>, CatalogueError> {
        let rows: Vec<CandidateRow> = load_in_folders(
            self,
            "SELECT a.id, a.file_path, a.media_type, a.captured_at, m.live_photo_content_id
                           FROM media_assets AS a LEFT JOIN asset_metadata AS m ON m.asset_id = a.id
                          WHERE a.storage_config_id = $1 AND NOT a.is_soft_deleted
                            AND ($2::bytea IS NULL OR a.file_path >= $2) AND ($3::bytea IS NULL OR a.file_path < $3)
                            AND (a.paired_asset_id IS NULL
                                 OR NOT EXISTS (SELECT 1 FROM media_assets AS p
                                                 WHERE p.id = a.paired_asset_id AND p.storage_config_id = $1
                                                   AND NOT p.is_soft_deleted AND p.paired_asset_id = a.id))",
            config,
            under,
        )
        .await?;
        rows.into_iter()
            .map(|r| {
                Ok(PairingCandidate {
                    asset_id: AssetId::from_uuid(r.id),
                    file_path: r.file_path,
                    media_type: media_type(&r.media_type)?,
                    captured_at: r.captured_at,
                    content_id: r.live_photo_content_id,
                })
            })
            .collect()
    }

    async fn failed_files(
        &self,
        config: StorageConfigId,
        under: Option<&[Vec<u8>]>,
    ) -> Result<Vec<FailedFile>, CatalogueError> {
        failed_files::read(self, config, under).await
    }

    async fn remember_failed_file(
        &self,
        fence: Fence,
        config: StorageConfigId,
        file: &FailedFile,
    ) -> Result<(), CatalogueError> {
        failed_files::remember(self, fence, config, file).await
    }

    async fn forget_failed_files(
        &self,
        fence: Fence,
        config: StorageConfigId,
        paths: &[Vec<u8>],
    ) -> Result<(), CatalogueError> {
        failed_files::forget(self, fence, config, paths).await
    }

    #[mutants::skip]
    async fn pair(&self, fence: Fence, still: AssetId, motion: AssetId) -> Result<(), CatalogueError> {
        self.fenced(fence, async |conn| {
            // Whatever else pointed at either half (a half revived, or left behind by a move) no longer does.
            sql_query(
                "UPDATE media_assets
                    SET paired_asset_id = CASE WHEN id = $1 THEN $2 WHEN id = $2 THEN $1 END
                  WHERE id IN ($1, $2) OR paired_asset_id IN ($1, $2)",
            )
            .bind::<Uuid, _>(still.as_uuid())
            .bind::<Uuid, _>(motion.as_uuid())
            .execute(conn)
            .await?;
            Ok(())
        })
        .await
    }

    #[mutants::skip]
    async fn enqueue_follow_up(&self, fence: Fence, item: &NewWorkItem) -> Result<(), CatalogueError> {
        self.fenced(fence, async |conn| {
            crate::queue::enqueue_query(almanac_domain::WorkItemId::new(), item).execute(conn).await?;
            Ok(())
        })
        .await
    }
}

impl PgStore {
    /// The active asset holding `asset`'s content (its ingest lost the race on the content index).
    async fn holder_of_content(&self, asset: &NewAsset) -> Result<IngestOutcome, CatalogueError> {
        let existing: Vec<IdRow> = self
            .read(async |conn| {
                sql_query(
                    "SELECT id FROM media_assets
                      WHERE storage_config_id = $1 AND content_hash = $2 AND NOT is_soft_deleted",
                )
                .bind::<Uuid, _>(asset.storage_config_id.as_uuid())
                .bind::<Text, _>(asset.content_hash.as_hex())
                .load(conn)
                .await
            })
            .await?;
        existing
            .into_iter()
            .next()
            .map(|r| IngestOutcome::ContentExists(AssetId::from_uuid(r.id)))
            .ok_or_else(|| CatalogueError::Unexpected("content vanished during ingest".into()))
    }
}
