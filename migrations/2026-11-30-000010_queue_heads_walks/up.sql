-- A head's refresh reads a few rows of its config's queue, however long that queue (ADR 0008, amendment
-- "heads"). Since migration 000008 left out paused kinds, its min() over a config's queued items could no longer
-- be read off the index's first entry: with fresh statistics the planner read the config's whole queue, three
-- times, on every claim and completion (0.65 ms a refresh behind 300 items, and a busy config's backlog of 49,000
-- on each of its changes). Each value is now the first entry of an ordered walk that passes over paused kinds. A
-- head whose values did not change is not written again: every write of a head is a new row version in each of
-- its indexes, which the claim's walk of the heads then reads.
--
-- Everything a head is computed from is read after its lock, each in a statement of its own (a new snapshot
-- under READ COMMITTED), the paused kinds included: a pause or resume of a kind refreshes every head under
-- those locks, so a refresh that waited for one sees what it committed. Read before the lock, a completion
-- that waited on a resume left its config's queued work of the resumed kind unclaimable for good.
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
