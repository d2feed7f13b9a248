DROP FUNCTION IF EXISTS almanac_claim_candidates(text[], uuid);
ALTER FUNCTION almanac_refresh_queue_heads(uuid[]) RESET ALL;
