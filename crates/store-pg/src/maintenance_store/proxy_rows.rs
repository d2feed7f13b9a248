//! The statements on proxy rows: those of proxy deletion and purge, and the proxy sweep's, which read the rows
//! of one folder of the proxy root (`<config id>/<2 hex>/`) at a time. A folder is a range of paths in byte
//! order, compared in the "C" collation, which the index on the path is built in (migration
//! `proxy_files_by_folder`): the database's own locale may order `/` elsewhere.

use almanac_domain::{
    AssetId, NewWorkItem, ProxyType, StorageConfigId, WorkItemId,
    ports::{CatalogueError, Fence, ServedConfigs, StoredProxy},
};
use diesel::sql_types::{Array, Nullable, Text, Uuid};
use diesel::{QueryableByName, sql_query};
use diesel_async::RunQueryDsl;

use super::{PathRow, ProxyRow, uuids};
use crate::PgStore;

/// [`almanac_domain::ports::MaintenanceStore::proxies_of`].
#[mutants::skip]
pub(super) async fn of(
    store: &PgStore,
    assets: &[AssetId],
    types: Option<&[ProxyType]>,
) -> Result<Vec<ProxyRow>, CatalogueError> {
    let types: Option<Vec<&str>> = types.map(|t| t.iter().map(|p| p.as_str()).collect());
    store
        .read(async |conn| {
            sql_query(
                "SELECT asset_id, proxy_type, relative_path, size_bytes FROM proxy_files
                  WHERE asset_id = ANY($1) AND ($2::text[] IS NULL OR proxy_type = ANY($2))
                  ORDER BY asset_id, proxy_type",
            )
            .bind::<Array<Uuid>, _>(uuids(assets))
            .bind::<Nullable<Array<Text>>, _>(types)
            .load(conn)
            .await
        })
        .await
        .map_err(CatalogueError::from)
}

/// [`almanac_domain::ports::MaintenanceStore::proxies_going`].
#[mutants::skip]
pub(super) async fn going(store: &PgStore, fence: Fence, asset: AssetId) -> Result<(), CatalogueError> {
    store
        .fenced(fence, async |conn| {
            sql_query("UPDATE media_assets SET proxies_missing = true WHERE id = $1 AND NOT proxies_missing")
                .bind::<Uuid, _>(asset.as_uuid())
                .execute(conn)
                .await?;
            Ok(())
        })
        .await
}

/// [`almanac_domain::ports::MaintenanceStore::delete_proxy_rows`]: the rows go and the assets are marked
/// `proxies_missing`, so the next crawl reads them again and makes their proxies again (it would otherwise skip
/// the unchanged file).
#[mutants::skip]
pub(super) async fn delete(store: &PgStore, fence: Fence, proxies: &[StoredProxy]) -> Result<u64, CatalogueError> {
    let assets: Vec<uuid::Uuid> = proxies.iter().map(|p| p.asset_id.as_uuid()).collect();
    let types: Vec<&str> = proxies.iter().map(|p| p.proxy_type.as_str()).collect();
    let n = store
        .fenced(fence, async |conn| {
            let n = sql_query(
                "DELETE FROM proxy_files p USING unnest($1::uuid[], $2::text[]) AS d(asset_id, proxy_type)
                  WHERE p.asset_id = d.asset_id AND p.proxy_type = d.proxy_type",
            )
            .bind::<Array<Uuid>, _>(&assets)
            .bind::<Array<Text>, _>(types)
            .execute(conn)
            .await?;
            sql_query("UPDATE media_assets SET proxies_missing = true WHERE id = ANY($1)")
                .bind::<Array<Uuid>, _>(&assets)
                .execute(conn)
                .await?;
            Ok(n)
        })
        .await?;
    Ok(n as u64)
}

/// [`almanac_domain::ports::MaintenanceStore::referenced_proxy_paths`].
#[mutants::skip]
pub(super) async fn referenced(store: &PgStore, paths: &[String]) -> Result<Vec<String>, CatalogueError> {
    let rows: Vec<PathRow> = store
        .read(async |conn| {
            sql_query("SELECT relative_path FROM proxy_files WHERE relative_path COLLATE \"C\" = ANY($1)")
                .bind::<Array<Text>, _>(paths)
                .load(conn)
                .await
        })
        .await
        .map_err(CatalogueError::from)?;
    Ok(rows.into_iter().map(|r| r.relative_path).collect())
}

/// [`almanac_domain::ports::MaintenanceStore::configs_to_check`].
#[mutants::skip]
pub(super) async fn configs_to_check(
    store: &PgStore,
    served: ServedConfigs,
) -> Result<Vec<StorageConfigId>, CatalogueError> {
    let configs = store.list_storage_configs().await.map_err(CatalogueError::from)?;
    Ok(configs.into_iter().filter(|c| c.is_active && served.includes(c.user_id)).map(|c| c.id).collect())
}

/// [`almanac_domain::ports::MaintenanceStore::enqueue_follow_ups`].
#[mutants::skip]
pub(super) async fn enqueue_follow_ups(
    store: &PgStore,
    fence: Fence,
    items: &[NewWorkItem],
) -> Result<(), CatalogueError> {
    let ids: Vec<WorkItemId> = items.iter().map(|_| WorkItemId::new()).collect();
    store
        .fenced(fence, async |conn| {
            if !items.is_empty() {
                crate::queue::enqueue_many_query(&ids, items.iter()).execute(conn).await?;
            }
            Ok(())
        })
        .await
}

/// The range of paths in the folder `<config>/<prefix>/`, or in the config's whole folder when `prefix` is
/// empty: from the folder's name and a `/` up to (not including) its name and a `0`, the byte after `/`.
fn range(config: StorageConfigId, prefix: &str) -> (String, String) {
    let folder = if prefix.is_empty() { config.to_string() } else { format!("{config}/{prefix}") };
    (format!("{folder}/"), format!("{folder}0"))
}

#[derive(QueryableByName)]
struct PrefixRow {
    #[diesel(sql_type = Text)]
    prefix: String,
}

/// [`almanac_domain::ports::MaintenanceStore::proxy_folders`]: one walk of the config's range of the index.
#[mutants::skip]
pub(super) async fn folders(store: &PgStore, config: StorageConfigId) -> Result<Vec<String>, CatalogueError> {
    let (from, to) = range(config, "");
    let rows: Vec<PrefixRow> = store
        .read(async |conn| {
            sql_query(
                "SELECT DISTINCT substr(relative_path, $3, 2) AS prefix FROM proxy_files
                  WHERE relative_path IS NOT NULL
                    AND relative_path COLLATE \"C\" >= $1 AND relative_path COLLATE \"C\" < $2
                    AND substr(relative_path, $3 + 2, 1) = '/'
                  ORDER BY 1",
            )
            .bind::<Text, _>(&from)
            .bind::<Text, _>(&to)
            .bind::<diesel::sql_types::Integer, _>(from.len() as i32 + 1)
            .load(conn)
            .await
        })
        .await
        .map_err(CatalogueError::from)?;
    Ok(rows.into_iter().map(|r| r.prefix).collect())
}

/// [`almanac_domain::ports::MaintenanceStore::referenced_proxy_paths_in`].
#[mutants::skip]
pub(super) async fn referenced_in(
    store: &PgStore,
    config: StorageConfigId,
    prefix: &str,
) -> Result<Vec<String>, CatalogueError> {
    let (from, to) = range(config, prefix);
    let rows: Vec<PathRow> = store
        .read(async |conn| {
            sql_query(
                "SELECT relative_path FROM proxy_files
                  WHERE relative_path IS NOT NULL
                    AND relative_path COLLATE \"C\" >= $1 AND relative_path COLLATE \"C\" < $2",
            )
            .bind::<Text, _>(&from)
            .bind::<Text, _>(&to)
            .load(conn)
            .await
        })
        .await
        .map_err(CatalogueError::from)?;
    Ok(rows.into_iter().map(|r| r.relative_path).collect())
}

/// [`almanac_domain::ports::MaintenanceStore::proxies_to_check_in`].
#[mutants::skip]
pub(super) async fn to_check_in(
    store: &PgStore,
    config: StorageConfigId,
    prefix: &str,
) -> Result<Vec<ProxyRow>, CatalogueError> {
    let (from, to) = range(config, prefix);
    store
        .read(async |conn| {
            sql_query(
                "SELECT p.asset_id, p.proxy_type, p.relative_path, p.size_bytes
                   FROM proxy_files p JOIN media_assets a ON a.id = p.asset_id
                  WHERE p.relative_path IS NOT NULL
                    AND p.relative_path COLLATE \"C\" >= $1 AND p.relative_path COLLATE \"C\" < $2
                    AND a.storage_config_id = $3 AND NOT a.is_soft_deleted",
            )
            .bind::<Text, _>(&from)
            .bind::<Text, _>(&to)
            .bind::<Uuid, _>(config.as_uuid())
            .load(conn)
            .await
        })
        .await
        .map_err(CatalogueError::from)
}

/// [`almanac_domain::ports::MaintenanceStore::proxies_to_check_of`].
#[mutants::skip]
pub(super) async fn to_check_of(
    store: &PgStore,
    config: StorageConfigId,
    assets: &[AssetId],
) -> Result<Vec<ProxyRow>, CatalogueError> {
    store
        .read(async |conn| {
            sql_query(
                "SELECT p.asset_id, p.proxy_type, p.relative_path, p.size_bytes
                   FROM proxy_files p JOIN media_assets a ON a.id = p.asset_id
                  WHERE p.asset_id = ANY($1) AND p.relative_path IS NOT NULL
                    AND a.storage_config_id = $2 AND NOT a.is_soft_deleted",
            )
            .bind::<Array<Uuid>, _>(uuids(assets))
            .bind::<Uuid, _>(config.as_uuid())
            .load(conn)
            .await
        })
        .await
        .map_err(CatalogueError::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_is_the_range_of_paths_beneath_it_in_byte_order() {
        let config = StorageConfigId::from_uuid(uuid::Uuid::nil());
        let (from, to) = range(config, "ab");
        let inside = format!("{config}/ab/{}/preview.jpg", "ab".repeat(32));
        for outside in
            [format!("{config}/ac/x"), format!("{config}/aa/x"), format!("{config}/ab"), format!("{config}/ab0")]
        {
            assert!(!(from <= outside && outside < to), "{outside}");
        }
        assert!(from <= inside && inside < to);
        let (from, to) = range(config, "");
        assert!(from <= inside && inside < to && !(from <= format!("{config}0") && format!("{config}0") < to));
    }
}
