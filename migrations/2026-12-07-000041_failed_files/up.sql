-- The files a crawl found damaged, or not what their name says, or over the pixel limit: remembered, so that a
-- later crawl does not read them again while each is the same file (its size, mtime, inode and the inode's change
-- time, which any write or rename sets and nothing sets back) read by the same rules (the
-- Worker's version and the settings that decide a file's fate, `read_by`). A watcher crawls a folder at each change
-- in it; a phone syncing into a folder all day made every one of those crawls hash and decode its damaged files
-- again (a damaged video of gigabytes read whole each time). The crawl still reports each of them as failed, with
-- its reason. A failure is forgotten when its file is read well, gone, or read again by other rules.
CREATE TABLE failed_files (
    storage_config_id uuid NOT NULL REFERENCES storage_configs (id) ON DELETE CASCADE,
    file_path bytea NOT NULL,
    size bigint NOT NULL CHECK (size >= 0),
    modified_at almanac_time NOT NULL,
    inode bigint NOT NULL,
    inode_changed_at almanac_time NOT NULL,
    reason text NOT NULL,
    read_by text NOT NULL,
    failed_at almanac_time NOT NULL DEFAULT now(),
    PRIMARY KEY (storage_config_id, file_path)
);
COMMENT ON TABLE failed_files IS 'Files a crawl failed for their content, not read again while unchanged and read by the same rules (read_by). Migration 000041.';
