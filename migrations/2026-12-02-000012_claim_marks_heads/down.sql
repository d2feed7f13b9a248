-- Back to migration 000010's refresh (one config at a time) and 000007's update trigger (every change refreshes).
CREATE OR REPLACE FUNCTION almanac_queue_heads_updated() RETURNS trigger
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

DROP FUNCTION almanac_mark_queue_heads_running(uuid[]);

CREATE OR REPLACE FUNCTION almanac_refresh_queue_heads(configs uuid[]) RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
AS $$
DECLARE
    c uuid;
    paused text[];
    oldest timestamptz;
    earliest timestamptz;
    running boolean;
BEGIN
    FOREACH c IN ARRAY configs LOOP
        PERFORM 1 FROM queue_heads AS h WHERE h.storage_config_id = c FOR UPDATE;
        paused := ARRAY(SELECT p.kind FROM paused_kinds AS p);
        oldest := (SELECT w.requested_at FROM work_items AS w
                    WHERE w.storage_config_id = c AND w.status = 'queued' AND w.kind <> ALL (paused)
                    ORDER BY w.requested_at, w.id
                    LIMIT 1);
        earliest := (SELECT w.run_after FROM work_items AS w
                      WHERE w.storage_config_id = c AND w.status = 'queued' AND w.attempt >= 0
                        AND w.kind <> ALL (paused)
                      ORDER BY w.run_after
                      LIMIT 1);
        running := EXISTS (SELECT 1 FROM work_items AS w WHERE w.storage_config_id = c AND w.status = 'running');
        UPDATE queue_heads AS h
           SET oldest_requested_at = oldest,
               earliest_run_after = earliest,
               claimable = oldest IS NOT NULL AND h.active AND NOT h.paused AND NOT running
         WHERE h.storage_config_id = c
           AND (h.oldest_requested_at, h.earliest_run_after, h.claimable)
               IS DISTINCT FROM (oldest, earliest, oldest IS NOT NULL AND h.active AND NOT h.paused AND NOT running);
    END LOOP;
END $$;
