CREATE OR REPLACE FUNCTION almanac_refresh_queue_heads(configs uuid[]) RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
AS $$
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
