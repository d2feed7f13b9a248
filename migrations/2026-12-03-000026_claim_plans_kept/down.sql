ALTER FUNCTION almanac_claim_candidates(text[], uuid) RESET plan_cache_mode;
ALTER FUNCTION almanac_refresh_queue_heads(uuid[]) RESET plan_cache_mode;
ALTER FUNCTION almanac_mark_queue_heads_running(uuid[]) RESET plan_cache_mode;
