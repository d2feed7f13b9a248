ALTER TABLE storage_configs DROP CONSTRAINT IF EXISTS ck_storage_configs_root_path_canonical;
ALTER TABLE storage_configs DROP COLUMN IF EXISTS root_is_mount_point;
