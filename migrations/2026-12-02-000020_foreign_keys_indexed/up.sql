-- Every foreign key has an index that leads with its columns (issue #26 item 4, one large household). Without
-- one, each row deleted on the referenced side makes PostgreSQL scan the referencing table whole to cascade or
-- set null: a purge batch of 100 assets in a library of 100,000 took 3.2 s instead of 6 ms (two scans of
-- media_assets and bursts per asset), so purging or removing a library of a million files would take days.
-- A contract test (schema_contract.rs) keeps it so for foreign keys added later.
CREATE INDEX ix_media_assets_paired ON media_assets (paired_asset_id) WHERE paired_asset_id IS NOT NULL;
CREATE INDEX ix_bursts_primary_asset ON bursts (primary_asset_id);
CREATE INDEX ix_refresh_tokens_user ON refresh_tokens (user_id);
