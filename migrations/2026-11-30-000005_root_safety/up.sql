-- File-system safety (ADR 0009): a root's identity, so a share that is no longer mounted is recognised, and
-- canonical roots, so two configs can never cover one tree.
ALTER TABLE storage_configs ADD COLUMN root_is_mount_point boolean;
COMMENT ON COLUMN storage_configs.root_is_mount_point IS 'Whether the root was a mount point (its device differs from its parent''s) when registered or last crawled in full; a crawl refuses when a root that was one no longer is (the share is not mounted). NULL until known.';

-- New roots are canonical: absolute, no trailing slash, no empty, "." or ".." component, never "/" itself.
-- NOT VALID: an older catalogue keeps its rows; `almanac-worker status` reports the roots that overlap.
ALTER TABLE storage_configs ADD CONSTRAINT ck_storage_configs_root_path_canonical
    CHECK (root_path <> '/' AND right(root_path, 1) <> '/' AND strpos(root_path, '//') = 0
           AND strpos(root_path || '/', '/./') = 0 AND strpos(root_path || '/', '/../') = 0) NOT VALID;
