DROP TABLE config_watches;
ALTER TABLE storage_configs DROP COLUMN watch;
