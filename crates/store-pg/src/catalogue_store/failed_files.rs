//! The files a crawl failed for their content, remembered (`failed_files`, migration 000041): read for a crawl's
//! scope, remembered, forgotten.

use almanac_domain::{
    StorageConfigId,
    ports::{CatalogueError, FailedFile, Fence},
};
use chrono::{DateTime, Utc};
use diesel::sql_query;
use diesel::sql_types::{Array, BigInt, Binary, Text, Timestamptz, Uuid};
use diesel_async::RunQueryDsl;

use super::paths::load_in_folders;
use super::rows::size;
use crate::PgStore;

#[derive(diesel::QueryableByName)]
struct FailedRow {
    #[diesel(sql_type = Binary)]
    file_path: Vec<u8>,
    #[diesel(sql_type = BigInt)]
    size: i64,
    #[diesel(sql_type = Timestamptz)]
    modified_at: DateTime<Utc>,
    #[diesel(sql_type = BigInt)]
    inode: i64,
    #[diesel(sql_type = Timestamptz)]
    inode_changed_at: DateTime<Utc>,
    #[diesel(sql_type = Text)]
    reason: String,
    #[diesel(sql_type = Text)]
    read_by: String,
    #[diesel(sql_type = Timestamptz)]
    failed_at: DateTime<Utc>,
}

/// The config's remembered failures in the folders `under` (one index range a folder), or all of them.
pub(super) async fn read(
    store: &PgStore,
    config: StorageConfigId,
    under: Option<&[Vec<u8>]>,
) -> Result<Vec<FailedFile>, CatalogueError> {
    let rows: Vec<FailedRow> = load_in_folders(
        store,
        "SELECT file_path, size, modified_at, inode, inode_changed_at, reason, read_by, failed_at FROM failed_files
          WHERE storage_config_id = $1
            AND ($2::bytea IS NULL OR file_path >= $2) AND ($3::bytea IS NULL OR file_path < $3)",
        config,
        under,
    )
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| FailedFile {
            file_path: r.file_path,
            size: u64::try_from(r.size).unwrap_or(0),
            mtime: r.modified_at,
            // Stored as its bits: an inode number past i64::MAX reads back as itself.
            inode: (r.inode as u64, r.inode_changed_at),
            reason: r.reason,
            read_by: r.read_by,
            failed_at: r.failed_at,
        })
        .collect())
}

/// Remembers `file` as failed, replacing what was remembered at its path; fenced.
pub(super) async fn remember(
    store: &PgStore,
    fence: Fence,
    config: StorageConfigId,
    file: &FailedFile,
) -> Result<(), CatalogueError> {
    crate::error::path_held(&file.file_path)?;
    store
        .fenced(fence, async |conn| {
            sql_query(
                "INSERT INTO failed_files
                        (storage_config_id, file_path, size, modified_at, inode, inode_changed_at, reason, read_by)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT (storage_config_id, file_path) DO UPDATE
                    SET size = excluded.size, modified_at = excluded.modified_at, inode = excluded.inode,
                        inode_changed_at = excluded.inode_changed_at, reason = excluded.reason,
                        read_by = excluded.read_by, failed_at = now()",
            )
            .bind::<Uuid, _>(config.as_uuid())
            .bind::<Binary, _>(file.file_path.as_slice())
            .bind::<BigInt, _>(size(file.size))
            .bind::<Timestamptz, _>(file.mtime)
            .bind::<BigInt, _>(file.inode.0 as i64)
            .bind::<Timestamptz, _>(file.inode.1)
            .bind::<Text, _>(&file.reason)
            .bind::<Text, _>(&file.read_by)
            .execute(conn)
            .await?;
            Ok(())
        })
        .await
}

/// Forgets the failures remembered at `paths`; fenced.
pub(super) async fn forget(
    store: &PgStore,
    fence: Fence,
    config: StorageConfigId,
    paths: &[Vec<u8>],
) -> Result<(), CatalogueError> {
    if paths.is_empty() {
        return Ok(());
    }
    store
        .fenced(fence, async |conn| {
            sql_query("DELETE FROM failed_files WHERE storage_config_id = $1 AND file_path = ANY ($2)")
                .bind::<Uuid, _>(config.as_uuid())
                .bind::<Array<Binary>, _>(paths)
                .execute(conn)
                .await?;
            Ok(())
        })
        .await
}
