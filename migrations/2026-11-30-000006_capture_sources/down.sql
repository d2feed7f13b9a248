ALTER TABLE media_assets DROP CONSTRAINT IF EXISTS ck_media_assets_sidecar;
ALTER TABLE media_assets DROP COLUMN IF EXISTS sidecar_modified_at;
ALTER TABLE media_assets DROP COLUMN IF EXISTS sidecar_size;
ALTER TABLE media_assets DROP COLUMN IF EXISTS sidecar_path;
UPDATE media_assets SET captured_at_source = 'file_mtime'
    WHERE captured_at_source IN ('xmp_embedded', 'xmp_sidecar', 'file_name');
ALTER TABLE media_assets DROP CONSTRAINT ck_media_assets_captured_at_source;
ALTER TABLE media_assets ADD CONSTRAINT ck_media_assets_captured_at_source
    CHECK (captured_at_source IN ('exif_original', 'exif_digitized', 'exif_modified', 'container', 'file_mtime'));
