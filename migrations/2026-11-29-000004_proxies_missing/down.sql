ALTER TABLE media_assets DROP COLUMN IF EXISTS proxies_missing;
