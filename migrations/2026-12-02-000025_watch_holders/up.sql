-- A config's watch is held by one Worker process, not by a Worker id (ADR 0014, amendment 1): two Workers given
-- the same `worker.id` (two containers with one host name, each its process 1) would both have held it, and
-- both watched. Each process draws a token of its own; a row an older Worker writes gets one drawn here, and
-- that Worker, which still matches by its id, keeps renewing it.
ALTER TABLE config_watches ADD COLUMN holder uuid NOT NULL DEFAULT gen_random_uuid();
COMMENT ON COLUMN config_watches.holder IS 'The token of the Worker process holding the watch (drawn when it starts): two Workers given one worker_id are two holders.';
