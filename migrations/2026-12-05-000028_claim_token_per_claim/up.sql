-- A claim's token is drawn by the store, one per claim, and bound to the claim statement (it was drawn per row with
-- `gen_random_uuid()`): a claim whose caller gave up before its answer is then handed back by its token (issue #26,
-- ADR 0008 amendment "a claim given up on is handed back"). Only the column's comment changes.
COMMENT ON COLUMN work_items.claim_token IS 'The claim''s own token: a random value drawn by the store for each claim (the same for the items of one claim), part of the fence with id and attempt. A claim given up on before its answer is handed back by it. NULL until the first claim and whenever the item is queued again; a finished item keeps the token of the claim it last ran under (how a completion written again tells its own commit).';
