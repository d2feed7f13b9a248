-- The folders beneath a config's root that were mount points at its last crawl of the whole root: another disk or
-- share mounted inside the library. One that is no longer a mount point (its disk not mounted leaves an empty
-- folder behind) is not walked, and nothing under it is soft-deleted (ADR 0009, amendment "a disk not mounted
-- beneath the root").
ALTER TABLE storage_configs ADD COLUMN mounts_below bytea[] NOT NULL DEFAULT '{}';
COMMENT ON COLUMN storage_configs.mounts_below IS 'Folders beneath the root (paths relative to it, as the file system gave their bytes) that were mount points at the last crawl of the whole root: one that is not a mount point now is not walked, and what the catalogue has under it is kept, unless the crawl is confirmed with root_moved.';
