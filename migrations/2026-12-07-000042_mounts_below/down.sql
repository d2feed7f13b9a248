ALTER TABLE storage_configs DROP COLUMN mounts_below;
