-- A fence names its claim (issue #26, left over from the failover work; ADR 0008, amendment "a fence names its
-- claim"). The attempt number alone does not: with asynchronous replication a failover can lose a claim that
-- committed on the old primary, the item is queued again on the promoted standby, and its next claim gets the
-- same number. Every claim now sets a random token of its own, and every write of an attempt (heartbeats,
-- outcomes, the catalogue's fenced transactions) matches it besides the id, the number and `running`.
--
-- Items running when this runs have no token: no fence matches them, so an attempt from before the upgrade
-- writes nothing more and lease recovery requeues its item (stop the Workers before migrating, as
-- docs/operations.md says, and there are none).
ALTER TABLE work_items ADD COLUMN claim_token uuid;

COMMENT ON COLUMN work_items.claim_token IS 'The claim''s own token: a random value set by every claim (gen_random_uuid()), part of the fence with id and attempt. NULL until the first claim and whenever the item is queued again; a finished item keeps the token of the claim it last ran under (how a completion written again tells its own commit).';
COMMENT ON COLUMN work_items.attempt IS 'The claim number: +1 at every claim. Every write by an attempt matches (id, attempt, claim_token, status running); the number alone is not unique (a claim lost in a failover shares it with the next).';
