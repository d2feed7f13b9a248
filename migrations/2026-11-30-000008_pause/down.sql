DROP TRIGGER IF EXISTS tr_paused_kinds_queue_heads ON paused_kinds;
DROP FUNCTION IF EXISTS almanac_queue_heads_kind_changed();
DROP TRIGGER IF EXISTS tr_storage_configs_queue_heads ON storage_configs;
CREATE TRIGGER tr_storage_configs_queue_heads AFTER UPDATE OF is_active, user_id ON storage_configs
    FOR EACH ROW WHEN (OLD.is_active IS DISTINCT FROM NEW.is_active OR OLD.user_id IS DISTINCT FROM NEW.user_id)
    EXECUTE FUNCTION almanac_queue_heads_config_changed();
CREATE OR REPLACE FUNCTION almanac_queue_heads_config_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE queue_heads SET active = NEW.is_active, user_id = NEW.user_id WHERE storage_config_id = NEW.id;
    PERFORM almanac_refresh_queue_heads(ARRAY[NEW.id]);
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION almanac_refresh_queue_heads(configs uuid[]) RETURNS void
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
ALTER TABLE queue_heads DROP COLUMN IF EXISTS paused;
DROP TABLE IF EXISTS paused_kinds;
ALTER TABLE storage_configs DROP COLUMN IF EXISTS paused_at;
