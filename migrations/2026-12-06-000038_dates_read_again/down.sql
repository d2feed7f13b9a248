ALTER TABLE media_assets DROP COLUMN date_outdated;
