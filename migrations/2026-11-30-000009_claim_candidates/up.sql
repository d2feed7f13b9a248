-- The claim's candidates (ADR 0008, amendment "batches"): the oldest due unscoped items and, for the 32 oldest
-- claimable heads, each config's oldest due item; `served_user` NULL for a Worker serving every config.
--
-- In a function of their own so that they are always planned the one way that reads a few rows: each
-- candidate found by walking a queued index in order and stopping at the first match. Left to the planner,
-- statistics that mislead (taken while one config held nearly every queued item, or while the filters on
-- kind matched little) made it read a whole index or table and sort it instead: 100 ms a claim behind a
-- backlog of 50,000, and a drain that fell from 4,000 to 900 items/s once autovacuum had analysed the table.
-- The settings hold inside this function only (not for the claim's triggers), and JIT is off with them: the
-- plans they rule out are priced at 10^10, which would otherwise send the queries through JIT compilation.
CREATE FUNCTION almanac_claim_candidates(kinds text[], served_user uuid) RETURNS uuid[]
    LANGUAGE plpgsql STABLE
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    SET enable_sort = off
    SET jit = off
AS $$
BEGIN
    IF served_user IS NULL THEN
        RETURN ARRAY(
            (SELECT u.id
               FROM work_items AS u
              WHERE u.status = 'queued' AND u.storage_config_id IS NULL
                AND u.run_after <= now() AND u.kind = ANY (kinds)
                AND u.kind <> ALL (ARRAY(SELECT p.kind FROM paused_kinds AS p))
              ORDER BY u.requested_at, u.id
              LIMIT 64)
            UNION ALL
            SELECT n.id
              FROM (SELECT h.storage_config_id
                      FROM queue_heads AS h
                     WHERE h.claimable AND h.earliest_run_after <= now()
                     ORDER BY h.oldest_requested_at, h.storage_config_id
                     LIMIT 32) AS c
             CROSS JOIN LATERAL (
                   SELECT x.id
                     FROM work_items AS x
                    WHERE x.storage_config_id = c.storage_config_id AND x.status = 'queued'
                      AND x.run_after <= now() AND x.kind = ANY (kinds)
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
            AND u.run_after <= now() AND u.kind = ANY (kinds)
            AND u.kind <> ALL (ARRAY(SELECT p.kind FROM paused_kinds AS p))
          ORDER BY u.requested_at, u.id
          LIMIT 64)
        UNION ALL
        SELECT n.id
          FROM (SELECT h.storage_config_id
                  FROM queue_heads AS h
                 WHERE h.claimable AND h.earliest_run_after <= now() AND h.user_id = served_user
                 ORDER BY h.oldest_requested_at, h.storage_config_id
                 LIMIT 32) AS c
         CROSS JOIN LATERAL (
               SELECT x.id
                 FROM work_items AS x
                WHERE x.storage_config_id = c.storage_config_id AND x.status = 'queued'
                  AND x.run_after <= now() AND x.kind = ANY (kinds)
                  AND x.kind <> ALL (ARRAY(SELECT p.kind FROM paused_kinds AS p))
                ORDER BY x.requested_at, x.id
                LIMIT 1) AS n
         WHERE NOT EXISTS (SELECT 1 FROM work_items AS r
                            WHERE r.storage_config_id = c.storage_config_id AND r.status = 'running'));
END $$;

-- The same for the refresh of a config's head (every claim, completion and enqueue runs it): its reads are
-- walks of the same indexes in order; misleading statistics made it read the whole table instead.
ALTER FUNCTION almanac_refresh_queue_heads(uuid[])
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    SET enable_sort = off
    SET jit = off;
