//! Paths: a path changing hands, written once for the three writes that give an asset a path (`relocate`,
//! `record_extra_path`, `ingest`): the active asset whose own path it was loses it, to its first copy or to
//! the bin, in the same fenced transaction; and the reads of a config's rows by folder ([`load_in_folders`]: the
//! pairing candidates, the remembered failures).
//!
//! The files of one crawl are written side by side, and two of them can decide on what the other is about to
//! change (a swap of two files: each is first found to be a copy of the other's asset). So each of these writes
//! first takes the config's path lock (a transaction-level advisory lock, `pg_advisory_xact_lock(PATH_LOCK,
//! hashtext(config))`, released at commit, through a transaction pooler too), and they run one after the other,
//! each seeing what the one before committed.

use almanac_domain::{AssetId, StorageConfigId, ports::FileFacts};
use diesel::QueryResult;
use diesel::sql_query;
use diesel::sql_types::{BigInt, Binary, Text, Timestamptz, Uuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::rows::size;

/// The first key of the config's path lock ("path" in ASCII); the second is the config's id hashed. The
/// two-key advisory locks never meet the migrations' one-key lock.
const PATH_LOCK: i32 = 0x7061_7468;

/// Takes the config's path lock for the rest of the transaction, then takes `path` from the active asset whose
/// own path it is, when that is not `taker`: it moves to its first copy in byte order (a copy that is not
/// `path` itself; the copy is then no longer an extra path), or is soft-deleted when it has none. The statement
/// sees one snapshot and touches disjoint rows.
pub(super) async fn take_path(
    conn: &mut AsyncPgConnection,
    config: StorageConfigId,
    path: &[u8],
    taker: AssetId,
) -> QueryResult<()> {
    sql_query("SELECT pg_advisory_xact_lock($1, hashtext($2::text))")
        .bind::<diesel::sql_types::Integer, _>(PATH_LOCK)
        .bind::<Uuid, _>(config.as_uuid())
        .execute(conn)
        .await?;
    sql_query(
        "WITH lost AS (
            SELECT id FROM media_assets
             WHERE storage_config_id = $1 AND file_path = $2 AND NOT is_soft_deleted AND id <> $3
         ), copy AS (
            SELECT DISTINCT ON (e.asset_id) e.asset_id, e.file_path, e.display_path, e.size_bytes,
                   e.file_modified_at
              FROM asset_extra_paths e JOIN lost ON e.asset_id = lost.id
             WHERE e.storage_config_id = $1 AND e.file_path <> $2
               -- Not a copy written over since with other content, now another asset's own path.
               AND NOT EXISTS (SELECT 1 FROM media_assets o
                                WHERE o.storage_config_id = $1 AND o.file_path = e.file_path AND NOT o.is_soft_deleted)
             ORDER BY e.asset_id, e.file_path
         ), moved AS (
            UPDATE media_assets a
               SET file_path = c.file_path, display_path = c.display_path, size_bytes = c.size_bytes,
                   file_modified_at = c.file_modified_at, last_seen_at = now(), paired_asset_id = NULL
              FROM copy c WHERE a.id = c.asset_id
         ), unpaired AS (
            -- A Live Photo's halves share a folder and a name: a half that moves is paired again by the crawl's
            -- pairing, where it now lies, if it still matches there.
            UPDATE media_assets p SET paired_asset_id = NULL FROM copy c WHERE p.paired_asset_id = c.asset_id
         ), dropped AS (
            DELETE FROM asset_extra_paths e USING copy c
             WHERE e.storage_config_id = $1 AND e.file_path = c.file_path
         )
         UPDATE media_assets SET is_soft_deleted = true, soft_deleted_at = now()
          WHERE id IN (SELECT id FROM lost) AND id NOT IN (SELECT asset_id FROM copy)",
    )
    .bind::<Uuid, _>(config.as_uuid())
    .bind::<Binary, _>(path)
    .bind::<Uuid, _>(taker.as_uuid())
    .execute(conn)
    .await?;
    Ok(())
}

/// Points `asset` at the file `facts` describe and makes it active; the path is no longer an extra path of
/// any asset. After [`take_path`] of the same path in the same transaction. The asset leaves its Live Photo
/// pair, if it had one (a pair's halves share a folder and a name): the crawl's pairing pairs it again where it
/// now lies, if it still matches there.
pub(super) async fn place_at(conn: &mut AsyncPgConnection, asset: AssetId, facts: &FileFacts) -> QueryResult<()> {
    sql_query("UPDATE media_assets SET paired_asset_id = NULL WHERE paired_asset_id = $1")
        .bind::<Uuid, _>(asset.as_uuid())
        .execute(conn)
        .await?;
    sql_query(
        "DELETE FROM asset_extra_paths e USING media_assets a
          WHERE a.id = $1 AND e.storage_config_id = a.storage_config_id AND e.file_path = $2",
    )
    .bind::<Uuid, _>(asset.as_uuid())
    .bind::<Binary, _>(&facts.file_path)
    .execute(conn)
    .await?;
    sql_query(
        "UPDATE media_assets
            SET file_path = $2, display_path = $3, size_bytes = $4, file_modified_at = $5,
                is_soft_deleted = false, soft_deleted_at = NULL, last_seen_at = now(), paired_asset_id = NULL
          WHERE id = $1",
    )
    .bind::<Uuid, _>(asset.as_uuid())
    .bind::<Binary, _>(&facts.file_path)
    .bind::<Text, _>(&facts.display_path)
    .bind::<BigInt, _>(size(facts.size))
    .bind::<Timestamptz, _>(facts.mtime)
    .execute(conn)
    .await?;
    Ok(())
}

/// Records `path` as an extra path of `asset` while it is active; answers whether it was. After [`take_path`]
/// of the same path in the same transaction.
pub(super) async fn add_copy(
    conn: &mut AsyncPgConnection,
    config: StorageConfigId,
    asset: AssetId,
    facts: &FileFacts,
) -> QueryResult<bool> {
    let added = sql_query(
        "INSERT INTO asset_extra_paths
                (storage_config_id, file_path, asset_id, display_path, size_bytes, file_modified_at)
         SELECT $1, $2, $3, $4, $5, $6
          WHERE EXISTS (SELECT 1 FROM media_assets WHERE id = $3 AND NOT is_soft_deleted)
         ON CONFLICT (storage_config_id, file_path) DO UPDATE
            SET asset_id = EXCLUDED.asset_id, display_path = EXCLUDED.display_path,
                size_bytes = EXCLUDED.size_bytes, file_modified_at = EXCLUDED.file_modified_at,
                last_seen_at = now()",
    )
    .bind::<Uuid, _>(config.as_uuid())
    .bind::<Binary, _>(&facts.file_path)
    .bind::<Uuid, _>(asset.as_uuid())
    .bind::<Text, _>(&facts.display_path)
    .bind::<BigInt, _>(size(facts.size))
    .bind::<Timestamptz, _>(facts.mtime)
    .execute(conn)
    .await?;
    Ok(added > 0)
}

/// The index ranges of the folders `under` (all of the config: one range without bounds). A folder's files are
/// those from `folder/` to just before `folder0` ('0' follows '/'): one statement a folder with its bounds bound,
/// so that each is planned as the range it is and a watcher's crawl of one folder reads that folder's rows, not
/// the library's.
pub(super) fn folder_ranges(under: Option<&[Vec<u8>]>) -> Vec<Option<(Vec<u8>, Vec<u8>)>> {
    match under {
        None => vec![None],
        Some(folders) => folders.iter().map(|f| Some(([f, &b"/"[..]].concat(), [f, &b"0"[..]].concat()))).collect(),
    }
}

/// The rows `sql` reads in the config's folders `under` (all of the config: `None`), one statement a folder
/// ([`folder_ranges`]): `sql` binds the config's id as `$1` and a folder's range as `$2` and `$3` (NULL for none).
pub(super) async fn load_in_folders<R>(
    store: &crate::PgStore,
    sql: &'static str,
    config: StorageConfigId,
    under: Option<&[Vec<u8>]>,
) -> Result<Vec<R>, almanac_domain::ports::CatalogueError>
where
    R: diesel::QueryableByName<diesel::pg::Pg> + Send + 'static,
{
    let ranges = folder_ranges(under);
    store
        .read(async |conn| {
            let mut rows = Vec::new();
            for range in &ranges {
                let (from, to) = range.clone().unzip();
                let found: Vec<R> = sql_query(sql)
                    .bind::<Uuid, _>(config.as_uuid())
                    .bind::<diesel::sql_types::Nullable<Binary>, _>(from)
                    .bind::<diesel::sql_types::Nullable<Binary>, _>(to)
                    .load(conn)
                    .await?;
                rows.extend(found);
            }
            Ok(rows)
        })
        .await
        .map_err(almanac_domain::ports::CatalogueError::from)
}
