--
-- PostgreSQL database dump
--

\restrict almanacschema


SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: almanac_json_readable(jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.almanac_json_readable(j jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN ((j IS NULL) OR CASE WHEN jsonb_path_exists(j, 'strict $.**{127}?(@.type() == "object" || @.type() == "array")'::jsonpath) THEN false ELSE (NOT jsonb_path_exists(j, 'strict $.**?(@.type() == "number" && (@ > 100000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000 || @ < -100000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000))'::jsonpath)) END);


--
-- Name: FUNCTION almanac_json_readable(j jsonb); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.almanac_json_readable(j jsonb) IS 'Whether a JSON value is one every reader of ours can read (serde_json): NULL, or with no number beyond ±1e308 and no container nested 128 deep. The check of the domain almanac_json (migration 000036).';


--
-- Name: almanac_json; Type: DOMAIN; Schema: public; Owner: -
--

CREATE DOMAIN public.almanac_json AS jsonb
	CONSTRAINT almanac_json_readable CHECK (public.almanac_json_readable(VALUE));


--
-- Name: DOMAIN almanac_json; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON DOMAIN public.almanac_json IS 'A JSON value every reader of ours can read (almanac_json_readable): every jsonb column of the schema has this type (migration 000036).';


--
-- Name: almanac_name_well_formed(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.almanac_name_well_formed(t text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN ((t IS NULL) OR ((char_length(t) <= 200) AND (t !~ '^[\s\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$'::text)));


--
-- Name: FUNCTION almanac_name_well_formed(t text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.almanac_name_well_formed(t text) IS 'Whether a dedup key or worker id has the form the domain reads (DedupKey, WorkerId): NULL, or 1 to 200 characters not all whitespace (whitespace as Rust''s char::is_whitespace knows it). Migration 000033.';


--
-- Name: almanac_name; Type: DOMAIN; Schema: public; Owner: -
--

CREATE DOMAIN public.almanac_name AS text
	CONSTRAINT almanac_name_well_formed CHECK (public.almanac_name_well_formed(VALUE));


--
-- Name: DOMAIN almanac_name; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON DOMAIN public.almanac_name IS 'A dedup key or worker id in the form the domain reads (almanac_name_well_formed, migration 000033): every column holding one has this type (migration 000035).';


--
-- Name: almanac_time_readable(timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.almanac_time_readable(t timestamp with time zone) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN ((t IS NULL) OR (isfinite(t) AND (t <= '262142-12-31 23:59:59.999999+00'::timestamp with time zone)));


--
-- Name: FUNCTION almanac_time_readable(t timestamp with time zone); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.almanac_time_readable(t timestamp with time zone) IS 'Whether a time is one every reader of ours can read (chrono''s DateTime<Utc>): NULL, or finite and no later than the year 262142. Every timestamptz column is checked with it (ck_<table>_times_readable, migration 000032).';


--
-- Name: almanac_time; Type: DOMAIN; Schema: public; Owner: -
--

CREATE DOMAIN public.almanac_time AS timestamp with time zone
	CONSTRAINT almanac_time_readable CHECK (public.almanac_time_readable(VALUE));


--
-- Name: DOMAIN almanac_time; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON DOMAIN public.almanac_time IS 'A time every reader of ours can read (almanac_time_readable, migration 000032): every timestamptz column of the schema has this type (migration 000035).';


--
-- Name: almanac_claim_candidates(text[], uuid, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.almanac_claim_candidates(kinds text[], served_user uuid, batch integer) RETURNS uuid[]
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    SET enable_sort TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    taken uuid[];
BEGIN
    IF served_user IS NOT NULL THEN
        taken := almanac_claim_take_configs_of_user(kinds, served_user, batch);
    ELSE
        taken := ARRAY(
            WITH d AS MATERIALIZED (SELECT clock_timestamp() AS due)
            SELECT c.config
              FROM (SELECT h.storage_config_id AS config, h.oldest_requested_at AS oldest
                      FROM queue_heads AS h
                     WHERE h.claimable
                       AND CASE WHEN h.earliest_run_after <= (SELECT due FROM d)
                                THEN pg_try_advisory_xact_lock(1751474532, hashtext(h.storage_config_id::text)) END
                     ORDER BY h.oldest_requested_at, h.storage_config_id
                     LIMIT batch + 32) AS c
             CROSS JOIN LATERAL (
                   SELECT x.id
                     FROM work_items AS x
                    WHERE x.storage_config_id = c.config AND x.status = 'queued'
                      AND x.run_after <= (SELECT due FROM d) AND x.kind = ANY (kinds)
                      AND x.kind <> ALL (ARRAY(SELECT p.kind FROM paused_kinds AS p))
                    ORDER BY x.requested_at, x.id
                    LIMIT 1) AS n
             ORDER BY c.oldest, c.config
             LIMIT batch);
    END IF;
    RETURN ARRAY(
        WITH d AS MATERIALIZED (SELECT clock_timestamp() AS due)
        (SELECT u.id
           FROM work_items AS u
          WHERE u.status = 'queued' AND u.storage_config_id IS NULL
            AND u.run_after <= (SELECT due FROM d) AND u.kind = ANY (kinds)
            AND u.kind <> ALL (ARRAY(SELECT p.kind FROM paused_kinds AS p))
          ORDER BY u.requested_at, u.id
          LIMIT 64)
        UNION ALL
        SELECT n.id
          FROM queue_heads AS h
         CROSS JOIN LATERAL (
               SELECT x.id
                 FROM work_items AS x
                WHERE x.storage_config_id = h.storage_config_id AND x.status = 'queued'
                  AND x.run_after <= (SELECT due FROM d) AND x.kind = ANY (kinds)
                  AND x.kind <> ALL (ARRAY(SELECT p.kind FROM paused_kinds AS p))
                ORDER BY x.requested_at, x.id
                LIMIT 1) AS n
         WHERE h.storage_config_id = ANY (taken) AND h.claimable
           AND NOT EXISTS (SELECT 1 FROM work_items AS r
                            WHERE r.storage_config_id = h.storage_config_id AND r.status = 'running'));
END $$;


--
-- Name: almanac_claim_take_configs_of_user(text[], uuid, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.almanac_claim_take_configs_of_user(kinds text[], served_user uuid, batch integer) RETURNS uuid[]
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    SET enable_sort TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_custom_plan'
    AS $$
BEGIN
    RETURN ARRAY(
        WITH d AS MATERIALIZED (SELECT clock_timestamp() AS due)
        SELECT c.config
          FROM (SELECT h.storage_config_id AS config, h.oldest_requested_at AS oldest
                  FROM queue_heads AS h
                 WHERE h.claimable AND h.user_id = served_user
                   AND CASE WHEN h.user_id = served_user AND h.earliest_run_after <= (SELECT due FROM d)
                            THEN pg_try_advisory_xact_lock(1751474532, hashtext(h.storage_config_id::text)) END
                 ORDER BY h.oldest_requested_at, h.storage_config_id
                 LIMIT batch + 32) AS c
         CROSS JOIN LATERAL (
               SELECT x.id
                 FROM work_items AS x
                WHERE x.storage_config_id = c.config AND x.status = 'queued'
                  AND x.run_after <= (SELECT due FROM d) AND x.kind = ANY (kinds)
                  AND x.kind <> ALL (ARRAY(SELECT p.kind FROM paused_kinds AS p))
                ORDER BY x.requested_at, x.id
                LIMIT 1) AS n
         ORDER BY c.oldest, c.config
         LIMIT batch);
END $$;


--
-- Name: almanac_disk_refuses_writes(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.almanac_disk_refuses_writes() RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    own text := (SELECT t.spcname FROM pg_database AS d JOIN pg_tablespace AS t ON t.oid = d.dattablespace
                  WHERE d.datname = current_database());
BEGIN
    EXECUTE format('CREATE TEMPORARY TABLE almanac_disk_probe (filler integer) ON COMMIT DROP TABLESPACE %I', own);
    INSERT INTO pg_temp.almanac_disk_probe VALUES (0);
    DROP TABLE pg_temp.almanac_disk_probe;
    RETURN false;
EXCEPTION WHEN disk_full THEN
    RETURN true;
END $$;


--
-- Name: FUNCTION almanac_disk_refuses_writes(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.almanac_disk_refuses_writes() IS 'Whether the server refuses to write a page of a new (temporary) table in the database''s own tablespace for want of disk space (SQLSTATE 53100): asked by the store after an error it cannot place. Runs as its owner, so a role that may not make temporary tables gets an answer too. Migrations 000034 and 000037.';


--
-- Name: almanac_mark_queue_heads_running(uuid[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.almanac_mark_queue_heads_running(configs uuid[]) RETURNS void
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    SET enable_sort TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
BEGIN
    UPDATE queue_heads AS h SET claimable = false WHERE h.storage_config_id = ANY (configs);
END $$;


--
-- Name: almanac_queue_heads_config_added(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.almanac_queue_heads_config_added() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO queue_heads (storage_config_id, user_id, active) VALUES (NEW.id, NEW.user_id, NEW.is_active)
    ON CONFLICT (storage_config_id) DO NOTHING;
    RETURN NULL;
END $$;


--
-- Name: almanac_queue_heads_config_changed(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.almanac_queue_heads_config_changed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE queue_heads
       SET active = NEW.is_active, user_id = NEW.user_id, paused = NEW.paused_at IS NOT NULL
     WHERE storage_config_id = NEW.id;
    PERFORM almanac_refresh_queue_heads(ARRAY[NEW.id]);
    RETURN NULL;
END $$;


--
-- Name: almanac_queue_heads_deleted(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.almanac_queue_heads_deleted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM almanac_refresh_queue_heads(ARRAY(
        SELECT DISTINCT o.storage_config_id FROM old_rows AS o
         WHERE o.storage_config_id IS NOT NULL AND o.status IN ('queued', 'running')
         ORDER BY 1));
    RETURN NULL;
END $$;


--
-- Name: almanac_queue_heads_inserted(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.almanac_queue_heads_inserted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM almanac_refresh_queue_heads(ARRAY(
        SELECT DISTINCT n.storage_config_id FROM new_rows AS n
         WHERE n.storage_config_id IS NOT NULL AND n.status IN ('queued', 'running')
         ORDER BY 1));
    RETURN NULL;
END $$;


--
-- Name: almanac_queue_heads_kind_changed(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.almanac_queue_heads_kind_changed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM almanac_refresh_queue_heads(ARRAY(SELECT h.storage_config_id FROM queue_heads AS h ORDER BY 1));
    RETURN NULL;
END $$;


--
-- Name: almanac_queue_heads_updated(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.almanac_queue_heads_updated() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    configs uuid[];
    claims_only boolean;
    ends_only boolean;
BEGIN
    -- A full join, so never a nested loop whatever plan this session keeps (migration 000031). No condition here
    -- may be strict on either side (`o.x = ...` alone, `n.x IS NOT NULL`): the planner would make it a left or
    -- right join, which may be a nested loop again.
    SELECT coalesce(array_agg(DISTINCT x.config ORDER BY x.config), '{}'), coalesce(bool_and(changed.claim), true),
           coalesce(bool_and(changed.ended), true)
      INTO configs, claims_only, ends_only
      FROM (SELECT o.storage_config_id AS config, n.storage_config_id AS moved_to,
                   o.status = 'queued' AND n.status = 'running'
                   AND o.storage_config_id IS NOT DISTINCT FROM n.storage_config_id AS claim,
                   o.status = 'running' AND n.status IN ('succeeded', 'failed', 'cancelled')
                   AND o.storage_config_id IS NOT DISTINCT FROM n.storage_config_id AS ended
              FROM old_rows AS o FULL JOIN new_rows AS n ON n.id = o.id
             WHERE (o.status, o.run_after, o.requested_at, o.storage_config_id)
                   IS DISTINCT FROM (n.status, n.run_after, n.requested_at, n.storage_config_id)
               AND (o.status IN ('queued', 'running') OR n.status IN ('queued', 'running'))) AS changed
     CROSS JOIN LATERAL (VALUES (changed.config), (changed.moved_to)) AS x (config)
     WHERE x.config IS NOT NULL;
    IF cardinality(configs) = 0 THEN
        RETURN NULL;
    ELSIF claims_only THEN
        PERFORM almanac_mark_queue_heads_running(configs);
    ELSE
        PERFORM almanac_refresh_queue_heads(configs, ends_only);
    END IF;
    RETURN NULL;
END $$;


--
-- Name: almanac_refresh_queue_heads(uuid[], boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.almanac_refresh_queue_heads(configs uuid[], ended boolean DEFAULT false) RETURNS void
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    SET enable_sort TO 'off'
    SET enable_hashjoin TO 'off'
    SET enable_mergejoin TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
BEGIN
    PERFORM 1 FROM queue_heads AS h WHERE h.storage_config_id = ANY (configs)
     ORDER BY h.storage_config_id FOR UPDATE;
    WITH q AS MATERIALIZED (
        SELECT c.config,
               o.requested_at AS oldest,
               CASE WHEN o.requested_at IS NULL THEN NULL
                    WHEN o.run_after <= clock_timestamp() THEN o.run_after
                    ELSE (SELECT w.run_after FROM work_items AS w
                           WHERE w.storage_config_id = c.config AND w.status = 'queued' AND w.attempt >= 0
                             AND w.kind <> ALL (p.kinds)
                           ORDER BY w.run_after
                           LIMIT 1) END AS earliest,
               CASE WHEN ended THEN false
                    ELSE EXISTS (SELECT 1 FROM work_items AS w
                                  WHERE w.storage_config_id = c.config AND w.status = 'running') END AS running
          FROM unnest(configs) AS c (config)
         CROSS JOIN (SELECT ARRAY(SELECT k.kind FROM paused_kinds AS k) AS kinds) AS p
          LEFT JOIN LATERAL (
               SELECT w.requested_at, w.run_after FROM work_items AS w
                WHERE w.storage_config_id = c.config AND w.status = 'queued' AND w.kind <> ALL (p.kinds)
                ORDER BY w.requested_at, w.id
                LIMIT 1) AS o ON true)
    UPDATE queue_heads AS h
       SET oldest_requested_at = q.oldest,
           earliest_run_after = q.earliest,
           claimable = q.oldest IS NOT NULL AND h.active AND NOT h.paused AND NOT q.running
      FROM q
     WHERE h.storage_config_id = q.config
       AND (h.oldest_requested_at, h.earliest_run_after, h.claimable)
           IS DISTINCT FROM (q.oldest, q.earliest, q.oldest IS NOT NULL AND h.active AND NOT h.paused AND NOT q.running);
END $$;


--
-- Name: config_watches_new_holder(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.config_watches_new_holder() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.holder := gen_random_uuid();
    RETURN NEW;
END
$$;


--
-- Name: FUNCTION config_watches_new_holder(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.config_watches_new_holder() IS 'Draws a new holder token for a watch taken over by a Worker that writes none (an older one, during an upgrade).';


--
-- Name: notify_work_items_queued(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.notify_work_items_queued() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('almanac_work_items', '');
    RETURN NULL;
END;
$$;


--
-- Name: FUNCTION notify_work_items_queued(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.notify_work_items_queued() IS 'Statement trigger: NOTIFY almanac_work_items after work is enqueued.';


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: asset_extra_paths; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.asset_extra_paths (
    storage_config_id uuid NOT NULL,
    file_path bytea NOT NULL,
    asset_id uuid NOT NULL,
    display_path text NOT NULL,
    size_bytes bigint NOT NULL,
    file_modified_at public.almanac_time NOT NULL,
    last_seen_at public.almanac_time DEFAULT now() NOT NULL
);


--
-- Name: TABLE asset_extra_paths; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.asset_extra_paths IS 'Further paths at which a crawl found the content of an active asset (copies). Removed when a crawl no longer finds them.';


--
-- Name: COLUMN asset_extra_paths.file_path; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.asset_extra_paths.file_path IS 'Path relative to the config root, as the exact bytes the file system gave.';


--
-- Name: asset_metadata; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.asset_metadata (
    asset_id uuid NOT NULL,
    width integer,
    height integer,
    orientation_degrees smallint,
    duration_ms bigint,
    gps_latitude double precision,
    gps_longitude double precision,
    gps_altitude_m double precision,
    camera_make text,
    camera_model text,
    lens_model text,
    camera_burst_id text,
    live_photo_content_id text,
    CONSTRAINT ck_asset_metadata_dimensions CHECK ((((width IS NULL) OR (width > 0)) AND ((height IS NULL) OR (height > 0)))),
    CONSTRAINT ck_asset_metadata_latitude CHECK (((gps_latitude >= ('-90'::integer)::double precision) AND (gps_latitude <= (90)::double precision))),
    CONSTRAINT ck_asset_metadata_longitude CHECK (((gps_longitude >= ('-180'::integer)::double precision) AND (gps_longitude <= (180)::double precision))),
    CONSTRAINT ck_asset_metadata_orientation CHECK ((orientation_degrees = ANY (ARRAY[0, 90, 180, 270])))
);


--
-- Name: TABLE asset_metadata; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.asset_metadata IS 'What the crawl read from a media file (EXIF, container); one row per asset.';


--
-- Name: COLUMN asset_metadata.width; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.asset_metadata.width IS 'Stored pixel width, before orientation is applied.';


--
-- Name: COLUMN asset_metadata.orientation_degrees; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.asset_metadata.orientation_degrees IS 'Clockwise rotation that makes the stored pixels upright (EXIF orientation normalised).';


--
-- Name: COLUMN asset_metadata.camera_burst_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.asset_metadata.camera_burst_id IS 'The camera''s own burst identifier (e.g. Apple''s), which wins over time-gap grouping.';


--
-- Name: COLUMN asset_metadata.live_photo_content_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.asset_metadata.live_photo_content_id IS 'Apple''s content identifier that ties a Live Photo''s still to its motion file.';


--
-- Name: bursts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.bursts (
    id uuid NOT NULL,
    storage_config_id uuid NOT NULL,
    primary_asset_id uuid NOT NULL,
    camera_make text,
    camera_model text,
    source text NOT NULL,
    started_at public.almanac_time NOT NULL,
    ended_at public.almanac_time NOT NULL,
    frame_count integer NOT NULL,
    created_at public.almanac_time DEFAULT now() NOT NULL,
    updated_at public.almanac_time DEFAULT now() NOT NULL,
    CONSTRAINT ck_bursts_frames CHECK ((frame_count >= 2)),
    CONSTRAINT ck_bursts_interval CHECK (((ended_at)::timestamp with time zone >= (started_at)::timestamp with time zone)),
    CONSTRAINT ck_bursts_source CHECK ((source = ANY (ARRAY['camera_burst_id'::text, 'time_gap'::text])))
);


--
-- Name: TABLE bursts; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.bursts IS 'Rapid-fire shots of one camera grouped by burst_detection; "on this day" shows one memory per burst, its primary frame.';


--
-- Name: COLUMN bursts.source; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.bursts.source IS 'camera_burst_id when the camera wrote its own burst identifier, time_gap when grouped by capture times.';


--
-- Name: config_watches; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.config_watches (
    storage_config_id uuid NOT NULL,
    worker_id public.almanac_name NOT NULL,
    since public.almanac_time NOT NULL,
    lease_expires_at public.almanac_time NOT NULL,
    mode text NOT NULL,
    last_change_at public.almanac_time,
    pending_files bigint DEFAULT 0 NOT NULL,
    note text,
    holder uuid DEFAULT gen_random_uuid() NOT NULL,
    CONSTRAINT ck_config_watches_mode CHECK ((mode = ANY (ARRAY['events'::text, 'polling'::text, 'off'::text]))),
    CONSTRAINT ck_config_watches_pending_files CHECK ((pending_files >= 0))
);


--
-- Name: TABLE config_watches; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.config_watches IS 'The Worker watching each config''s root (one at a time: whoever holds the lease, taken again once it expires by the database clock) and its last report. A row whose lease expired is no holder.';


--
-- Name: COLUMN config_watches.since; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.config_watches.since IS 'When this Worker took the watch (database clock); unchanged by renewals.';


--
-- Name: COLUMN config_watches.lease_expires_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.config_watches.lease_expires_at IS 'When another Worker may take the watch unless this one renews it (database clock).';


--
-- Name: COLUMN config_watches.last_change_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.config_watches.last_change_at IS 'When the watcher last saw a change, by the Worker''s clock: shown, never compared.';


--
-- Name: COLUMN config_watches.pending_files; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.config_watches.pending_files IS 'Files seen changing and not yet handed to a crawl.';


--
-- Name: COLUMN config_watches.note; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.config_watches.note IS 'Why the mode is not the one chosen (an overflow, the watch limit, an unreadable root), if it is not.';


--
-- Name: COLUMN config_watches.holder; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.config_watches.holder IS 'The token of the Worker process holding the watch (drawn when it starts): two Workers given one worker_id are two holders.';


--
-- Name: failed_files; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.failed_files (
    storage_config_id uuid NOT NULL,
    file_path bytea NOT NULL,
    size bigint NOT NULL,
    modified_at public.almanac_time NOT NULL,
    inode bigint NOT NULL,
    inode_changed_at public.almanac_time NOT NULL,
    reason text NOT NULL,
    read_by text NOT NULL,
    failed_at public.almanac_time DEFAULT now() NOT NULL,
    CONSTRAINT failed_files_size_check CHECK ((size >= 0))
);


--
-- Name: TABLE failed_files; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.failed_files IS 'Files a crawl failed for their content, not read again while unchanged and read by the same rules (read_by). Migration 000041.';


--
-- Name: media_assets; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.media_assets (
    id uuid NOT NULL,
    storage_config_id uuid NOT NULL,
    file_path bytea NOT NULL,
    display_path text NOT NULL,
    content_hash text NOT NULL,
    size_bytes bigint NOT NULL,
    file_modified_at public.almanac_time NOT NULL,
    media_type text NOT NULL,
    captured_at public.almanac_time NOT NULL,
    captured_offset_minutes integer,
    captured_at_source text NOT NULL,
    capture_month smallint NOT NULL,
    capture_day smallint NOT NULL,
    paired_asset_id uuid,
    burst_id uuid,
    is_soft_deleted boolean DEFAULT false NOT NULL,
    soft_deleted_at public.almanac_time,
    last_seen_at public.almanac_time DEFAULT now() NOT NULL,
    created_at public.almanac_time DEFAULT now() NOT NULL,
    proxies_missing boolean DEFAULT false NOT NULL,
    sidecar_path bytea,
    sidecar_size bigint,
    sidecar_modified_at public.almanac_time,
    date_outdated boolean DEFAULT false NOT NULL,
    CONSTRAINT ck_media_assets_capture_day CHECK (((capture_day >= 1) AND (capture_day <= 31))),
    CONSTRAINT ck_media_assets_capture_month CHECK (((capture_month >= 1) AND (capture_month <= 12))),
    CONSTRAINT ck_media_assets_captured_at_source CHECK ((captured_at_source = ANY (ARRAY['exif_original'::text, 'exif_digitized'::text, 'xmp_embedded'::text, 'xmp_sidecar'::text, 'container'::text, 'file_name'::text, 'exif_modified'::text, 'file_mtime'::text]))),
    CONSTRAINT ck_media_assets_content_hash CHECK ((content_hash ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT ck_media_assets_media_type CHECK ((media_type = ANY (ARRAY['image'::text, 'video'::text]))),
    CONSTRAINT ck_media_assets_sidecar CHECK ((((sidecar_path IS NULL) = (sidecar_size IS NULL)) AND ((sidecar_path IS NULL) = (sidecar_modified_at IS NULL)))),
    CONSTRAINT ck_media_assets_size CHECK ((size_bytes >= 0)),
    CONSTRAINT ck_media_assets_soft_delete CHECK ((is_soft_deleted = (soft_deleted_at IS NOT NULL)))
);


--
-- Name: TABLE media_assets; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.media_assets IS 'One media file of a storage config, identified inside the config by its content hash. One active asset per (config, content hash); soft-deleted when its file is gone, revived if it comes back.';


--
-- Name: COLUMN media_assets.file_path; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.media_assets.file_path IS 'Path relative to the config root, as the exact bytes the file system gave (names need not be UTF-8).';


--
-- Name: COLUMN media_assets.display_path; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.media_assets.display_path IS 'file_path decoded lossily as UTF-8, for people; never used to open the file.';


--
-- Name: COLUMN media_assets.content_hash; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.media_assets.content_hash IS 'BLAKE3 of the file content, lower-case hex. Proxy folders derive from (config id, content hash).';


--
-- Name: COLUMN media_assets.file_modified_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.media_assets.file_modified_at IS 'The file''s mtime when last hashed: with path and size, a match means unchanged and the file is not re-read.';


--
-- Name: COLUMN media_assets.captured_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.media_assets.captured_at IS 'When the shot was taken, as an instant.';


--
-- Name: COLUMN media_assets.captured_offset_minutes; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.media_assets.captured_offset_minutes IS 'UTC offset of the local time at capture, when known: the camera''s own, or the household zone''s at that instant for a time read as an instant (a phone''s video in UTC, a file''s mtime); capture_month/day use the local date it gives.';


--
-- Name: COLUMN media_assets.captured_at_source; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.media_assets.captured_at_source IS 'Which source gave captured_at, best first: exif_original, exif_digitized, xmp_embedded, xmp_sidecar, container, file_name, exif_modified, file_mtime.';


--
-- Name: COLUMN media_assets.capture_month; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.media_assets.capture_month IS 'Local month of capture, for the "on this day" index.';


--
-- Name: COLUMN media_assets.capture_day; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.media_assets.capture_day IS 'Local day of month of capture, for the "on this day" index.';


--
-- Name: COLUMN media_assets.paired_asset_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.media_assets.paired_asset_id IS 'The other half of a Live Photo (still <-> motion).';


--
-- Name: COLUMN media_assets.burst_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.media_assets.burst_id IS 'The burst this frame belongs to, set by burst_detection.';


--
-- Name: COLUMN media_assets.last_seen_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.media_assets.last_seen_at IS 'Last time a crawl read this file (ingested, moved or revived it). Unchanged files are not rewritten by every crawl: what a walk did not find is computed in memory.';


--
-- Name: COLUMN media_assets.proxies_missing; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.media_assets.proxies_missing IS 'Some proxies were deleted on purpose; the next crawl makes them again and clears this.';


--
-- Name: COLUMN media_assets.sidecar_path; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.media_assets.sidecar_path IS 'The XMP sidecar (relative to the root, exact bytes) present when the capture time was last read; with its size and mtime, a crawl sees a sidecar that appeared, changed or vanished and reads the date again. NULL when there was none.';


--
-- Name: COLUMN media_assets.date_outdated; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.media_assets.date_outdated IS 'The capture date was read with a rule since corrected: the next crawl that lists the file reads its date again (and clears this). Migration 000038.';


--
-- Name: paused_kinds; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.paused_kinds (
    kind text NOT NULL,
    paused_at public.almanac_time DEFAULT now() NOT NULL,
    CONSTRAINT ck_paused_kinds_kind CHECK ((kind = ANY (ARRAY['crawl'::text, 'burst_detection'::text, 'purge'::text, 'proxy_deletion'::text, 'proxy_sweep'::text, 'token_cleanup'::text, 'work_item_retention'::text])))
);


--
-- Name: TABLE paused_kinds; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.paused_kinds IS 'Kinds paused everywhere (almanac-worker pause --kind): their queued items are not claimed.';


--
-- Name: proxy_files; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.proxy_files (
    id uuid NOT NULL,
    asset_id uuid NOT NULL,
    proxy_type text NOT NULL,
    relative_path text,
    inline_value text,
    size_bytes bigint DEFAULT 0 NOT NULL,
    created_at public.almanac_time DEFAULT now() NOT NULL,
    CONSTRAINT ck_proxy_files_storage CHECK ((((proxy_type = 'blurhash'::text) = (inline_value IS NOT NULL)) AND ((relative_path IS NULL) = (inline_value IS NOT NULL)))),
    CONSTRAINT ck_proxy_files_type CHECK ((proxy_type = ANY (ARRAY['thumbnail'::text, 'preview'::text, 'blurhash'::text, 'poster'::text, 'web_video'::text])))
);


--
-- Name: TABLE proxy_files; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.proxy_files IS 'Derived files of an asset, one per (asset, type). Files live under the proxy root in a folder derived from (config id, content hash) only, so a retry overwrites its own debris.';


--
-- Name: COLUMN proxy_files.relative_path; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.proxy_files.relative_path IS 'Path of the file relative to the proxy root; NULL for a blurhash, which is inline.';


--
-- Name: COLUMN proxy_files.inline_value; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.proxy_files.inline_value IS 'The BlurHash string; set only for proxy_type blurhash.';


--
-- Name: queue_heads; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.queue_heads (
    storage_config_id uuid NOT NULL,
    user_id uuid NOT NULL,
    active boolean NOT NULL,
    claimable boolean DEFAULT false NOT NULL,
    oldest_requested_at public.almanac_time,
    earliest_run_after public.almanac_time,
    paused boolean DEFAULT false NOT NULL
);


--
-- Name: TABLE queue_heads; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.queue_heads IS 'One row per storage config that ever had work: whether it can be claimed for now (active, queued work, nothing running) and its oldest queued item. Kept by triggers on work_items and storage_configs; the claim reads only its oldest claimable rows.';


--
-- Name: COLUMN queue_heads.active; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.queue_heads.active IS 'storage_configs.is_active, copied by its trigger (so that keeping a head never reads storage_configs).';


--
-- Name: COLUMN queue_heads.claimable; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.queue_heads.claimable IS 'Active, with queued work, and no running item (as of the last change to its queue).';


--
-- Name: COLUMN queue_heads.oldest_requested_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.queue_heads.oldest_requested_at IS 'requested_at of the config''s oldest queued item: the claim''s order between configs.';


--
-- Name: COLUMN queue_heads.earliest_run_after; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.queue_heads.earliest_run_after IS 'When its queued items are next due: the earliest run_after of its queued items when none is due yet; once its oldest item is due, that item''s run_after (already past, so the claim walks the head either way). Not claimed for before then.';


--
-- Name: COLUMN queue_heads.paused; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.queue_heads.paused IS 'storage_configs.paused_at IS NOT NULL, copied by its trigger.';


--
-- Name: refresh_tokens; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.refresh_tokens (
    id uuid NOT NULL,
    user_id uuid NOT NULL,
    token_hash bytea NOT NULL,
    expires_at public.almanac_time NOT NULL,
    revoked_at public.almanac_time,
    created_at public.almanac_time DEFAULT now() NOT NULL
);


--
-- Name: TABLE refresh_tokens; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.refresh_tokens IS 'The web backend''s refresh tokens; the Worker only deletes expired or revoked ones (token_cleanup).';


--
-- Name: COLUMN refresh_tokens.token_hash; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.refresh_tokens.token_hash IS 'A hash of the token; the token itself is never stored.';


--
-- Name: schedule_periods; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schedule_periods (
    schedule_key text NOT NULL,
    work_item_id uuid,
    created_at public.almanac_time DEFAULT now() NOT NULL
);


--
-- Name: TABLE schedule_periods; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.schedule_periods IS 'One row per (periodic work, period) the scheduler has enqueued, e.g. crawl:<config>:<period number>. Old rows are deleted by work_item_retention.';


--
-- Name: COLUMN schedule_periods.work_item_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.schedule_periods.work_item_id IS 'The item enqueued for the period (kept for tracing; the item may be deleted since).';


--
-- Name: storage_configs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.storage_configs (
    id uuid NOT NULL,
    user_id uuid NOT NULL,
    root_path text NOT NULL,
    is_active boolean DEFAULT true NOT NULL,
    created_at public.almanac_time DEFAULT now() NOT NULL,
    root_is_mount_point boolean,
    paused_at public.almanac_time,
    watch text DEFAULT 'auto'::text NOT NULL,
    mounts_below bytea[] DEFAULT '{}'::bytea[] NOT NULL,
    CONSTRAINT ck_storage_configs_root_path_absolute CHECK (("left"(root_path, 1) = '/'::text)),
    CONSTRAINT ck_storage_configs_watch CHECK ((watch = ANY (ARRAY['auto'::text, 'events'::text, 'polling'::text, 'off'::text])))
);


--
-- Name: TABLE storage_configs; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.storage_configs IS 'One folder tree of originals, owned by one user. Work items are serialised per storage config.';


--
-- Name: COLUMN storage_configs.root_path; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.storage_configs.root_path IS 'Absolute path of the folder of originals as the Worker sees it; globally unique. Originals are never written.';


--
-- Name: COLUMN storage_configs.is_active; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.storage_configs.is_active IS 'Inactive configs get no new work items and are not claimed for.';


--
-- Name: COLUMN storage_configs.root_is_mount_point; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.storage_configs.root_is_mount_point IS 'Whether the root was a mount point (its device differs from its parent''s) when registered or last crawled in full; a crawl refuses when a root that was one no longer is (the share is not mounted). NULL until known.';


--
-- Name: COLUMN storage_configs.paused_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.storage_configs.paused_at IS 'Set while the config is paused (almanac-worker pause --config): its queued work is not claimed.';


--
-- Name: COLUMN storage_configs.watch; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.storage_configs.watch IS 'How the operator chose to watch the root (almanac-worker config watch): auto (events, or polling on a network file system), events, polling or off.';


--
-- Name: COLUMN storage_configs.mounts_below; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.storage_configs.mounts_below IS 'Folders beneath the root (paths relative to it, as the file system gave their bytes) that were mount points at the last crawl of the whole root: one that is not a mount point now is not walked, and what the catalogue has under it is kept, unless the crawl is confirmed with root_moved.';


--
-- Name: users; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.users (
    id uuid NOT NULL,
    username text NOT NULL,
    disabled boolean DEFAULT false NOT NULL,
    created_at public.almanac_time DEFAULT now() NOT NULL,
    CONSTRAINT ck_users_username_not_blank CHECK ((length(btrim(username)) > 0))
);


--
-- Name: TABLE users; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.users IS 'People who own storage configs. Minimal here; the web backend owns the rest of a user.';


--
-- Name: COLUMN users.disabled; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.users.disabled IS 'A disabled user keeps their catalogue but signs in to nothing.';


--
-- Name: work_items; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.work_items (
    id uuid NOT NULL,
    kind text NOT NULL,
    storage_config_id uuid,
    status text DEFAULT 'queued'::text NOT NULL,
    payload public.almanac_json DEFAULT '{}'::jsonb NOT NULL,
    dedup_key public.almanac_name,
    requested_at public.almanac_time DEFAULT now() NOT NULL,
    run_after public.almanac_time DEFAULT now() NOT NULL,
    attempt integer DEFAULT 0 NOT NULL,
    failures integer DEFAULT 0 NOT NULL,
    stalls integer DEFAULT 0 NOT NULL,
    max_attempts integer DEFAULT 5 NOT NULL,
    lease_expires_at public.almanac_time,
    worker_id public.almanac_name,
    started_at public.almanac_time,
    heartbeat_at public.almanac_time,
    finished_at public.almanac_time,
    cancel_requested_at public.almanac_time,
    last_error text,
    progress public.almanac_json,
    result public.almanac_json,
    claim_token uuid,
    CONSTRAINT ck_work_items_counters CHECK (((attempt >= 0) AND (failures >= 0) AND (stalls >= 0) AND (max_attempts >= 1))),
    CONSTRAINT ck_work_items_finished CHECK (((status = ANY (ARRAY['succeeded'::text, 'failed'::text, 'cancelled'::text])) = (finished_at IS NOT NULL))),
    CONSTRAINT ck_work_items_kind CHECK ((kind = ANY (ARRAY['crawl'::text, 'burst_detection'::text, 'purge'::text, 'proxy_deletion'::text, 'proxy_sweep'::text, 'token_cleanup'::text, 'work_item_retention'::text]))),
    CONSTRAINT ck_work_items_kind_scope CHECK ((((kind = ANY (ARRAY['crawl'::text, 'burst_detection'::text, 'purge'::text])) AND (storage_config_id IS NOT NULL)) OR ((kind = ANY (ARRAY['proxy_sweep'::text, 'token_cleanup'::text, 'work_item_retention'::text])) AND (storage_config_id IS NULL)) OR (kind = 'proxy_deletion'::text))),
    CONSTRAINT ck_work_items_running_lease CHECK (((status <> 'running'::text) OR ((lease_expires_at IS NOT NULL) AND (worker_id IS NOT NULL) AND (attempt >= 1)))),
    CONSTRAINT ck_work_items_status CHECK ((status = ANY (ARRAY['queued'::text, 'running'::text, 'succeeded'::text, 'failed'::text, 'cancelled'::text])))
);


--
-- Name: TABLE work_items; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.work_items IS 'The durable work queue (ADR 0008). One row per unit of background work; at most one running row per storage config.';


--
-- Name: COLUMN work_items.kind; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.work_items.kind IS 'What the item does: crawl, burst_detection, purge, proxy_deletion, proxy_sweep, token_cleanup, work_item_retention.';


--
-- Name: COLUMN work_items.storage_config_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.work_items.storage_config_id IS 'The scope: the storage config the item works on, or NULL for unscoped work, which is not serialised.';


--
-- Name: COLUMN work_items.payload; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.work_items.payload IS 'Kind-specific input (e.g. asset ids for proxy_deletion).';


--
-- Name: COLUMN work_items.dedup_key; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.work_items.dedup_key IS 'Enqueueing a key that is already queued returns the queued item instead of a new one.';


--
-- Name: COLUMN work_items.requested_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.work_items.requested_at IS 'Claim order (oldest first). Kept on retry, release and recovery, so requeued work goes first.';


--
-- Name: COLUMN work_items.run_after; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.work_items.run_after IS 'Not claimed before this instant (retry backoff, scheduled work).';


--
-- Name: COLUMN work_items.attempt; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.work_items.attempt IS 'The claim number: +1 at every claim. Every write by an attempt matches (id, attempt, claim_token, status running); the number alone is not unique (a claim lost in a failover shares it with the next).';


--
-- Name: COLUMN work_items.failures; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.work_items.failures IS 'Handler errors so far, counted against max_attempts.';


--
-- Name: COLUMN work_items.stalls; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.work_items.stalls IS 'Lease expiries so far; the item fails as stalled when it reaches the Worker''s max_stalls.';


--
-- Name: COLUMN work_items.max_attempts; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.work_items.max_attempts IS 'Retry budget: a retryable failure is requeued while failures < max_attempts.';


--
-- Name: COLUMN work_items.lease_expires_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.work_items.lease_expires_at IS 'Database-clock instant after which a running item is recovered by any Worker; renewed by heartbeats.';


--
-- Name: COLUMN work_items.worker_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.work_items.worker_id IS 'The Worker that holds (or last held) the item.';


--
-- Name: COLUMN work_items.heartbeat_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.work_items.heartbeat_at IS 'Database-clock instant of the last successful heartbeat of the current attempt.';


--
-- Name: COLUMN work_items.cancel_requested_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.work_items.cancel_requested_at IS 'Set when a running item is asked to cancel; its Worker sees it at the next heartbeat.';


--
-- Name: COLUMN work_items.last_error; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.work_items.last_error IS 'The last handler error, or why the item stalled.';


--
-- Name: COLUMN work_items.progress; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.work_items.progress IS 'Handler progress, written by heartbeats (e.g. files found, done, skipped, failed, bytes).';


--
-- Name: COLUMN work_items.result; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.work_items.result IS 'The handler''s summary on success (e.g. the files a crawl skipped, with reasons).';


--
-- Name: COLUMN work_items.claim_token; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.work_items.claim_token IS 'The claim''s own token: a random value drawn by the store for each claim (the same for the items of one claim), part of the fence with id and attempt. A claim given up on before its answer is handed back by it. NULL until the first claim and whenever the item is queued again; a finished item keeps the token of the claim it last ran under (how a completion written again tells its own commit).';


--
-- Name: asset_extra_paths asset_extra_paths_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.asset_extra_paths
    ADD CONSTRAINT asset_extra_paths_pkey PRIMARY KEY (storage_config_id, file_path);


--
-- Name: asset_metadata asset_metadata_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.asset_metadata
    ADD CONSTRAINT asset_metadata_pkey PRIMARY KEY (asset_id);


--
-- Name: bursts bursts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.bursts
    ADD CONSTRAINT bursts_pkey PRIMARY KEY (id);


--
-- Name: storage_configs ck_storage_configs_root_path_canonical; Type: CHECK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE public.storage_configs
    ADD CONSTRAINT ck_storage_configs_root_path_canonical CHECK (((root_path <> '/'::text) AND ("right"(root_path, 1) <> '/'::text) AND (strpos(root_path, '//'::text) = 0) AND (strpos((root_path || '/'::text), '/./'::text) = 0) AND (strpos((root_path || '/'::text), '/../'::text) = 0))) NOT VALID;


--
-- Name: config_watches config_watches_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.config_watches
    ADD CONSTRAINT config_watches_pkey PRIMARY KEY (storage_config_id);


--
-- Name: failed_files failed_files_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.failed_files
    ADD CONSTRAINT failed_files_pkey PRIMARY KEY (storage_config_id, file_path);


--
-- Name: media_assets media_assets_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.media_assets
    ADD CONSTRAINT media_assets_pkey PRIMARY KEY (id);


--
-- Name: paused_kinds paused_kinds_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.paused_kinds
    ADD CONSTRAINT paused_kinds_pkey PRIMARY KEY (kind);


--
-- Name: proxy_files proxy_files_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.proxy_files
    ADD CONSTRAINT proxy_files_pkey PRIMARY KEY (id);


--
-- Name: queue_heads queue_heads_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.queue_heads
    ADD CONSTRAINT queue_heads_pkey PRIMARY KEY (storage_config_id);


--
-- Name: refresh_tokens refresh_tokens_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.refresh_tokens
    ADD CONSTRAINT refresh_tokens_pkey PRIMARY KEY (id);


--
-- Name: schedule_periods schedule_periods_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schedule_periods
    ADD CONSTRAINT schedule_periods_pkey PRIMARY KEY (schedule_key);


--
-- Name: storage_configs storage_configs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.storage_configs
    ADD CONSTRAINT storage_configs_pkey PRIMARY KEY (id);


--
-- Name: proxy_files uq_proxy_files_asset_type; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.proxy_files
    ADD CONSTRAINT uq_proxy_files_asset_type UNIQUE (asset_id, proxy_type);


--
-- Name: refresh_tokens uq_refresh_tokens_hash; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.refresh_tokens
    ADD CONSTRAINT uq_refresh_tokens_hash UNIQUE (token_hash);


--
-- Name: storage_configs uq_storage_configs_root_path; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.storage_configs
    ADD CONSTRAINT uq_storage_configs_root_path UNIQUE (root_path);


--
-- Name: users uq_users_username; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.users
    ADD CONSTRAINT uq_users_username UNIQUE (username);


--
-- Name: users users_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.users
    ADD CONSTRAINT users_pkey PRIMARY KEY (id);


--
-- Name: work_items work_items_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.work_items
    ADD CONSTRAINT work_items_pkey PRIMARY KEY (id);


--
-- Name: ix_asset_extra_paths_asset; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_asset_extra_paths_asset ON public.asset_extra_paths USING btree (asset_id);


--
-- Name: ix_bursts_config; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_bursts_config ON public.bursts USING btree (storage_config_id);


--
-- Name: ix_bursts_primary_asset; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_bursts_primary_asset ON public.bursts USING btree (primary_asset_id);


--
-- Name: ix_media_assets_active_content; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX ix_media_assets_active_content ON public.media_assets USING btree (storage_config_id, content_hash) WHERE (NOT is_soft_deleted);


--
-- Name: ix_media_assets_active_path; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX ix_media_assets_active_path ON public.media_assets USING btree (storage_config_id, file_path) WHERE (NOT is_soft_deleted);


--
-- Name: ix_media_assets_burst; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_media_assets_burst ON public.media_assets USING btree (burst_id) WHERE (burst_id IS NOT NULL);


--
-- Name: ix_media_assets_content; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_media_assets_content ON public.media_assets USING btree (storage_config_id, content_hash);


--
-- Name: ix_media_assets_on_this_day; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_media_assets_on_this_day ON public.media_assets USING btree (capture_month, capture_day) WHERE (NOT is_soft_deleted);


--
-- Name: ix_media_assets_paired; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_media_assets_paired ON public.media_assets USING btree (paired_asset_id) WHERE (paired_asset_id IS NOT NULL);


--
-- Name: ix_media_assets_soft_deleted; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_media_assets_soft_deleted ON public.media_assets USING btree (storage_config_id, soft_deleted_at) WHERE is_soft_deleted;


--
-- Name: ix_proxy_files_relative_path; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_proxy_files_relative_path ON public.proxy_files USING btree (relative_path COLLATE "C") WHERE (relative_path IS NOT NULL);


--
-- Name: ix_queue_heads_claimable; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_queue_heads_claimable ON public.queue_heads USING btree (oldest_requested_at, storage_config_id) WHERE claimable;


--
-- Name: ix_queue_heads_claimable_user; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_queue_heads_claimable_user ON public.queue_heads USING btree (user_id, oldest_requested_at, storage_config_id) WHERE claimable;


--
-- Name: ix_refresh_tokens_expires; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_refresh_tokens_expires ON public.refresh_tokens USING btree (expires_at);


--
-- Name: ix_refresh_tokens_revoked; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_refresh_tokens_revoked ON public.refresh_tokens USING btree (revoked_at) WHERE (revoked_at IS NOT NULL);


--
-- Name: ix_refresh_tokens_user; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_refresh_tokens_user ON public.refresh_tokens USING btree (user_id);


--
-- Name: ix_schedule_periods_created; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_schedule_periods_created ON public.schedule_periods USING btree (created_at);


--
-- Name: ix_storage_configs_user; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_storage_configs_user ON public.storage_configs USING btree (user_id);


--
-- Name: ix_work_items_config_order; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_work_items_config_order ON public.work_items USING btree (storage_config_id, status, requested_at, id);


--
-- Name: ix_work_items_dedup_key_queued; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX ix_work_items_dedup_key_queued ON public.work_items USING btree (dedup_key) WHERE (status = 'queued'::text);


--
-- Name: ix_work_items_finished; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_work_items_finished ON public.work_items USING btree (finished_at) WHERE (status = ANY (ARRAY['succeeded'::text, 'failed'::text, 'cancelled'::text]));


--
-- Name: ix_work_items_queued_config; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_work_items_queued_config ON public.work_items USING btree (storage_config_id, requested_at, id) WHERE ((status = 'queued'::text) AND (storage_config_id IS NOT NULL));


--
-- Name: ix_work_items_queued_config_due; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_work_items_queued_config_due ON public.work_items USING btree (storage_config_id, run_after) WHERE ((status = 'queued'::text) AND (storage_config_id IS NOT NULL) AND (attempt >= 0));


--
-- Name: ix_work_items_queued_unscoped; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_work_items_queued_unscoped ON public.work_items USING btree (requested_at, id) WHERE ((status = 'queued'::text) AND (storage_config_id IS NULL));


--
-- Name: ix_work_items_running_config; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX ix_work_items_running_config ON public.work_items USING btree (storage_config_id) WHERE ((status = 'running'::text) AND (storage_config_id IS NOT NULL));


--
-- Name: ix_work_items_running_lease; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_work_items_running_lease ON public.work_items USING btree (lease_expires_at) WHERE (status = 'running'::text);


--
-- Name: config_watches tr_config_watches_taken_without_holder; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER tr_config_watches_taken_without_holder BEFORE UPDATE ON public.config_watches FOR EACH ROW WHEN ((((new.worker_id)::text IS DISTINCT FROM (old.worker_id)::text) AND (new.holder = old.holder))) EXECUTE FUNCTION public.config_watches_new_holder();


--
-- Name: paused_kinds tr_paused_kinds_queue_heads; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER tr_paused_kinds_queue_heads AFTER INSERT OR DELETE ON public.paused_kinds FOR EACH ROW EXECUTE FUNCTION public.almanac_queue_heads_kind_changed();


--
-- Name: storage_configs tr_storage_configs_queue_heads; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER tr_storage_configs_queue_heads AFTER UPDATE OF is_active, user_id, paused_at ON public.storage_configs FOR EACH ROW WHEN (((old.is_active IS DISTINCT FROM new.is_active) OR (old.user_id IS DISTINCT FROM new.user_id) OR ((old.paused_at IS NULL) <> (new.paused_at IS NULL)))) EXECUTE FUNCTION public.almanac_queue_heads_config_changed();


--
-- Name: storage_configs tr_storage_configs_queue_heads_insert; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER tr_storage_configs_queue_heads_insert AFTER INSERT ON public.storage_configs FOR EACH ROW EXECUTE FUNCTION public.almanac_queue_heads_config_added();


--
-- Name: work_items tr_work_items_notify_queued; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER tr_work_items_notify_queued AFTER INSERT ON public.work_items FOR EACH STATEMENT EXECUTE FUNCTION public.notify_work_items_queued();


--
-- Name: work_items tr_work_items_queue_heads_delete; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER tr_work_items_queue_heads_delete AFTER DELETE ON public.work_items REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION public.almanac_queue_heads_deleted();


--
-- Name: work_items tr_work_items_queue_heads_insert; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER tr_work_items_queue_heads_insert AFTER INSERT ON public.work_items REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.almanac_queue_heads_inserted();


--
-- Name: work_items tr_work_items_queue_heads_update; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER tr_work_items_queue_heads_update AFTER UPDATE ON public.work_items REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.almanac_queue_heads_updated();


--
-- Name: asset_extra_paths asset_extra_paths_asset_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.asset_extra_paths
    ADD CONSTRAINT asset_extra_paths_asset_id_fkey FOREIGN KEY (asset_id) REFERENCES public.media_assets(id) ON DELETE CASCADE;


--
-- Name: asset_extra_paths asset_extra_paths_storage_config_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.asset_extra_paths
    ADD CONSTRAINT asset_extra_paths_storage_config_id_fkey FOREIGN KEY (storage_config_id) REFERENCES public.storage_configs(id) ON DELETE CASCADE;


--
-- Name: asset_metadata asset_metadata_asset_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.asset_metadata
    ADD CONSTRAINT asset_metadata_asset_id_fkey FOREIGN KEY (asset_id) REFERENCES public.media_assets(id) ON DELETE CASCADE;


--
-- Name: bursts bursts_primary_asset_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.bursts
    ADD CONSTRAINT bursts_primary_asset_id_fkey FOREIGN KEY (primary_asset_id) REFERENCES public.media_assets(id) ON DELETE CASCADE;


--
-- Name: bursts bursts_storage_config_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.bursts
    ADD CONSTRAINT bursts_storage_config_id_fkey FOREIGN KEY (storage_config_id) REFERENCES public.storage_configs(id) ON DELETE CASCADE;


--
-- Name: config_watches config_watches_storage_config_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.config_watches
    ADD CONSTRAINT config_watches_storage_config_id_fkey FOREIGN KEY (storage_config_id) REFERENCES public.storage_configs(id) ON DELETE CASCADE;


--
-- Name: failed_files failed_files_storage_config_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.failed_files
    ADD CONSTRAINT failed_files_storage_config_id_fkey FOREIGN KEY (storage_config_id) REFERENCES public.storage_configs(id) ON DELETE CASCADE;


--
-- Name: media_assets fk_media_assets_burst; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.media_assets
    ADD CONSTRAINT fk_media_assets_burst FOREIGN KEY (burst_id) REFERENCES public.bursts(id) ON DELETE SET NULL;


--
-- Name: media_assets media_assets_paired_asset_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.media_assets
    ADD CONSTRAINT media_assets_paired_asset_id_fkey FOREIGN KEY (paired_asset_id) REFERENCES public.media_assets(id) ON DELETE SET NULL;


--
-- Name: media_assets media_assets_storage_config_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.media_assets
    ADD CONSTRAINT media_assets_storage_config_id_fkey FOREIGN KEY (storage_config_id) REFERENCES public.storage_configs(id) ON DELETE CASCADE;


--
-- Name: proxy_files proxy_files_asset_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.proxy_files
    ADD CONSTRAINT proxy_files_asset_id_fkey FOREIGN KEY (asset_id) REFERENCES public.media_assets(id) ON DELETE CASCADE;


--
-- Name: queue_heads queue_heads_storage_config_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.queue_heads
    ADD CONSTRAINT queue_heads_storage_config_id_fkey FOREIGN KEY (storage_config_id) REFERENCES public.storage_configs(id) ON DELETE CASCADE;


--
-- Name: refresh_tokens refresh_tokens_user_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.refresh_tokens
    ADD CONSTRAINT refresh_tokens_user_id_fkey FOREIGN KEY (user_id) REFERENCES public.users(id) ON DELETE CASCADE;


--
-- Name: storage_configs storage_configs_user_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.storage_configs
    ADD CONSTRAINT storage_configs_user_id_fkey FOREIGN KEY (user_id) REFERENCES public.users(id) ON DELETE CASCADE;


--
-- Name: work_items work_items_storage_config_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.work_items
    ADD CONSTRAINT work_items_storage_config_id_fkey FOREIGN KEY (storage_config_id) REFERENCES public.storage_configs(id) ON DELETE CASCADE;


--
-- PostgreSQL database dump complete
--

\unrestrict almanacschema

