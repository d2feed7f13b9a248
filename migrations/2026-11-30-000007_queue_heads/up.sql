-- The claim reads the few oldest configs that can be claimed for, from a small table kept in the same
-- transactions that change work_items (ADR 0008, "claim cost"), instead of probing every active config: its cost
-- no longer grows with the number of configs or with any config's backlog.

-- A config's items in claim order, whatever their status: the claim's walk of a config's queue reads it in
-- order, and no index on the config alone remains that a planner without statistics could prefer and then
-- sort (it replaces ix_work_items_config_status, which also served the storage_configs foreign key).
CREATE INDEX ix_work_items_config_order ON work_items (storage_config_id, status, requested_at, id);
DROP INDEX ix_work_items_config_status;

-- min(run_after) of a config's queued items, read when its head is refreshed. Its predicate has a clause only
-- the refresh states (`attempt >= 0`, always true by ck_work_items_counters), so no other query can use it:
-- the claim, given this index for a config's queue, would read the whole queue and sort it.
CREATE INDEX ix_work_items_queued_config_due ON work_items (storage_config_id, run_after)
    WHERE status = 'queued' AND storage_config_id IS NOT NULL AND attempt >= 0;

CREATE TABLE queue_heads (
    storage_config_id   uuid PRIMARY KEY REFERENCES storage_configs (id) ON DELETE CASCADE,
    user_id             uuid NOT NULL,
    active              boolean NOT NULL,
    claimable           boolean NOT NULL DEFAULT false,
    oldest_requested_at timestamptz,
    earliest_run_after  timestamptz
);
CREATE INDEX ix_queue_heads_claimable ON queue_heads (oldest_requested_at, storage_config_id) WHERE claimable;
CREATE INDEX ix_queue_heads_claimable_user ON queue_heads (user_id, oldest_requested_at, storage_config_id)
    WHERE claimable;
COMMENT ON TABLE queue_heads IS 'One row per storage config that ever had work: whether it can be claimed for now (active, queued work, nothing running) and its oldest queued item. Kept by triggers on work_items and storage_configs; the claim reads only its oldest claimable rows.';
COMMENT ON COLUMN queue_heads.active IS 'storage_configs.is_active, copied by its trigger (so that keeping a head never reads storage_configs).';
COMMENT ON COLUMN queue_heads.claimable IS 'Active, with queued work, and no running item (as of the last change to its queue).';
COMMENT ON COLUMN queue_heads.oldest_requested_at IS 'requested_at of the config''s oldest queued item: the claim''s order between configs.';
COMMENT ON COLUMN queue_heads.earliest_run_after IS 'The earliest run_after of its queued items: not claimed for before then.';

-- Recomputes the heads of `configs` (distinct, sorted, so that transactions lock them in one order). Each
-- config's row is locked first, waiting for any other transaction changing that queue; the update that follows
-- then reads what that one committed (READ COMMITTED: every statement here takes a new snapshot), so whichever
-- transaction refreshes last leaves the head right. Only work_items and queue_heads are read.
CREATE FUNCTION almanac_refresh_queue_heads(configs uuid[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    c uuid;
BEGIN
    FOREACH c IN ARRAY configs LOOP
        PERFORM 1 FROM queue_heads AS h WHERE h.storage_config_id = c FOR UPDATE;
        UPDATE queue_heads AS h
           SET oldest_requested_at = q.oldest,
               earliest_run_after = q.earliest,
               claimable = q.oldest IS NOT NULL AND h.active AND NOT q.running
          FROM (SELECT (SELECT min(w.requested_at) FROM work_items AS w
                         WHERE w.storage_config_id = c AND w.status = 'queued') AS oldest,
                       (SELECT min(w.run_after) FROM work_items AS w
                         WHERE w.storage_config_id = c AND w.status = 'queued' AND w.attempt >= 0) AS earliest,
                       EXISTS (SELECT 1 FROM work_items AS w
                                WHERE w.storage_config_id = c AND w.status = 'running') AS running) AS q
         WHERE h.storage_config_id = c;
    END LOOP;
END $$;

CREATE FUNCTION almanac_queue_heads_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM almanac_refresh_queue_heads(ARRAY(
        SELECT DISTINCT n.storage_config_id FROM new_rows AS n
         WHERE n.storage_config_id IS NOT NULL AND n.status IN ('queued', 'running')
         ORDER BY 1));
    RETURN NULL;
END $$;

-- Heartbeats and progress change none of the columns compared here: they refresh nothing.
CREATE FUNCTION almanac_queue_heads_updated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM almanac_refresh_queue_heads(ARRAY(
        SELECT DISTINCT x.config FROM (
            SELECT o.storage_config_id AS config, n.storage_config_id AS moved_to
              FROM old_rows AS o JOIN new_rows AS n ON n.id = o.id
             WHERE (o.status, o.run_after, o.requested_at, o.storage_config_id)
                   IS DISTINCT FROM (n.status, n.run_after, n.requested_at, n.storage_config_id)
               AND (o.status IN ('queued', 'running') OR n.status IN ('queued', 'running'))) AS changed
         CROSS JOIN LATERAL (VALUES (changed.config), (changed.moved_to)) AS x (config)
         WHERE x.config IS NOT NULL
         ORDER BY 1));
    RETURN NULL;
END $$;

CREATE FUNCTION almanac_queue_heads_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM almanac_refresh_queue_heads(ARRAY(
        SELECT DISTINCT o.storage_config_id FROM old_rows AS o
         WHERE o.storage_config_id IS NOT NULL AND o.status IN ('queued', 'running')
         ORDER BY 1));
    RETURN NULL;
END $$;

CREATE FUNCTION almanac_queue_heads_config_added() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queue_heads (storage_config_id, user_id, active) VALUES (NEW.id, NEW.user_id, NEW.is_active)
    ON CONFLICT (storage_config_id) DO NOTHING;
    RETURN NULL;
END $$;

CREATE FUNCTION almanac_queue_heads_config_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE queue_heads SET active = NEW.is_active, user_id = NEW.user_id WHERE storage_config_id = NEW.id;
    PERFORM almanac_refresh_queue_heads(ARRAY[NEW.id]);
    RETURN NULL;
END $$;

CREATE TRIGGER tr_work_items_queue_heads_insert AFTER INSERT ON work_items
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION almanac_queue_heads_inserted();
CREATE TRIGGER tr_work_items_queue_heads_update AFTER UPDATE ON work_items
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION almanac_queue_heads_updated();
CREATE TRIGGER tr_work_items_queue_heads_delete AFTER DELETE ON work_items
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION almanac_queue_heads_deleted();
CREATE TRIGGER tr_storage_configs_queue_heads_insert AFTER INSERT ON storage_configs
    FOR EACH ROW EXECUTE FUNCTION almanac_queue_heads_config_added();
CREATE TRIGGER tr_storage_configs_queue_heads AFTER UPDATE OF is_active, user_id ON storage_configs
    FOR EACH ROW WHEN (OLD.is_active IS DISTINCT FROM NEW.is_active OR OLD.user_id IS DISTINCT FROM NEW.user_id)
    EXECUTE FUNCTION almanac_queue_heads_config_changed();

INSERT INTO queue_heads (storage_config_id, user_id, active) SELECT id, user_id, is_active FROM storage_configs;
SELECT almanac_refresh_queue_heads(ARRAY(SELECT id FROM storage_configs ORDER BY id));
