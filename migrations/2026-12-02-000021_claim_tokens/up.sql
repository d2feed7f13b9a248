-- A fence names its claim (issue #26, left over from the failover work; ADR 0008, amendment "a fence names its
-- claim"). The attempt number alone does not: with asynchronous replication a failover can lose a claim that
-- committed on the old primary, the item is queued again on the promoted standby, and its next claim gets the
-- same number. Every claim now sets a random token of its own, and every write of an attempt (heartbeats,
-- outcomes, the catalogue's fenced transactions) matches it besides the id, the number and `running`.
--
-- Items running when this runs have no token, so no fence of an upgraded Worker matches them. A Worker older
-- than this migration, though, does not look at the token: its writes are fenced as before, by (id, attempt,
-- running), and land as before until that Worker is stopped and upgraded (a running attempt of it goes on and
-- may finish its item), including in the one case the token closes, a claim lost in a failover whose number the
-- next claim shares. The token protects once every Worker checks it: stop the Workers before migrating and start
-- upgraded ones, as docs/operations.md says (ADR 0008, "a fence names its claim", rule 4).
ALTER TABLE work_items ADD COLUMN claim_token uuid;

COMMENT ON COLUMN work_items.claim_token IS 'The claim''s own token: a random value set by every claim (gen_random_uuid()), part of the fence with id and attempt. NULL until the first claim and whenever the item is queued again; a finished item keeps the token of the claim it last ran under (how a completion written again tells its own commit).';
COMMENT ON COLUMN work_items.attempt IS 'The claim number: +1 at every claim. Every write by an attempt matches (id, attempt, claim_token, status running); the number alone is not unique (a claim lost in a failover shares it with the next).';
