-- A crawl that finds one content at several paths keeps one active asset and records the other paths here,
-- so nothing the user filed twice is silently dropped.
CREATE TABLE asset_extra_paths (
    storage_config_id   uuid NOT NULL REFERENCES storage_configs (id) ON DELETE CASCADE,
    file_path           bytea NOT NULL,
    asset_id            uuid NOT NULL REFERENCES media_assets (id) ON DELETE CASCADE,
    display_path        text NOT NULL,
    size_bytes          bigint NOT NULL,
    file_modified_at    timestamptz NOT NULL,
    last_seen_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (storage_config_id, file_path)
);
CREATE INDEX ix_asset_extra_paths_asset ON asset_extra_paths (asset_id);
COMMENT ON TABLE asset_extra_paths IS 'Further paths at which a crawl found the content of an active asset (copies). Removed when a crawl no longer finds them.';
COMMENT ON COLUMN asset_extra_paths.file_path IS 'Path relative to the config root, as the exact bytes the file system gave.';
