//! The rows the crawl's statements read back, and the statements more than one write shares.

use almanac_domain::{
    AssetId, AssetMetadata, MediaType,
    ports::{CatalogueError, FileFacts, KnownFile, NewAsset, NewProxy, Sidecar},
};
use chrono::{DateTime, Utc};
use diesel::pg::Pg;
use diesel::query_builder::{BoxedSqlQuery, SqlQuery};
use diesel::row::NamedRow;
use diesel::sql_types::{BigInt, Binary, Bool, Double, Integer, Nullable, SmallInt, Text, Timestamptz, Uuid};
use diesel::{QueryableByName, sql_query};

pub(super) const ACTIVE_CONTENT_INDEX: &str = "ix_media_assets_active_content";

pub(super) fn media_type(s: &str) -> Result<MediaType, CatalogueError> {
    match s {
        "image" => Ok(MediaType::Image),
        "video" => Ok(MediaType::Video),
        other => Err(CatalogueError::Unexpected(format!("unknown media type {other:?}").into())),
    }
}

pub(super) const fn media_type_str(t: MediaType) -> &'static str {
    match t {
        MediaType::Image => "image",
        MediaType::Video => "video",
    }
}

pub(super) fn size(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// A known file as `known_files` and `extra_paths_of` read it: the columns in [`KnownRow::COLUMNS`]'s order, read
/// by position (a re-crawl reads a million of these rows; finding each column by its name cost a tenth of the
/// reading).
pub(super) struct KnownRow {
    pub(super) asset_id: uuid::Uuid,
    pub(super) file_path: Vec<u8>,
    pub(super) size_bytes: i64,
    pub(super) file_modified_at: DateTime<Utc>,
    pub(super) extra: bool,
    pub(super) proxies_complete: bool,
    pub(super) date_current: bool,
    pub(super) sidecar_path: Option<Vec<u8>>,
    pub(super) sidecar_size: Option<i64>,
    pub(super) sidecar_modified_at: Option<DateTime<Utc>>,
}

impl KnownRow {
    /// The select list of the statements that read known files, in the order [`QueryableByName::build`] reads
    /// it: each row is checked against it by name in debug builds, so every test that reads a known file checks
    /// the statement that read it.
    pub(super) const COLUMNS: [&str; 10] = [
        "asset_id",
        "file_path",
        "size_bytes",
        "file_modified_at",
        "extra",
        "proxies_complete",
        "date_current",
        "sidecar_path",
        "sidecar_size",
        "sidecar_modified_at",
    ];
}

impl QueryableByName<Pg> for KnownRow {
    fn build<'a>(row: &impl NamedRow<'a, Pg>) -> diesel::deserialize::Result<Self> {
        if row.field_count() != Self::COLUMNS.len() {
            return Err(format!("a known file has {} columns, not {}", row.field_count(), Self::COLUMNS.len()).into());
        }
        #[cfg(debug_assertions)]
        for (i, name) in Self::COLUMNS.iter().enumerate() {
            use diesel::row::{Field as _, Row};
            let found = Row::get(row, i).and_then(|f| f.field_name().map(str::to_owned));
            assert_eq!(found.as_deref(), Some(*name), "the known files' column {i}");
        }
        Ok(Self {
            asset_id: row.get_value::<Uuid, _, _>(0)?,
            file_path: row.get_value::<Binary, _, _>(1)?,
            size_bytes: row.get_value::<BigInt, _, _>(2)?,
            file_modified_at: row.get_value::<Timestamptz, _, _>(3)?,
            extra: row.get_value::<Bool, _, _>(4)?,
            proxies_complete: row.get_value::<Bool, _, _>(5)?,
            date_current: row.get_value::<Bool, _, _>(6)?,
            sidecar_path: row.get_value::<Nullable<Binary>, _, _>(7)?,
            sidecar_size: row.get_value::<Nullable<BigInt>, _, _>(8)?,
            sidecar_modified_at: row.get_value::<Nullable<Timestamptz>, _, _>(9)?,
        })
    }
}

impl KnownRow {
    /// The known file this row is. Its display path is not read (the crawl compares paths as bytes and shows
    /// what the walk found): one column less on each of a re-crawl's million rows.
    pub(super) fn known(self) -> KnownFile {
        KnownFile {
            asset_id: AssetId::from_uuid(self.asset_id),
            facts: FileFacts {
                file_path: self.file_path,
                display_path: String::new(),
                size: u64::try_from(self.size_bytes).unwrap_or(0),
                mtime: self.file_modified_at,
            },
            extra: self.extra,
            sidecar: match (self.sidecar_path, self.sidecar_size, self.sidecar_modified_at) {
                (Some(path), Some(size), Some(mtime)) => {
                    Some(Sidecar { path, size: u64::try_from(size).unwrap_or(0), mtime })
                }
                _ => None,
            },
            proxies_complete: self.proxies_complete,
            date_current: self.date_current,
        }
    }
}

/// The page of `limit` known files in (path, own before extra) order, out of the first `limit + 1` rows a
/// statement gave in path order alone, equal paths in either order (at most two share a path: an asset's own
/// and another's copy). Every row of a path below the last row's path is among them, so sorting puts the page
/// in order; the last path's rows may be cut short by the statement's limit, and then that path is the extra
/// row, left for the next page (which starts after the last one kept).
pub(super) fn first_page(mut rows: Vec<KnownFile>, limit: i64) -> Vec<KnownFile> {
    // Stable, and cheap on rows already in order but for adjacent pairs.
    rows.sort_by(|a, b| (&a.facts.file_path, a.extra).cmp(&(&b.facts.file_path, b.extra)));
    rows.truncate(usize::try_from(limit).unwrap_or(0));
    rows
}

#[derive(QueryableByName)]
pub(super) struct HashRow {
    #[diesel(sql_type = Uuid)]
    pub(super) id: uuid::Uuid,
    #[diesel(sql_type = Binary)]
    pub(super) file_path: Vec<u8>,
    #[diesel(sql_type = Bool)]
    pub(super) is_soft_deleted: bool,
}

#[derive(QueryableByName)]
pub(super) struct CandidateRow {
    #[diesel(sql_type = Uuid)]
    pub(super) id: uuid::Uuid,
    #[diesel(sql_type = Binary)]
    pub(super) file_path: Vec<u8>,
    #[diesel(sql_type = Text)]
    pub(super) media_type: String,
    #[diesel(sql_type = Timestamptz)]
    pub(super) captured_at: DateTime<Utc>,
    #[diesel(sql_type = Nullable<Text>)]
    pub(super) live_photo_content_id: Option<String>,
}

/// A yes or no.
#[derive(QueryableByName)]
pub(super) struct YesRow {
    #[diesel(sql_type = diesel::sql_types::Bool)]
    pub(super) yes: bool,
}

/// A count.
#[derive(QueryableByName)]
pub(super) struct CountRow {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub(super) n: i64,
}

#[derive(QueryableByName)]
pub(super) struct IdRow {
    #[diesel(sql_type = Uuid)]
    pub(super) id: uuid::Uuid,
}

/// Stores a proxy row; a row of the same type for the asset is replaced (a proxy made again).
pub(super) fn insert_proxy(asset: AssetId, p: &NewProxy) -> BoxedSqlQuery<'_, Pg, SqlQuery> {
    sql_query(
        "INSERT INTO proxy_files (id, asset_id, proxy_type, relative_path, inline_value, size_bytes)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (asset_id, proxy_type) DO UPDATE
            SET relative_path = EXCLUDED.relative_path, inline_value = EXCLUDED.inline_value,
                size_bytes = EXCLUDED.size_bytes, created_at = now()",
    )
    .into_boxed()
    .bind::<Uuid, _>(uuid::Uuid::now_v7())
    .bind::<Uuid, _>(asset.as_uuid())
    .bind::<Text, _>(p.proxy_type.as_str())
    .bind::<Nullable<Text>, _>(p.relative_path.as_deref())
    .bind::<Nullable<Text>, _>(p.inline_value.as_deref())
    .bind::<BigInt, _>(size(p.size_bytes))
}

/// Stores a new asset's row under `id`.
pub(super) fn insert_asset(id: AssetId, asset: &NewAsset) -> BoxedSqlQuery<'_, Pg, SqlQuery> {
    let (month, day) = asset.capture.local_month_day();
    sql_query(
        "INSERT INTO media_assets (id, storage_config_id, file_path, display_path, content_hash, size_bytes,
                 file_modified_at, media_type, captured_at, captured_offset_minutes, captured_at_source,
                 capture_month, capture_day, sidecar_path, sidecar_size, sidecar_modified_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
    )
    .into_boxed()
    .bind::<Uuid, _>(id.as_uuid())
    .bind::<Uuid, _>(asset.storage_config_id.as_uuid())
    .bind::<Binary, _>(&asset.facts.file_path)
    .bind::<Text, _>(&asset.facts.display_path)
    .bind::<Text, _>(asset.content_hash.as_hex())
    .bind::<BigInt, _>(size(asset.facts.size))
    .bind::<Timestamptz, _>(asset.facts.mtime)
    .bind::<Text, _>(media_type_str(asset.media_type))
    .bind::<Timestamptz, _>(asset.capture.at)
    .bind::<Nullable<Integer>, _>(asset.capture.offset_minutes)
    .bind::<Text, _>(asset.capture.source.as_str())
    .bind::<SmallInt, _>(month as i16)
    .bind::<SmallInt, _>(day as i16)
    .bind::<Nullable<Binary>, _>(asset.sidecar.as_ref().map(|s| s.path.as_slice()))
    .bind::<Nullable<BigInt>, _>(asset.sidecar.as_ref().map(|s| size(s.size)))
    .bind::<Nullable<Timestamptz>, _>(asset.sidecar.as_ref().map(|s| s.mtime))
}

/// A metadata text as the catalogue can hold it ([`crate::storable`]).
fn storable(text: &str) -> String {
    crate::storable::text(text).into_owned()
}

/// Stores a new asset's metadata (its texts as the catalogue can hold them: read from the file, they could carry a
/// NUL).
pub(super) fn insert_metadata(id: AssetId, m: &AssetMetadata) -> BoxedSqlQuery<'_, Pg, SqlQuery> {
    sql_query(
        "INSERT INTO asset_metadata (asset_id, width, height, orientation_degrees, duration_ms,
                 gps_latitude, gps_longitude, gps_altitude_m, camera_make, camera_model, lens_model,
                 camera_burst_id, live_photo_content_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
             ON CONFLICT (asset_id) DO UPDATE
                SET width = excluded.width, height = excluded.height,
                    orientation_degrees = excluded.orientation_degrees, duration_ms = excluded.duration_ms,
                    gps_latitude = excluded.gps_latitude, gps_longitude = excluded.gps_longitude,
                    gps_altitude_m = excluded.gps_altitude_m, camera_make = excluded.camera_make,
                    camera_model = excluded.camera_model, lens_model = excluded.lens_model,
                    camera_burst_id = excluded.camera_burst_id, live_photo_content_id = excluded.live_photo_content_id",
    )
    .into_boxed()
    .bind::<Uuid, _>(id.as_uuid())
    // A dimension or duration past what its column holds is none rather than a wrapped, negative one.
    .bind::<Nullable<Integer>, _>(m.width.and_then(|w| i32::try_from(w).ok()))
    .bind::<Nullable<Integer>, _>(m.height.and_then(|h| i32::try_from(h).ok()))
    .bind::<SmallInt, _>(m.orientation_degrees as i16)
    .bind::<Nullable<BigInt>, _>(m.duration_ms.and_then(|d| i64::try_from(d).ok()))
    .bind::<Nullable<Double>, _>(m.gps_latitude)
    .bind::<Nullable<Double>, _>(m.gps_longitude)
    .bind::<Nullable<Double>, _>(m.gps_altitude_m)
    .bind::<Nullable<Text>, _>(m.camera_make.as_deref().map(storable))
    .bind::<Nullable<Text>, _>(m.camera_model.as_deref().map(storable))
    .bind::<Nullable<Text>, _>(m.lens_model.as_deref().map(storable))
    .bind::<Nullable<Text>, _>(m.camera_burst_id.as_deref().map(storable))
    .bind::<Nullable<Text>, _>(m.live_photo_content_id.as_deref().map(storable))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(path: &str, extra: bool) -> KnownFile {
        KnownFile {
            asset_id: AssetId::new(),
            facts: FileFacts { file_path: path.into(), display_path: String::new(), size: 1, mtime: Utc::now() },
            extra,
            sidecar: None,
            proxies_complete: true,
            date_current: true,
        }
    }

    fn keys(page: &[KnownFile]) -> Vec<(String, bool)> {
        page.iter().map(|k| (String::from_utf8_lossy(&k.facts.file_path).into_owned(), k.extra)).collect()
    }

    #[test]
    fn a_page_puts_an_own_path_before_a_copy_at_the_same_path_whichever_came_first() {
        for (first, second) in [(false, true), (true, false)] {
            let rows =
                vec![known("a.jpg", false), known("b.jpg", first), known("b.jpg", second), known("c.jpg", false)];
            let page = first_page(rows.clone(), 3);
            assert_eq!(keys(&page), [("a.jpg".into(), false), ("b.jpg".into(), false), ("b.jpg".into(), true)]);
            // The page ends between the two: the own path is in it, the copy starts the next one.
            assert_eq!(keys(&first_page(rows, 2)), [("a.jpg".into(), false), ("b.jpg".into(), false)]);
        }
    }

    #[test]
    fn a_path_cut_short_by_the_limit_is_left_for_the_next_page() {
        // The statement's limit (3 + 1) kept one of b.jpg's two rows, either one: the page ends before b.jpg, and the
        // next one (after a/2.jpg) reads both.
        for extra in [false, true] {
            let rows =
                vec![known("a/1.jpg", false), known("a/2.jpg", true), known("a/2.jpg", false), known("b.jpg", extra)];
            let page = first_page(rows, 3);
            assert_eq!(keys(&page), [("a/1.jpg".into(), false), ("a/2.jpg".into(), false), ("a/2.jpg".into(), true)]);
        }
        let rows = vec![known("a.jpg", false), known("b.jpg", true)];
        assert_eq!(first_page(rows, 3).len(), 2, "the last page, shorter than the limit, is whole");
    }
}
