-- A phone's video dated by its UTC `creation_time` alone (no offset in its container, none in its name) was put on
-- the UTC day: a Pixel names its videos by the UTC time (`PXL_20231225_011500123.mp4`), so a video taken at 20:15
-- on Christmas Eve in New York was on 25 December. The crawl now puts such a video, known as a phone's by the
-- Android or Apple keys of its container, on its day in the household's zone (the Worker's, `TZ`, else
-- /etc/localtime). Every video dated by its container without an offset is read again once (`date_outdated`, as
-- migration 000038 did): the phones' among them get their day; a camera's that writes its local clock as UTC
-- (GoPro, DJI) reads the same. An AVI's or an AVCHD camcorder's date (a local time read from the file) is left.
UPDATE media_assets SET date_outdated = true
 WHERE media_type = 'video' AND captured_at_source = 'container' AND captured_offset_minutes IS NULL
   AND NOT is_soft_deleted AND lower(display_path) !~ '\.(avi|mts|m2ts)$';
