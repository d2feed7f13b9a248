-- The offset is the camera's own when it wrote one, and otherwise, for a time read as an instant (a phone's video
-- in UTC, a file's mtime), the household zone's at that instant (migrations 000040, and the crawl since).
COMMENT ON COLUMN media_assets.captured_offset_minutes IS
    'UTC offset of the local time at capture, when known: the camera''s own, or the household zone''s at that instant for a time read as an instant (a phone''s video in UTC, a file''s mtime); capture_month/day use the local date it gives.';
