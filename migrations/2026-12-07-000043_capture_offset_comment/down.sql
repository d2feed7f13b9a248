COMMENT ON COLUMN media_assets.captured_offset_minutes IS
    'UTC offset of the camera at capture, when known; capture_month/day use the local date it gives.';
