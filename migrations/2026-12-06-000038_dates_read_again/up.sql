-- An asset whose capture date was read with a rule since found wrong is read again at the next crawl that lists its
-- file (`date_outdated`; the crawl reads it as if its sidecar had changed: hashed, dated, its proxies kept).
--
-- The first use: an iPhone video's local time (`com.apple.quicktime.creationdate`) is written with an offset of no
-- colon (`2024-01-01T00:05:00+0100`), which RFC 3339 refuses; the crawl then took the video's UTC `creation_time`
-- with no offset, so the "on this day" index put it on the UTC day (a video at 00:05 on New Year's Day in Berlin on
-- 31 December, one at 20:15 on Christmas Eve in New York on 25 December). Every video dated by its container without
-- an offset is read again once: the iPhone's among them get their day, and so does another phone's whose file name
-- holds the local time it was taken (`20231224_201500.mp4` beside a UTC `creation_time`: the offset is the two
-- apart); the others read the same. An AVI's or an AVCHD camcorder's date (read from the file, a local time with no
-- offset) is left: read again, it would read the same.
ALTER TABLE media_assets ADD COLUMN date_outdated boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN media_assets.date_outdated IS 'The capture date was read with a rule since corrected: the next crawl that lists the file reads its date again (and clears this). Migration 000038.';
UPDATE media_assets SET date_outdated = true
 WHERE media_type = 'video' AND captured_at_source = 'container' AND captured_offset_minutes IS NULL
   AND NOT is_soft_deleted AND lower(display_path) !~ '\.(avi|mts|m2ts)$';
