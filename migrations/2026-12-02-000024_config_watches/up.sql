-- Watching libraries (ADR 0014, issue #27 items 1 and 5): how the operator chose to watch each config's root, and
-- which Worker holds its watch now (one at a time, by a lease on the database clock, like a work item's), with
-- what that watcher last reported for `status`, `/metrics` and the page. The CHECK lists are the domain's
-- `WatchChoice::ALL` and `WatchMode::ALL` (a contract test holds them together).
ALTER TABLE storage_configs ADD COLUMN watch text NOT NULL DEFAULT 'auto'
    CONSTRAINT ck_storage_configs_watch CHECK (watch IN ('auto', 'events', 'polling', 'off'));
COMMENT ON COLUMN storage_configs.watch IS 'How the operator chose to watch the root (almanac-worker config watch): auto (events, or polling on a network file system), events, polling or off.';

CREATE TABLE config_watches (
    storage_config_id uuid PRIMARY KEY REFERENCES storage_configs (id) ON DELETE CASCADE,
    worker_id         text NOT NULL,
    since             timestamptz NOT NULL,
    lease_expires_at  timestamptz NOT NULL,
    mode              text NOT NULL CONSTRAINT ck_config_watches_mode CHECK (mode IN ('events', 'polling', 'off')),
    last_change_at    timestamptz,
    pending_files     bigint NOT NULL DEFAULT 0 CONSTRAINT ck_config_watches_pending_files CHECK (pending_files >= 0),
    note              text
);
COMMENT ON TABLE config_watches IS 'The Worker watching each config''s root (one at a time: whoever holds the lease, taken again once it expires by the database clock) and its last report. A row whose lease expired is no holder.';
COMMENT ON COLUMN config_watches.since IS 'When this Worker took the watch (database clock); unchanged by renewals.';
COMMENT ON COLUMN config_watches.lease_expires_at IS 'When another Worker may take the watch unless this one renews it (database clock).';
COMMENT ON COLUMN config_watches.last_change_at IS 'When the watcher last saw a change, by the Worker''s clock: shown, never compared.';
COMMENT ON COLUMN config_watches.pending_files IS 'Files seen changing and not yet handed to a crawl.';
COMMENT ON COLUMN config_watches.note IS 'Why the mode is not the one chosen (an overflow, the watch limit, an unreadable root), if it is not.';
