DROP TABLE IF EXISTS asset_extra_paths;
