-- Pausing work (issue #14): a storage config, or a kind everywhere. Paused work stays queued and is not claimed;
-- what runs finishes. The claim reads only claimable heads (ADR 0008), so a head leaves out paused kinds and a
-- paused config is not claimable.

ALTER TABLE storage_configs ADD COLUMN paused_at timestamptz;
COMMENT ON COLUMN storage_configs.paused_at IS 'Set while the config is paused (almanac-worker pause --config): its queued work is not claimed.';

CREATE TABLE paused_kinds (
    kind      text PRIMARY KEY,
    paused_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ck_paused_kinds_kind CHECK (kind IN ('crawl', 'burst_detection', 'purge', 'proxy_deletion', 'proxy_sweep', 'token_cleanup', 'work_item_retention'))
);
COMMENT ON TABLE paused_kinds IS 'Kinds paused everywhere (almanac-worker pause --kind): their queued items are not claimed.';

ALTER TABLE queue_heads ADD COLUMN paused boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN queue_heads.paused IS 'storage_configs.paused_at IS NOT NULL, copied by its trigger.';

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
               claimable = q.oldest IS NOT NULL AND h.active AND NOT h.paused AND NOT q.running
          FROM (SELECT (SELECT min(w.requested_at) FROM work_items AS w
                         WHERE w.storage_config_id = c AND w.status = 'queued'
                           AND w.kind <> ALL (ARRAY(SELECT p.kind FROM paused_kinds AS p))) AS oldest,
                       (SELECT min(w.run_after) FROM work_items AS w
                         WHERE w.storage_config_id = c AND w.status = 'queued' AND w.attempt >= 0
                           AND w.kind <> ALL (ARRAY(SELECT p.kind FROM paused_kinds AS p))) AS earliest,
                       EXISTS (SELECT 1 FROM work_items AS w
                                WHERE w.storage_config_id = c AND w.status = 'running') AS running) AS q
         WHERE h.storage_config_id = c;
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION almanac_queue_heads_config_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE queue_heads
       SET active = NEW.is_active, user_id = NEW.user_id, paused = NEW.paused_at IS NOT NULL
     WHERE storage_config_id = NEW.id;
    PERFORM almanac_refresh_queue_heads(ARRAY[NEW.id]);
    RETURN NULL;
END $$;

DROP TRIGGER tr_storage_configs_queue_heads ON storage_configs;
CREATE TRIGGER tr_storage_configs_queue_heads AFTER UPDATE OF is_active, user_id, paused_at ON storage_configs
    FOR EACH ROW WHEN (OLD.is_active IS DISTINCT FROM NEW.is_active OR OLD.user_id IS DISTINCT FROM NEW.user_id
                       OR (OLD.paused_at IS NULL) <> (NEW.paused_at IS NULL))
    EXECUTE FUNCTION almanac_queue_heads_config_changed();

-- A kind paused or resumed: every head is computed again (not only those with queued work of it: an enqueue
-- of that kind, uncommitted meanwhile, holds its head, and refreshing it here waits for that enqueue and then
-- sees it). Rare, and as costly as the number of configs.
CREATE FUNCTION almanac_queue_heads_kind_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM almanac_refresh_queue_heads(ARRAY(SELECT h.storage_config_id FROM queue_heads AS h ORDER BY 1));
    RETURN NULL;
END $$;
CREATE TRIGGER tr_paused_kinds_queue_heads AFTER INSERT OR DELETE ON paused_kinds
    FOR EACH ROW EXECUTE FUNCTION almanac_queue_heads_kind_changed();
