//! Users and storage configs: what `config add|list` and the tests need without the web backend.

use std::path::PathBuf;

use almanac_domain::{AssetId, BurstId, StorageConfig, StorageConfigId, User, UserId};
use diesel::sql_types::{Bool, Text, Uuid};
use diesel::{QueryableByName, sql_query};
use diesel_async::RunQueryDsl;

use crate::PgStore;
use crate::error::{self, StoreError};
use crate::tx::{Lane, within};

/// A storage config to register.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewStorageConfig {
    /// The owner's user name; the user is created when it does not exist yet.
    pub username: String,
    /// Absolute path of the originals.
    pub root_path: PathBuf,
}

/// One "on this day" memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Memory {
    /// The asset shown (a burst's primary frame, a Live Photo's still).
    pub asset_id: AssetId,
    /// Its path, for people.
    pub display_path: String,
    /// A video rather than a still.
    pub is_video: bool,
    /// When it was taken.
    pub captured_at: chrono::DateTime<chrono::Utc>,
    /// The burst it stands for, if any.
    pub burst_id: Option<BurstId>,
}

#[derive(QueryableByName)]
struct MemoryRow {
    #[diesel(sql_type = Uuid)]
    id: uuid::Uuid,
    #[diesel(sql_type = Text)]
    display_path: String,
    #[diesel(sql_type = Text)]
    media_type: String,
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    captured_at: chrono::DateTime<chrono::Utc>,
    #[diesel(sql_type = diesel::sql_types::Nullable<Uuid>)]
    burst_id: Option<uuid::Uuid>,
}

#[derive(QueryableByName)]
struct UserRow {
    #[diesel(sql_type = Uuid)]
    id: uuid::Uuid,
    #[diesel(sql_type = Text)]
    username: String,
    #[diesel(sql_type = Bool)]
    disabled: bool,
}

#[derive(QueryableByName)]
struct ConfigRow {
    #[diesel(sql_type = Uuid)]
    id: uuid::Uuid,
    #[diesel(sql_type = Uuid)]
    user_id: uuid::Uuid,
    #[diesel(sql_type = Text)]
    root_path: String,
    #[diesel(sql_type = Bool)]
    is_active: bool,
    #[diesel(sql_type = diesel::sql_types::Nullable<Bool>)]
    root_is_mount_point: Option<bool>,
    #[diesel(sql_type = diesel::sql_types::Array<diesel::sql_types::Bytea>)]
    mounts_below: Vec<Vec<u8>>,
}

/// The columns a [`ConfigRow`] reads.
pub(crate) const CONFIG_COLUMNS: &str = "id, user_id, root_path, is_active, root_is_mount_point, mounts_below";

impl From<ConfigRow> for StorageConfig {
    fn from(r: ConfigRow) -> Self {
        StorageConfig {
            id: StorageConfigId::from_uuid(r.id),
            user_id: UserId::from_uuid(r.user_id),
            root_path: PathBuf::from(r.root_path),
            is_active: r.is_active,
            root_is_mount_point: r.root_is_mount_point,
            mounts_below: r.mounts_below,
        }
    }
}

#[derive(QueryableByName)]
struct OverlapRow {
    #[diesel(sql_type = Uuid)]
    a_id: uuid::Uuid,
    #[diesel(sql_type = Text)]
    a_root: String,
    #[diesel(sql_type = Text)]
    a_user: String,
    #[diesel(sql_type = Uuid)]
    b_id: uuid::Uuid,
    #[diesel(sql_type = Text)]
    b_root: String,
    #[diesel(sql_type = Text)]
    b_user: String,
}

/// Two storage configs whose roots are the same tree or one inside the other (possible only in a catalogue
/// older than the canonical-root rule, ADR 0009).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootOverlap {
    /// One config, its root and its owner's name: the root that holds the other's.
    pub first: (StorageConfigId, PathBuf, String),
    /// The other, whose root is inside the first's (or is the same).
    pub second: (StorageConfigId, PathBuf, String),
}

impl From<OverlapRow> for RootOverlap {
    fn from(r: OverlapRow) -> Self {
        RootOverlap {
            first: (StorageConfigId::from_uuid(r.a_id), PathBuf::from(r.a_root), r.a_user),
            second: (StorageConfigId::from_uuid(r.b_id), PathBuf::from(r.b_root), r.b_user),
        }
    }
}

/// Whether two roots are one tree or nest, compared as canonical paths (a trailing slash ignored). SQL over
/// `storage_configs` aliased `a` and `b`; [`almanac_domain::roots_overlap`] is the same rule in Rust.
const ROOTS_OVERLAP: &str = "(rtrim(a.root_path, '/') = rtrim(b.root_path, '/')
        OR starts_with(rtrim(a.root_path, '/') || '/', rtrim(b.root_path, '/') || '/')
        OR starts_with(rtrim(b.root_path, '/') || '/', rtrim(a.root_path, '/') || '/'))";

impl PgStore {
    /// Registers a storage config, creating its user when needed. The root path must be canonical (absolute,
    /// UTF-8, no trailing slash, no `.` or `..`, not `/`: resolve links first, as `config add` does) and must
    /// neither equal, contain nor lie inside another config's root, whoever owns it. Concurrent registrations
    /// take turns, so two overlapping roots cannot both get in.
    #[mutants::skip]
    pub async fn add_storage_config(&self, new: &NewStorageConfig) -> Result<(User, StorageConfig), StoreError> {
        let root = new.root_path.to_str().ok_or_else(|| {
            StoreError::Conflict(format!("the root path {} must be valid UTF-8", new.root_path.display()))
        })?;
        almanac_domain::check_canonical_root(root).map_err(|e| StoreError::Conflict(e.to_string()))?;
        let username = new.username.trim();
        if username.is_empty() {
            return Err(StoreError::Conflict("the user name must not be blank".into()));
        }
        let mut conn = self.conn().await?;
        // The transaction by hand (`tx::within`): a lost race on the root's unique index is told apart. A refusal
        // commits the transaction (it wrote nothing) and answers in `Ok(Err(_))`.
        let result = within(&mut conn, async |conn| {
            // One registration at a time, so the overlap check below sees every committed root.
            sql_query("LOCK TABLE storage_configs IN SHARE ROW EXCLUSIVE MODE").execute(conn).await?;
            let overlapping: Vec<OverlapRow> = sql_query(format!(
                "SELECT b.id AS a_id, b.root_path AS a_root, u.username AS a_user,
                            b.id AS b_id, b.root_path AS b_root, u.username AS b_user
                       FROM (SELECT $1::text AS root_path) a
                       JOIN storage_configs b ON {ROOTS_OVERLAP}
                       JOIN users u ON u.id = b.user_id
                      ORDER BY b.created_at LIMIT 1"
            ))
            .bind::<Text, _>(root)
            .load(conn)
            .await?;
            if let Some(other) = overlapping.into_iter().next() {
                let (id, owner, theirs) = (other.a_id, other.a_user, other.a_root);
                return Ok(Err(if theirs.trim_end_matches('/') == root {
                    format!("the root path {root} is already registered (storage config {id} of user {owner})")
                } else {
                    format!(
                        "the root {root} overlaps storage config {id} of user {owner} at {theirs}: two configs \
                             may never cover one tree (the per-config rule would protect nothing). Register a \
                             folder that neither contains nor lies inside it"
                    )
                }));
            }
            let user: UserRow = sql_query(
                "INSERT INTO users (id, username) VALUES ($1, $2)
                     ON CONFLICT (username) DO UPDATE SET username = EXCLUDED.username
                     RETURNING id, username, disabled",
            )
            .bind::<Uuid, _>(UserId::new().as_uuid())
            .bind::<Text, _>(username)
            .get_result(conn)
            .await?;
            let config: ConfigRow = sql_query(format!(
                "INSERT INTO storage_configs (id, user_id, root_path) VALUES ($1, $2, $3) RETURNING {CONFIG_COLUMNS}"
            ))
            .bind::<Uuid, _>(StorageConfigId::new().as_uuid())
            .bind::<Uuid, _>(user.id)
            .bind::<Text, _>(root)
            .get_result(conn)
            .await?;
            Ok(Ok((user, config)))
        })
        .await;
        match result {
            Ok(Ok((user, config))) => Ok((
                User { id: UserId::from_uuid(user.id), username: user.username, disabled: user.disabled },
                config.into(),
            )),
            Ok(Err(refused)) => Err(StoreError::Conflict(refused)),
            Err(e) if error::is_unique_violation_of(&e, "uq_storage_configs_root_path") => {
                Err(StoreError::Conflict(format!("the root path {root} is already registered")))
            }
            Err(e) => Err(error::placed(&mut conn, e).await),
        }
    }

    /// Every storage config, oldest first.
    #[mutants::skip]
    pub async fn list_storage_configs(&self) -> Result<Vec<StorageConfig>, StoreError> {
        let rows: Vec<ConfigRow> = self
            .read(async |conn| {
                sql_query(format!("SELECT {CONFIG_COLUMNS} FROM storage_configs ORDER BY created_at, id"))
                    .load(conn)
                    .await
            })
            .await?;
        Ok(rows.into_iter().map(StorageConfig::from).collect())
    }

    /// Records whether a config's root is a mount point, at registration (`config add`); crawls keep it
    /// current through the fenced [`almanac_domain::ports::CatalogueStore::record_root_identity`].
    #[mutants::skip]
    pub async fn set_root_is_mount_point(&self, id: StorageConfigId, is_mount_point: bool) -> Result<(), StoreError> {
        self.read(async |conn| {
            sql_query("UPDATE storage_configs SET root_is_mount_point = $2 WHERE id = $1")
                .bind::<Uuid, _>(id.as_uuid())
                .bind::<Bool, _>(is_mount_point)
                .execute(conn)
                .await
        })
        .await?;
        Ok(())
    }

    /// Every pair of storage configs whose roots overlap (same tree, or one inside the other), once each, the
    /// root that holds the other first (two equal roots by id). Empty in a catalogue made since ADR 0009; an older
    /// one may have some, which `status` reports.
    #[mutants::skip]
    pub async fn root_overlaps(&self) -> Result<Vec<RootOverlap>, StoreError> {
        let rows: Vec<OverlapRow> = self
            .read(async |conn| {
                sql_query(format!(
                    "SELECT a.id AS a_id, a.root_path AS a_root, ua.username AS a_user,
                    b.id AS b_id, b.root_path AS b_root, ub.username AS b_user
               FROM storage_configs a
               JOIN storage_configs b
                 ON (octet_length(rtrim(a.root_path, '/')), a.id) < (octet_length(rtrim(b.root_path, '/')), b.id)
                AND {ROOTS_OVERLAP}
               JOIN users ua ON ua.id = a.user_id JOIN users ub ON ub.id = b.user_id
              ORDER BY a.root_path, b.root_path"
                ))
                .load(conn)
                .await
            })
            .await?;
        Ok(rows.into_iter().map(RootOverlap::from).collect())
    }

    /// The other storage configs whose roots overlap this one's (one indexed row against the others: no
    /// self-join of every config, so a crawl's check stays cheap with thousands of configs).
    #[mutants::skip]
    pub(crate) async fn roots_overlapping(&self, config: StorageConfigId) -> Result<Vec<StorageConfig>, StoreError> {
        let rows: Vec<ConfigRow> = self
            .read(async |conn| {
                sql_query(format!(
                    "SELECT b.id, b.user_id, b.root_path, b.is_active, b.root_is_mount_point, b.mounts_below
               FROM storage_configs a JOIN storage_configs b ON b.id <> a.id AND {ROOTS_OVERLAP}
              WHERE a.id = $1
              ORDER BY b.created_at, b.id"
                ))
                .bind::<Uuid, _>(config.as_uuid())
                .load(conn)
                .await
            })
            .await?;
        Ok(rows.into_iter().map(StorageConfig::from).collect())
    }

    /// The user with this name, if any.
    #[mutants::skip]
    pub async fn user_by_name(&self, username: &str) -> Result<Option<User>, StoreError> {
        let rows: Vec<UserRow> = self
            .read(async |conn| {
                sql_query("SELECT id, username, disabled FROM users WHERE username = $1")
                    .bind::<Text, _>(username)
                    .load(conn)
                    .await
            })
            .await?;
        Ok(rows.into_iter().next().map(|u| User {
            id: UserId::from_uuid(u.id),
            username: u.username,
            disabled: u.disabled,
        }))
    }

    /// Finds a storage config by its id or its root path (as the CLI's `--config` takes either).
    pub async fn find_storage_config(&self, id_or_root: &str) -> Result<StorageConfig, StoreError> {
        let configs = self.list_storage_configs().await?;
        let by_id = id_or_root.parse::<StorageConfigId>().ok();
        configs.into_iter().find(|c| Some(c.id) == by_id || c.root_path == std::path::Path::new(id_or_root)).ok_or_else(
            || {
                StoreError::NotFound(format!(
                    "no storage config with id or root path {id_or_root:?}; `almanac-worker config list` shows them"
                ))
            },
        )
    }

    /// The "on this day" memories of a user: active assets captured on `month`/`day` (the camera's local date)
    /// in any year, newest first, one per burst (its primary frame) and one per Live Photo (its still).
    #[mutants::skip]
    pub async fn on_this_day(&self, user: UserId, month: u32, day: u32, limit: i64) -> Result<Vec<Memory>, StoreError> {
        let rows: Vec<MemoryRow> = self
            .read(async |conn| {
                sql_query(
                    "SELECT a.id, a.display_path, a.media_type, a.captured_at, a.burst_id
               FROM media_assets a
               JOIN storage_configs c ON c.id = a.storage_config_id
               LEFT JOIN bursts b ON b.id = a.burst_id
               LEFT JOIN media_assets p ON p.id = a.paired_asset_id
              WHERE c.user_id = $1 AND NOT a.is_soft_deleted
                AND a.capture_month = $2 AND a.capture_day = $3
                AND (b.id IS NULL OR b.primary_asset_id = a.id)
                AND NOT (a.media_type = 'video' AND p.media_type = 'image' AND NOT p.is_soft_deleted
                         AND p.paired_asset_id = a.id)
              ORDER BY a.captured_at DESC, a.id
              LIMIT $4",
                )
                .bind::<Uuid, _>(user.as_uuid())
                .bind::<diesel::sql_types::SmallInt, _>(month as i16)
                .bind::<diesel::sql_types::SmallInt, _>(day as i16)
                .bind::<diesel::sql_types::BigInt, _>(limit)
                .load(conn)
                .await
            })
            .await?;
        Ok(rows
            .into_iter()
            .map(|r| Memory {
                asset_id: AssetId::from_uuid(r.id),
                display_path: r.display_path,
                is_video: r.media_type == "video",
                captured_at: r.captured_at,
                burst_id: r.burst_id.map(BurstId::from_uuid),
            })
            .collect())
    }

    /// What removing a storage config would delete: its assets (soft-deleted ones included) and work items.
    #[mutants::skip]
    pub async fn removal_counts(&self, id: StorageConfigId) -> Result<(i64, i64), StoreError> {
        #[derive(QueryableByName)]
        struct Counts {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            assets: i64,
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            items: i64,
        }
        let c: Counts = self
            .read(async |conn| {
                sql_query(
                    "SELECT (SELECT count(*) FROM media_assets WHERE storage_config_id = $1) AS assets,
                    (SELECT count(*) FROM work_items WHERE storage_config_id = $1) AS items",
                )
                .bind::<Uuid, _>(id.as_uuid())
                .get_result(conn)
                .await
            })
            .await?;
        Ok((c.assets, c.items))
    }

    /// Removes a deactivated storage config with nothing running: its catalogue (assets, their proxy rows,
    /// bursts, extra paths) and its work items go with it. The proxy files are the caller's to delete (they
    /// lie under `<proxy_root>/<id>/`); the originals are never touched. Refused (a conflict saying why) while
    /// the config is active or an item of it runs.
    #[mutants::skip]
    pub async fn remove_storage_config(&self, id: StorageConfigId) -> Result<(), StoreError> {
        #[derive(QueryableByName)]
        struct State {
            #[diesel(sql_type = Bool)]
            is_active: bool,
            #[diesel(sql_type = Bool)]
            running: bool,
        }
        self.transaction(Lane::Shared, async |conn| {
            let state: Vec<State> = sql_query(
                "SELECT s.is_active,
                        EXISTS (SELECT 1 FROM work_items w WHERE w.storage_config_id = s.id AND w.status = 'running')
                            AS running
                   FROM storage_configs s WHERE s.id = $1 FOR UPDATE",
            )
            .bind::<Uuid, _>(id.as_uuid())
            .load(conn)
            .await?;
            let refusal = match state.into_iter().next() {
                None => Some(StoreError::NotFound(format!("no storage config {id}"))),
                Some(s) if s.is_active => Some(StoreError::Conflict(format!(
                    "storage config {id} is active: deactivate it first (almanac-worker config deactivate {id})"
                ))),
                Some(s) if s.running => Some(StoreError::Conflict(format!(
                    "an item of storage config {id} is running: wait for it to end (almanac-worker status)"
                ))),
                Some(_) => None,
            };
            if let Some(refusal) = refusal {
                return Ok(Err(refusal));
            }
            sql_query("DELETE FROM storage_configs WHERE id = $1").bind::<Uuid, _>(id.as_uuid()).execute(conn).await?;
            Ok(Ok(()))
        })
        .await?
    }

    /// The ids of a storage config's active (not soft-deleted) assets, oldest first.
    #[mutants::skip]
    pub async fn active_asset_ids(&self, config: StorageConfigId) -> Result<Vec<AssetId>, StoreError> {
        #[derive(QueryableByName)]
        struct IdRow {
            #[diesel(sql_type = Uuid)]
            id: uuid::Uuid,
        }
        let rows: Vec<IdRow> = self
            .read(async |conn| {
                sql_query(
                    "SELECT id FROM media_assets WHERE storage_config_id = $1 AND NOT is_soft_deleted ORDER BY id",
                )
                .bind::<Uuid, _>(config.as_uuid())
                .load(conn)
                .await
            })
            .await?;
        Ok(rows.into_iter().map(|r| AssetId::from_uuid(r.id)).collect())
    }

    /// Makes a storage config active or inactive. Inactive configs are not claimed for, and deactivating one
    /// cancels its queued items.
    #[mutants::skip]
    pub async fn set_storage_config_active(&self, id: StorageConfigId, active: bool) -> Result<(), StoreError> {
        let rows = self
            .transaction(Lane::Shared, async |conn| {
                if !active {
                    // An inactive config gets no work: what is queued for it is cancelled now. Items first, then
                    // the config: the claim locks an item, then the config's queue head (ADR 0008), and so does
                    // this; the other order could wait on a claim that waits on it.
                    sql_query(
                        "UPDATE work_items SET status = 'cancelled', finished_at = now(),
                                last_error = 'cancelled: its storage config was deactivated'
                          WHERE storage_config_id = $1 AND status = 'queued'",
                    )
                    .bind::<Uuid, _>(id.as_uuid())
                    .execute(conn)
                    .await?;
                }
                sql_query("UPDATE storage_configs SET is_active = $2 WHERE id = $1")
                    .bind::<Uuid, _>(id.as_uuid())
                    .bind::<Bool, _>(active)
                    .execute(conn)
                    .await
            })
            .await?;
        if rows == 0 {
            return Err(StoreError::NotFound(format!("no storage config {id}")));
        }
        Ok(())
    }
}
