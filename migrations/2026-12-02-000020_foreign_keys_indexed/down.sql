DROP INDEX ix_refresh_tokens_user;
DROP INDEX ix_bursts_primary_asset;
DROP INDEX ix_media_assets_paired;
