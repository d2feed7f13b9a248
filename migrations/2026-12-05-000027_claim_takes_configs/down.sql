-- Back to migration 000026's candidates: the 32 oldest claimable configs' items, read as of the claim's snapshot.
DROP FUNCTION almanac_claim_candidates(text[], uuid, integer);
DROP FUNCTION almanac_claim_take_configs_of_user(text[], uuid, integer);

CREATE FUNCTION almanac_claim_candidates_of_user(kinds text[], served_user uuid) RETURNS uuid[]
    LANGUAGE plpgsql STABLE
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    SET enable_sort = off
    SET jit = off
    SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    due timestamptz := clock_timestamp();
BEGIN
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

CREATE FUNCTION almanac_claim_candidates(kinds text[], served_user uuid) RETURNS uuid[]
    LANGUAGE plpgsql STABLE
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    SET enable_sort = off
    SET jit = off
    SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    due timestamptz := clock_timestamp();
BEGIN
    IF served_user IS NOT NULL THEN
        RETURN almanac_claim_candidates_of_user(kinds, served_user);
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
END $$;
