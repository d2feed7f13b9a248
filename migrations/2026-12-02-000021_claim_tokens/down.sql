-- Back to fences of (id, attempt) alone.
COMMENT ON COLUMN work_items.attempt IS 'The fencing token: +1 at every claim. Every write by an attempt matches (id, attempt, status running).';
ALTER TABLE work_items DROP COLUMN claim_token;
