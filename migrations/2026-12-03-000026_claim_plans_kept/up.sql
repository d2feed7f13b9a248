-- The claim at 10,000 configs (issue #26 item 5, ADR 0008 amendment "plans kept"). A PL/pgSQL statement with
-- parameters (the kinds, the served user, the clock read as `due`, the configs of a refresh) is planned anew
-- for its first five executions on a connection, and after that whenever PostgreSQL prices its generic plan
-- above the custom ones it made. The candidates' function was still planning anew on a Worker's long-lived
-- connections: a claim of eight spent 1.3 ms in it, and 0.7 to 0.9 ms with one plan kept (claim benchmark,
-- warm connections, the two in the same run).
--
-- The candidates for every config, the heads' refresh and their mark now keep one generic plan per statement on
-- a connection. Their planner settings leave only ordered index walks, and each has one index that gives its
-- order, so a generic plan walks the same index as a custom one; the tests that read what a claim and a
-- completion read of `work_items` on a never-analysed queue, on stale statistics and on fresh ones (under 2,000
-- rows each, the tables holding up to 130,000) run these generic plans from the first call.
--
-- The candidates of one user's configs do not: two indexes give their order (the claimable heads by age, whose
-- rows are then filtered by user, and the claimable heads by user and age), and a generic plan, which cannot see
-- which user is asked for, priced them from statistics that may say every head is another user's (taken before
-- the user had any config): it walked every claimable head of the other users, 2,009 rows instead of a few
-- (`a_claim_for_a_user_the_statistics_never_saw_reads_only_that_users_heads`). They move to a function of their
-- own that plans anew on every call, with the user's id in view.

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

CREATE OR REPLACE FUNCTION almanac_claim_candidates(kinds text[], served_user uuid) RETURNS uuid[]
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

ALTER FUNCTION almanac_refresh_queue_heads(uuid[]) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION almanac_mark_queue_heads_running(uuid[]) SET plan_cache_mode = force_generic_plan;
