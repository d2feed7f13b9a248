-- Set when some of an asset's proxies are deleted (proxy_deletion), so the next crawl makes them again instead
-- of skipping the unchanged file; cleared when they are made. A flag, so the crawl's load of known files stays a
-- plain read of media_assets.
ALTER TABLE media_assets ADD COLUMN proxies_missing boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN media_assets.proxies_missing IS 'Some proxies were deleted on purpose; the next crawl makes them again and clears this.';
