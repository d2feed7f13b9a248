-- Almanac Worker: initial schema. Names here are a contract that the web backend and operators' tools read.

CREATE TABLE users (
    id          uuid PRIMARY KEY,
    username    text NOT NULL,
    disabled    boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT uq_users_username UNIQUE (username),
    CONSTRAINT ck_users_username_not_blank CHECK (length(btrim(username)) > 0)
);
COMMENT ON TABLE users IS 'People who own storage configs. Minimal here; the web backend owns the rest of a user.';
COMMENT ON COLUMN users.disabled IS 'A disabled user keeps their catalogue but signs in to nothing.';

CREATE TABLE storage_configs (
    id          uuid PRIMARY KEY,
    user_id     uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    root_path   text NOT NULL,
    is_active   boolean NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT uq_storage_configs_root_path UNIQUE (root_path),
    CONSTRAINT ck_storage_configs_root_path_absolute CHECK (left(root_path, 1) = '/')
);
CREATE INDEX ix_storage_configs_user ON storage_configs (user_id);
COMMENT ON TABLE storage_configs IS 'One folder tree of originals, owned by one user. Work items are serialised per storage config.';
COMMENT ON COLUMN storage_configs.root_path IS 'Absolute path of the folder of originals as the Worker sees it; globally unique. Originals are never written.';
COMMENT ON COLUMN storage_configs.is_active IS 'Inactive configs get no new work items and are not claimed for.';

CREATE TABLE media_assets (
    id                  uuid PRIMARY KEY,
    storage_config_id   uuid NOT NULL REFERENCES storage_configs (id) ON DELETE CASCADE,
    file_path           bytea NOT NULL,
    display_path        text NOT NULL,
    content_hash        text NOT NULL,
    size_bytes          bigint NOT NULL,
    file_modified_at    timestamptz NOT NULL,
    media_type          text NOT NULL,
    captured_at         timestamptz NOT NULL,
    captured_offset_minutes integer,
    captured_at_source  text NOT NULL,
    capture_month       smallint NOT NULL,
    capture_day         smallint NOT NULL,
    paired_asset_id     uuid REFERENCES media_assets (id) ON DELETE SET NULL,
    burst_id            uuid,
    is_soft_deleted     boolean NOT NULL DEFAULT false,
    soft_deleted_at     timestamptz,
    last_seen_at        timestamptz NOT NULL DEFAULT now(),
    created_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ck_media_assets_media_type CHECK (media_type IN ('image', 'video')),
    CONSTRAINT ck_media_assets_content_hash CHECK (content_hash ~ '^[0-9a-f]{64}$'),
    CONSTRAINT ck_media_assets_size CHECK (size_bytes >= 0),
    CONSTRAINT ck_media_assets_captured_at_source CHECK (captured_at_source IN ('exif_original', 'exif_digitized', 'exif_modified', 'container', 'file_mtime')),
    CONSTRAINT ck_media_assets_capture_month CHECK (capture_month BETWEEN 1 AND 12),
    CONSTRAINT ck_media_assets_capture_day CHECK (capture_day BETWEEN 1 AND 31),
    CONSTRAINT ck_media_assets_soft_delete CHECK (is_soft_deleted = (soft_deleted_at IS NOT NULL))
);
CREATE UNIQUE INDEX ix_media_assets_active_content ON media_assets (storage_config_id, content_hash) WHERE NOT is_soft_deleted;
CREATE UNIQUE INDEX ix_media_assets_active_path ON media_assets (storage_config_id, file_path) WHERE NOT is_soft_deleted;
CREATE INDEX ix_media_assets_content ON media_assets (storage_config_id, content_hash);
CREATE INDEX ix_media_assets_on_this_day ON media_assets (capture_month, capture_day) WHERE NOT is_soft_deleted;
CREATE INDEX ix_media_assets_soft_deleted ON media_assets (storage_config_id, soft_deleted_at) WHERE is_soft_deleted;
CREATE INDEX ix_media_assets_burst ON media_assets (burst_id) WHERE burst_id IS NOT NULL;
COMMENT ON TABLE media_assets IS 'One media file of a storage config, identified inside the config by its content hash. One active asset per (config, content hash); soft-deleted when its file is gone, revived if it comes back.';
COMMENT ON COLUMN media_assets.file_path IS 'Path relative to the config root, as the exact bytes the file system gave (names need not be UTF-8).';
COMMENT ON COLUMN media_assets.display_path IS 'file_path decoded lossily as UTF-8, for people; never used to open the file.';
COMMENT ON COLUMN media_assets.content_hash IS 'BLAKE3 of the file content, lower-case hex. Proxy folders derive from (config id, content hash).';
COMMENT ON COLUMN media_assets.file_modified_at IS 'The file''s mtime when last hashed: with path and size, a match means unchanged and the file is not re-read.';
COMMENT ON COLUMN media_assets.captured_at IS 'When the shot was taken, as an instant.';
COMMENT ON COLUMN media_assets.captured_offset_minutes IS 'UTC offset of the camera at capture, when known; capture_month/day use the local date it gives.';
COMMENT ON COLUMN media_assets.captured_at_source IS 'Which source gave captured_at: an EXIF date, the video container, or the file mtime.';
COMMENT ON COLUMN media_assets.capture_month IS 'Local month of capture, for the "on this day" index.';
COMMENT ON COLUMN media_assets.capture_day IS 'Local day of month of capture, for the "on this day" index.';
COMMENT ON COLUMN media_assets.paired_asset_id IS 'The other half of a Live Photo (still <-> motion).';
COMMENT ON COLUMN media_assets.burst_id IS 'The burst this frame belongs to, set by burst_detection.';
COMMENT ON COLUMN media_assets.last_seen_at IS 'Last time a crawl read this file (ingested, moved or revived it). Unchanged files are not rewritten by every crawl: what a walk did not find is computed in memory.';

CREATE TABLE bursts (
    id                  uuid PRIMARY KEY,
    storage_config_id   uuid NOT NULL REFERENCES storage_configs (id) ON DELETE CASCADE,
    primary_asset_id    uuid NOT NULL REFERENCES media_assets (id) ON DELETE CASCADE,
    camera_make         text,
    camera_model        text,
    source              text NOT NULL,
    started_at          timestamptz NOT NULL,
    ended_at            timestamptz NOT NULL,
    frame_count         integer NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ck_bursts_source CHECK (source IN ('camera_burst_id', 'time_gap')),
    CONSTRAINT ck_bursts_frames CHECK (frame_count >= 2),
    CONSTRAINT ck_bursts_interval CHECK (ended_at >= started_at)
);
CREATE INDEX ix_bursts_config ON bursts (storage_config_id);
ALTER TABLE media_assets ADD CONSTRAINT fk_media_assets_burst FOREIGN KEY (burst_id) REFERENCES bursts (id) ON DELETE SET NULL;
COMMENT ON TABLE bursts IS 'Rapid-fire shots of one camera grouped by burst_detection; "on this day" shows one memory per burst, its primary frame.';
COMMENT ON COLUMN bursts.source IS 'camera_burst_id when the camera wrote its own burst identifier, time_gap when grouped by capture times.';

CREATE TABLE asset_metadata (
    asset_id            uuid PRIMARY KEY REFERENCES media_assets (id) ON DELETE CASCADE,
    width               integer,
    height              integer,
    orientation_degrees smallint,
    duration_ms         bigint,
    gps_latitude        double precision,
    gps_longitude       double precision,
    gps_altitude_m      double precision,
    camera_make         text,
    camera_model        text,
    lens_model          text,
    camera_burst_id     text,
    live_photo_content_id text,
    CONSTRAINT ck_asset_metadata_orientation CHECK (orientation_degrees IN (0, 90, 180, 270)),
    CONSTRAINT ck_asset_metadata_dimensions CHECK ((width IS NULL OR width > 0) AND (height IS NULL OR height > 0)),
    CONSTRAINT ck_asset_metadata_latitude CHECK (gps_latitude BETWEEN -90 AND 90),
    CONSTRAINT ck_asset_metadata_longitude CHECK (gps_longitude BETWEEN -180 AND 180)
);
COMMENT ON TABLE asset_metadata IS 'What the crawl read from a media file (EXIF, container); one row per asset.';
COMMENT ON COLUMN asset_metadata.width IS 'Stored pixel width, before orientation is applied.';
COMMENT ON COLUMN asset_metadata.orientation_degrees IS 'Clockwise rotation that makes the stored pixels upright (EXIF orientation normalised).';
COMMENT ON COLUMN asset_metadata.camera_burst_id IS 'The camera''s own burst identifier (e.g. Apple''s), which wins over time-gap grouping.';
COMMENT ON COLUMN asset_metadata.live_photo_content_id IS 'Apple''s content identifier that ties a Live Photo''s still to its motion file.';

CREATE TABLE proxy_files (
    id              uuid PRIMARY KEY,
    asset_id        uuid NOT NULL REFERENCES media_assets (id) ON DELETE CASCADE,
    proxy_type      text NOT NULL,
    relative_path   text,
    inline_value    text,
    size_bytes      bigint NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT uq_proxy_files_asset_type UNIQUE (asset_id, proxy_type),
    CONSTRAINT ck_proxy_files_type CHECK (proxy_type IN ('thumbnail', 'preview', 'blurhash', 'poster', 'web_video')),
    CONSTRAINT ck_proxy_files_storage CHECK ((proxy_type = 'blurhash') = (inline_value IS NOT NULL) AND (relative_path IS NULL) = (inline_value IS NOT NULL))
);
CREATE INDEX ix_proxy_files_relative_path ON proxy_files (relative_path) WHERE relative_path IS NOT NULL;
COMMENT ON TABLE proxy_files IS 'Derived files of an asset, one per (asset, type). Files live under the proxy root in a folder derived from (config id, content hash) only, so a retry overwrites its own debris.';
COMMENT ON COLUMN proxy_files.relative_path IS 'Path of the file relative to the proxy root; NULL for a blurhash, which is inline.';
COMMENT ON COLUMN proxy_files.inline_value IS 'The BlurHash string; set only for proxy_type blurhash.';

CREATE TABLE refresh_tokens (
    id          uuid PRIMARY KEY,
    user_id     uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    token_hash  bytea NOT NULL,
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT uq_refresh_tokens_hash UNIQUE (token_hash)
);
CREATE INDEX ix_refresh_tokens_expires ON refresh_tokens (expires_at);
CREATE INDEX ix_refresh_tokens_revoked ON refresh_tokens (revoked_at) WHERE revoked_at IS NOT NULL;
COMMENT ON TABLE refresh_tokens IS 'The web backend''s refresh tokens; the Worker only deletes expired or revoked ones (token_cleanup).';
COMMENT ON COLUMN refresh_tokens.token_hash IS 'A hash of the token; the token itself is never stored.';

CREATE TABLE work_items (
    id                  uuid PRIMARY KEY,
    kind                text NOT NULL,
    storage_config_id   uuid REFERENCES storage_configs (id) ON DELETE CASCADE,
    status              text NOT NULL DEFAULT 'queued',
    payload             jsonb NOT NULL DEFAULT '{}'::jsonb,
    dedup_key           text,
    requested_at        timestamptz NOT NULL DEFAULT now(),
    run_after           timestamptz NOT NULL DEFAULT now(),
    attempt             integer NOT NULL DEFAULT 0,
    failures            integer NOT NULL DEFAULT 0,
    stalls              integer NOT NULL DEFAULT 0,
    max_attempts        integer NOT NULL DEFAULT 5,
    lease_expires_at    timestamptz,
    worker_id           text,
    started_at          timestamptz,
    heartbeat_at        timestamptz,
    finished_at         timestamptz,
    cancel_requested_at timestamptz,
    last_error          text,
    progress            jsonb,
    result              jsonb,
    CONSTRAINT ck_work_items_status CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    CONSTRAINT ck_work_items_kind CHECK (kind IN ('crawl', 'burst_detection', 'purge', 'proxy_deletion', 'proxy_sweep', 'token_cleanup', 'work_item_retention')),
    CONSTRAINT ck_work_items_kind_scope CHECK (
        (kind IN ('crawl', 'burst_detection', 'purge') AND storage_config_id IS NOT NULL)
        OR (kind IN ('proxy_sweep', 'token_cleanup', 'work_item_retention') AND storage_config_id IS NULL)
        OR kind = 'proxy_deletion'),
    CONSTRAINT ck_work_items_counters CHECK (attempt >= 0 AND failures >= 0 AND stalls >= 0 AND max_attempts >= 1),
    CONSTRAINT ck_work_items_running_lease CHECK (status <> 'running' OR (lease_expires_at IS NOT NULL AND worker_id IS NOT NULL AND attempt >= 1)),
    CONSTRAINT ck_work_items_finished CHECK ((status IN ('succeeded', 'failed', 'cancelled')) = (finished_at IS NOT NULL)),
    CONSTRAINT ck_work_items_dedup_key_not_blank CHECK (dedup_key IS NULL OR length(dedup_key) > 0)
);
-- Rule 2 (ADR 0008): at most one running item per storage config, across all Workers. The store recognises a
-- violation of this index by its name and answers "nothing claimed".
CREATE UNIQUE INDEX ix_work_items_running_config ON work_items (storage_config_id)
    WHERE status = 'running' AND storage_config_id IS NOT NULL;
-- Rule 4: one queued item per dedup key; enqueue of a queued key returns the existing item.
CREATE UNIQUE INDEX ix_work_items_dedup_key_queued ON work_items (dedup_key) WHERE status = 'queued';
-- The claim reads the queue per config (oldest first) and the unscoped queue, so a busy config's backlog is
-- never scanned (ADR 0008, "claim cost").
CREATE INDEX ix_work_items_queued_config ON work_items (storage_config_id, requested_at, id)
    WHERE status = 'queued' AND storage_config_id IS NOT NULL;
CREATE INDEX ix_work_items_queued_unscoped ON work_items (requested_at, id)
    WHERE status = 'queued' AND storage_config_id IS NULL;
CREATE INDEX ix_work_items_running_lease ON work_items (lease_expires_at) WHERE status = 'running';
CREATE INDEX ix_work_items_finished ON work_items (finished_at) WHERE status IN ('succeeded', 'failed', 'cancelled');
CREATE INDEX ix_work_items_config_status ON work_items (storage_config_id, status);

COMMENT ON TABLE work_items IS 'The durable work queue (ADR 0008). One row per unit of background work; at most one running row per storage config.';
COMMENT ON COLUMN work_items.kind IS 'What the item does: crawl, burst_detection, purge, proxy_deletion, proxy_sweep, token_cleanup, work_item_retention.';
COMMENT ON COLUMN work_items.storage_config_id IS 'The scope: the storage config the item works on, or NULL for unscoped work, which is not serialised.';
COMMENT ON COLUMN work_items.payload IS 'Kind-specific input (e.g. asset ids for proxy_deletion).';
COMMENT ON COLUMN work_items.dedup_key IS 'Enqueueing a key that is already queued returns the queued item instead of a new one.';
COMMENT ON COLUMN work_items.requested_at IS 'Claim order (oldest first). Kept on retry, release and recovery, so requeued work goes first.';
COMMENT ON COLUMN work_items.run_after IS 'Not claimed before this instant (retry backoff, scheduled work).';
COMMENT ON COLUMN work_items.attempt IS 'The fencing token: +1 at every claim. Every write by an attempt matches (id, attempt, status running).';
COMMENT ON COLUMN work_items.failures IS 'Handler errors so far, counted against max_attempts.';
COMMENT ON COLUMN work_items.stalls IS 'Lease expiries so far; the item fails as stalled when it reaches the Worker''s max_stalls.';
COMMENT ON COLUMN work_items.max_attempts IS 'Retry budget: a retryable failure is requeued while failures < max_attempts.';
COMMENT ON COLUMN work_items.lease_expires_at IS 'Database-clock instant after which a running item is recovered by any Worker; renewed by heartbeats.';
COMMENT ON COLUMN work_items.worker_id IS 'The Worker that holds (or last held) the item.';
COMMENT ON COLUMN work_items.heartbeat_at IS 'Database-clock instant of the last successful heartbeat of the current attempt.';
COMMENT ON COLUMN work_items.cancel_requested_at IS 'Set when a running item is asked to cancel; its Worker sees it at the next heartbeat.';
COMMENT ON COLUMN work_items.last_error IS 'The last handler error, or why the item stalled.';
COMMENT ON COLUMN work_items.progress IS 'Handler progress, written by heartbeats (e.g. files found, done, skipped, failed, bytes).';
COMMENT ON COLUMN work_items.result IS 'The handler''s summary on success (e.g. the files a crawl skipped, with reasons).';

-- Wake idle Workers at once when work is enqueued (LISTEN almanac_work_items); polling stays the fallback.
CREATE FUNCTION notify_work_items_queued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('almanac_work_items', '');
    RETURN NULL;
END;
$$;
COMMENT ON FUNCTION notify_work_items_queued() IS 'Statement trigger: NOTIFY almanac_work_items after work is enqueued.';
CREATE TRIGGER tr_work_items_notify_queued AFTER INSERT ON work_items
    FOR EACH STATEMENT EXECUTE FUNCTION notify_work_items_queued();
