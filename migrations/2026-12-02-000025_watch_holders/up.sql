-- A config's watch is held by one Worker process, not by a Worker id (ADR 0014, amendment 1): two Workers given
-- the same `worker.id` (two containers with one host name, each its process 1) would both have held it, and
-- both watched. Each process draws a token of its own.
--
-- An older Worker, during an upgrade, still takes and renews watches by its id and writes no token: a row it
-- inserts gets one drawn here, and a row it takes over from another Worker gets a new one from the trigger, so
-- that the Worker it took the watch from can no longer renew it by its old token.
ALTER TABLE config_watches ADD COLUMN holder uuid NOT NULL DEFAULT gen_random_uuid();
COMMENT ON COLUMN config_watches.holder IS 'The token of the Worker process holding the watch (drawn when it starts): two Workers given one worker_id are two holders.';

CREATE FUNCTION config_watches_new_holder() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.holder := gen_random_uuid();
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION config_watches_new_holder() IS 'Draws a new holder token for a watch taken over by a Worker that writes none (an older one, during an upgrade).';

CREATE TRIGGER tr_config_watches_taken_without_holder
    BEFORE UPDATE ON config_watches
    FOR EACH ROW
    WHEN (NEW.worker_id IS DISTINCT FROM OLD.worker_id AND NEW.holder = OLD.holder)
    EXECUTE FUNCTION config_watches_new_holder();
