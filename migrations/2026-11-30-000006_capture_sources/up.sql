-- The right date for every photo (docs/media.md): capture times also come from embedded XMP, XMP sidecars and
-- file names, and an asset remembers the sidecar its date was read with, so a sidecar that changes changes the
-- date at the next crawl.
ALTER TABLE media_assets DROP CONSTRAINT ck_media_assets_captured_at_source;
ALTER TABLE media_assets ADD CONSTRAINT ck_media_assets_captured_at_source
    CHECK (captured_at_source IN ('exif_original', 'exif_digitized', 'xmp_embedded', 'xmp_sidecar', 'container',
                                  'file_name', 'exif_modified', 'file_mtime'));
COMMENT ON COLUMN media_assets.captured_at_source IS 'Which source gave captured_at, best first: exif_original, exif_digitized, xmp_embedded, xmp_sidecar, container, file_name, exif_modified, file_mtime.';

ALTER TABLE media_assets ADD COLUMN sidecar_path bytea;
ALTER TABLE media_assets ADD COLUMN sidecar_size bigint;
ALTER TABLE media_assets ADD COLUMN sidecar_modified_at timestamptz;
ALTER TABLE media_assets ADD CONSTRAINT ck_media_assets_sidecar
    CHECK ((sidecar_path IS NULL) = (sidecar_size IS NULL) AND (sidecar_path IS NULL) = (sidecar_modified_at IS NULL));
COMMENT ON COLUMN media_assets.sidecar_path IS 'The XMP sidecar (relative to the root, exact bytes) present when the capture time was last read; with its size and mtime, a crawl sees a sidecar that appeared, changed or vanished and reads the date again. NULL when there was none.';
