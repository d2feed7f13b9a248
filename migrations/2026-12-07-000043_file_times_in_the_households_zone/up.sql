-- A file dated by its mtime (nothing better: no EXIF, no sidecar, no date in its name) was put on the mtime's UTC
-- day: a scan made at 21:00 in New York went on the next day. The crawl now puts the mtime on its day in the
-- household's zone (the Worker's, `TZ`, else /etc/localtime), as migration 000040 did for phones' videos. Each such
-- asset whose date is still its file's time is read again once (`date_outdated`). One whose date came from an
-- earlier file (it moved or was restored, and kept its date: the new file's time is not the day it was taken) is
-- left as it is: reading it again would date it by the new file's time.
UPDATE media_assets SET date_outdated = true
 WHERE captured_at_source = 'file_mtime' AND captured_offset_minutes IS NULL AND NOT is_soft_deleted
   AND captured_at = file_modified_at;
