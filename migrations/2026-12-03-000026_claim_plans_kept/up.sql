-- The claim at 10,000 configs (issue #26 item 5, ADR 0008 amendment "plans kept"). A PL/pgSQL statement with
-- parameters (the kinds, the served user, the clock read as `due`, the configs of a refresh) is planned anew
-- for its first five executions on a connection, and after that whenever PostgreSQL prices its generic plan
-- above the custom ones it made. The candidates' function was still planning anew on a Worker's long-lived
-- connections: a claim of eight spent 1.3 ms in it, and 0.7 to 0.9 ms with one plan kept (claim benchmark,
-- warm connections, the two in the same run).
--
-- Each function now keeps one generic plan per statement on a connection. Their planner settings already leave
-- only ordered index walks, so a generic plan walks the same indexes in the same order as a custom one did; the
-- tests that read what a claim and a completion read of `work_items` on a never-analysed
-- queue, on stale statistics and on fresh ones (under 2,000 rows each, the tables holding up to 130,000) now
-- run these generic plans from the first call.
ALTER FUNCTION almanac_claim_candidates(text[], uuid) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION almanac_refresh_queue_heads(uuid[]) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION almanac_mark_queue_heads_running(uuid[]) SET plan_cache_mode = force_generic_plan;
