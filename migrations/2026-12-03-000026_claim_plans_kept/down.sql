-- Back to migration 000013's candidates (one function for both, plans as the session chooses).
CREATE OR REPLACE FUNCTION almanac_claim_candidates(kinds text[], served_user uuid) RETURNS uuid[]
    LANGUAGE plpgsql STABLE
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    SET enable_sort = off
    SET jit = off
AS $$
DECLARE
    due timestamptz := clock_timestamp();
BEGIN
    IF served_user IS NULL THEN
        RETURN ARRAY(
            (SELECT u.id
               FROM work_items AS u
              WHERE u.status = 'queued' AND u.storage_config_id IS NULL
                AND u.run_after <= due AND u.kind = ANY (kinds)
                AND u.kind <> ALL (ARRAY(SELECT p.kind FROM paused_kinds AS p))
              ORDER BY u.requested_at, u.id
              LIMIT 64)
            UNION ALL
            SELECT n.id
              FROM (SELECT h.storage_config_id
                      FROM queue_heads AS h
                     WHERE h.claimable AND h.earliest_run_after <= due
                     ORDER BY h.oldest_requested_at, h.storage_config_id
                     LIMIT 32) AS c
             CROSS JOIN LATERAL (
                   SELECT x.id
                     FROM work_items AS x
                    WHERE x.storage_config_id = c.storage_config_id AND x.status = 'queued'
                      AND x.run_after <= due AND x.kind = ANY (kinds)
                      AND x.kind <> ALL (ARRAY(SELECT p.kind FROM paused_kinds AS p))
                    ORDER BY x.requested_at, x.id
                    LIMIT 1) AS n
             WHERE NOT EXISTS (SELECT 1 FROM work_items AS r
                                WHERE r.storage_config_id = c.storage_config_id AND r.status = 'running'));
    END IF;
    RETURN ARRAY(
        (SELECT u.id
           FROM work_items AS u
          WHERE u.status = 'queued' AND u.storage_config_id IS NULL
            AND u.run_after <= due AND u.kind = ANY (kinds)
            AND u.kind <> ALL (ARRAY(SELECT p.kind FROM paused_kinds AS p))
          ORDER BY u.requested_at, u.id
          LIMIT 64)
        UNION ALL
        SELECT n.id
          FROM (SELECT h.storage_config_id
                  FROM queue_heads AS h
                 WHERE h.claimable AND h.earliest_run_after <= due AND h.user_id = served_user
                 ORDER BY h.oldest_requested_at, h.storage_config_id
                 LIMIT 32) AS c
         CROSS JOIN LATERAL (
               SELECT x.id
                 FROM work_items AS x
                WHERE x.storage_config_id = c.storage_config_id AND x.status = 'queued'
                  AND x.run_after <= due AND x.kind = ANY (kinds)
                  AND x.kind <> ALL (ARRAY(SELECT p.kind FROM paused_kinds AS p))
                ORDER BY x.requested_at, x.id
                LIMIT 1) AS n
         WHERE NOT EXISTS (SELECT 1 FROM work_items AS r
                            WHERE r.storage_config_id = c.storage_config_id AND r.status = 'running'));
END $$;

DROP FUNCTION almanac_claim_candidates_of_user(text[], uuid);
ALTER FUNCTION almanac_refresh_queue_heads(uuid[]) RESET plan_cache_mode;
ALTER FUNCTION almanac_mark_queue_heads_running(uuid[]) RESET plan_cache_mode;
