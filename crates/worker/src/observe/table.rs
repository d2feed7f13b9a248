//! The one table of the Worker's log events and metrics.
//!
//! `docs/operations.md` lists both; its lists are generated from these tables (`cargo xtask docs`, checked by
//! `cargo xtask docs --check` and the tidy test in `xtask/tests/tidy.rs`, which also checks that every event the
//! crates emit and every metric they record is here, and nothing else). The observe layer reads the table too:
//! the events kept for the operator's page are those marked `page`, and the HELP text of every family is
//! `help`. This file uses nothing outside `std`, so xtask includes it as it is (`#[path]`) to write the docs.

/// A named log event: the value of its `event` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// The `event` field's value.
    pub name: &'static str,
    /// Kept for the operator's page (the latest outage events of this process).
    pub page: bool,
    /// What it means, for operations.md (Markdown).
    #[allow(dead_code, reason = "read by `cargo xtask docs`")]
    pub meaning: &'static str,
}

const fn event(name: &'static str, meaning: &'static str) -> Event {
    Event { name, page: false, meaning }
}

const fn outage(name: &'static str, meaning: &'static str) -> Event {
    Event { name, page: true, meaning }
}

/// Every named log event, in the order of an attempt's life, then the loops, the handlers and the process.
pub const EVENTS: &[Event] = &[
    event("claimed", "an attempt started"),
    event(
        "lost_race",
        "a writer that bypasses the claim (a hand-written update, a tool) set an item of the same config running \
first; nothing was claimed, and this Worker claims again at its next poll",
    ),
    event(
        "claim_handed_back",
        "a claim its caller gave up on before its answer (a claim timed out) had taken items; they were queued \
again at once (`items`), as a release leaves them",
    ),
    event(
        "claim_hand_back_failed",
        "a claim given up on could not be handed back (`error`: the database refused it or went away, no \
runtime was left to run it, or the Worker stopped first); whatever it took runs again when its lease ends",
    ),
    event("no_handler", "an item of a kind this Worker has no handler for was claimed (a bug); its lease will expire"),
    outage("heartbeat_failed", "a heartbeat failed or did not answer within one interval"),
    outage(
        "self_stopped",
        "no successful heartbeat for half a lease: the handler was cancelled and nothing more is written \
         (with `since_last_good_beat_ms`)",
    ),
    outage(
        "lost",
        "the item is no longer held by this attempt (recovered, finished, re-claimed): nothing more is written",
    ),
    event(
        "stopped_handler_returned",
        "the handler of a lost or self-stopped attempt has returned, `after_stop_ms` after the stop \
         (nothing was written)",
    ),
    event("cancel_requested", "a cancel was requested for a running item; its handler is told"),
    event(
        "cancelled",
        "a cancel was honoured (also when the handler then failed: a cancelled item is never retried); an outcome",
    ),
    event("succeeded", "an outcome: the handler succeeded (with `kind`, `duration_ms`)"),
    event("retry_scheduled", "an outcome: the handler failed and the item is queued again after its backoff"),
    event("failed", "an outcome: the handler failed for good (not retryable, or out of attempts)"),
    event(
        "released",
        "handed back to the queue: on shutdown, or an item claimed that no attempt ran (no failure, no stall)",
    ),
    outage(
        "released_after_outage",
        "the handler lost the database (a killed backend, a dropped connection): released to the queue one \
         heartbeat interval later, no failure counted",
    ),
    outage(
        "catalogue_retry",
        "a crawl tries a file again because the catalogue was unavailable during it (with `retry_in_ms`)",
    ),
    outage(
        "completion_retry",
        "a batch of completions lost its connection and is written again on a fresh one (with `items`, \
         `retry_in_ms`)",
    ),
    event(
        "chained_claim_gave_up",
        "(debug) the claim made with a completion claimed nothing (a lock it would have waited for, or an error); \
         the next poll claims",
    ),
    event(
        "heads_vacuum_refused",
        "this Worker's database role may not vacuum `queue_heads` (it owns neither the table nor the database), so \
         the Worker stops vacuuming it and autovacuum alone keeps it; said once. Under many claims a second the \
         claim slows between autovacuums: make the role the table's owner",
    ),
    event(
        "heads_vacuum_failed",
        "a vacuum of `queue_heads` the store runs as it claims failed (`error`: the database gone, a standby, a \
         timeout); the store tries again after its next claims. The first failure of a process is logged at info, \
         later ones at debug",
    ),
    outage(
        "outcome_unwritten",
        "the outcome could not be confirmed (database down, or no answer in time); unless it committed all the same, \
         lease recovery will requeue the item",
    ),
    event("release_failed", "an item claimed but never run could not be handed back; lease recovery will requeue it"),
    outage("lease_recovered", "this Worker requeued (or failed as stalled) an item whose lease expired"),
    outage("claim_failed", "the claim loop could not reach the database; it tries again"),
    outage("recovery_failed", "lease recovery could not reach the database; it tries again"),
    event("schedule_failed", "the scheduler could not reach the database; it tries again"),
    event("scheduled", "the scheduler enqueued periodic work (one per item, with its dedup `key`)"),
    event(
        "quiet_hours_began",
        "quiet hours began: no scheduled work starts `until` they end; `held` items queued wait",
    ),
    event(
        "scheduled_work_held",
        "in quiet hours, scheduled items queued since (retries) wait `until` their end: `held`",
    ),
    event("quiet_hours_ended", "quiet hours ended: scheduled work is enqueued and runs again"),
    event("cancelled_inactive", "(debug) the scheduler cancelled work enqueued for configs since deactivated"),
    event("watch_started", "this Worker took a config's watch and watches its root (with `mode`: events or polling)"),
    event(
        "watch_enqueued",
        "changes a watcher saw became a crawl (`item`) of the changed `folders` (0: the whole root), with the files it \
         saw `closed` after writing; `joined` when a crawl of the whole root was already queued",
    ),
    event(
        "watch_closed_files_settle",
        "a watched library is exported over NFS by this machine (`export`), whose server closes a file while its \
         writer pauses: files seen closed wait for the settle time like any other",
    ),
    event(
        "watch_leases_refused",
        "(once per watcher) the Worker may not ask the kernel whether a file is still being written: it does not own \
         the library's files and lacks CAP_LEASE; files moved into the library wait for the settle time",
    ),
    event(
        "watch_remounted",
        "a file system was mounted or unmounted on, above or beneath a watched root (`mount`), or unmounted and \
         mounted again between two looks (which removes the watches on it): the config's watcher starts again, its \
         mode decided anew (a share mounted over the root is polled, not watched)",
    ),
    event(
        "watch_sentinel_refused",
        "the kernel refused the inotify instance that hears watched file systems unmounted (`error`; \
         fs.inotify.max_user_instances): a disk unmounted and mounted again between two looks goes unseen until \
         the next whole crawl",
    ),
    event(
        "watch_fell_back_to_polling",
        "a config's change events can no longer be trusted (the kernel's queue overflowed, the watch limit was \
         reached, the root cannot be watched: `reason`): the config is polled from now on and crawled whole",
    ),
    event(
        "watch_enqueue_failed",
        "the changes a watcher saw could not be enqueued (once per outage); they are kept and tried again",
    ),
    event("watch_lost", "a config's watch is held by another Worker now, or could not be renewed: its watcher stopped"),
    event(
        "watch_failed",
        "the watches could not be taken, renewed or given up (the database): tried again; or a config's polling \
         pass ended abnormally (`config`): watched again when its watch is taken again",
    ),
    outage(
        "listener_disconnected",
        "the LISTEN connection for enqueue wake-ups was lost or cannot be made; polling covers the gap, it \
         reconnects with backoff",
    ),
    event("listener_connected", "(debug) listening for enqueued work"),
    event(
        "polling_only",
        "at start: `database.pooler_mode` is `transaction` and no `database.listen_url` is set, so the Worker does \
         not listen for enqueued work (a LISTEN through the pooler would never hear it) and finds new work at its \
         next poll (`queue.poll_interval`)",
    ),
    event("crawl_finished", "a crawl's result (files found, ingested, failed, settling; bytes hashed)"),
    event(
        "file_failed",
        "a file that could not be ingested (with the reason); the crawl goes on. One that failed for its content is \
         logged once: later crawls report it failed without reading it while it is unchanged",
    ),
    event(
        "confirmation_not_carried_over",
        "a crawl confirmed with `allow_mass_deletion` runs again (`attempt` 2 or later, after a retry, an outage or a \
         shutdown): the confirmation held for its first attempt only, and this one is guarded as if unconfirmed",
    ),
    event(
        "soft_delete_skipped",
        "folders that could not be read (`unreadable`: how many), so nothing under them was soft-deleted",
    ),
    event(
        "proxy_root_inside_library",
        "the crawl passed over a folder that is the proxy root mounted inside the library",
    ),
    event(
        "folder_loop_passed_over",
        "the crawl passed over a folder that is one of the folders above it again (a bind mount of a parent, a loop \
         of the file system), which it would otherwise walk without end",
    ),
    event("bursts_detected", "burst detection's result"),
    event("purged", "purge's result"),
    event(
        "purge_held",
        "a purge deleted nothing because a crawl of its config is failing (`crawl`, `retrying`, `error`): its \
         soft-deleted assets are not known to be gone for good until a crawl reads the library again",
    ),
    event(
        "purge_incomplete",
        "some proxy files could not be deleted; their assets stay soft-deleted and are tried again next time",
    ),
    event("proxies_deleted", "proxy deletion's result"),
    event("proxies_swept", "the proxy sweep's result"),
    event(
        "proxy_volume_keeps_no_modes",
        "once a run: the proxy volume shows a folder the Worker made for itself alone as one others may write \
         (`folder`, `mode`): it keeps no modes (NTFS, CIFS with dir_mode=0777 or noperm, FAT with umask=000, modes \
         from a NAS's ACLs), so anyone who may write it could place a link where the Worker's tools write. Mount it \
         so that folders are not writable by others",
    ),
    event(
        "proxy_root_not_ours",
        "the sweep left alone files under the proxy root that are not in the proxy layout (count and examples)",
    ),
    event(
        "proxies_found_broken",
        "the sweep found proxy files of a config's active assets missing, cut short or replaced (`config`, `assets`) \
         and queued a `proxy_deletion` of those assets and a crawl behind it, which make them again",
    ),
    event(
        "proxy_root_looks_emptied",
        "the sweep found more of a config's proxy files missing than `storage.mass_deletion_*` allows (more than \
         half of 10 or more by default; `config`, `checked`, `missing`), or the proxy root changed, lost folders \
         or lost files it had found whole during the sweep: the proxy root looks unmounted or emptied, so nothing \
         was queued for that config. Mount the proxy volume; if the files really are gone, `almanac-worker \
         regenerate --config …`",
    ),
    event("tokens_deleted", "token clean-up's result"),
    event("work_items_deleted", "retention's result: finished items deleted"),
    event(
        "temporary_debris_removed",
        "at start, temporary files that a Worker killed while writing proxies left under the proxy root were \
         removed (count; only ours, older than the sweep's age floor)",
    ),
    event(
        "temporary_debris_not_removed",
        "at start, temporary files under the proxy root could not all be looked for or removed (why; the sweep \
         tries again)",
    ),
    event(
        "token_checks_paused",
        "wrong tokens in a row on the operator's page from one address (`peer`): no token from it is looked at \
         for a while (see \"The operator's page\")",
    ),
    outage(
        "database_unavailable",
        "at start, the database does not answer yet (with `attempt`); `run` tries five times over about eight \
         seconds",
    ),
    event("migrated", "`run --migrate` applied pending migrations (with `applied`)"),
    event(
        "worker_starting",
        "the settings are read and the database answers (with the masked `database` URL, `tls`, what is served, \
         `connections`, the most this Worker opens: see \"Sizing\", the `settings_file` read, and the \
         `environment` variables that set a value, marked where they replace the file's)",
    ),
    event("http_listening", "the HTTP server (page, probes, metrics) listens (with `address`)"),
    event("http_failed", "the HTTP server stopped with an error; the Worker goes on"),
    event("worker_started", "the executor runs"),
    event(
        "running_as_root",
        "the Worker runs as root (`proxy_root`): the proxy folders it makes belong to root, and a Worker run later as \
         the service's user cannot write them; run it as that user",
    ),
    event(
        "root_not_answering",
        "at start, a storage config's root did not answer in time (`ROOT_ANSWERS_WITHIN`; a share whose server \
         stopped answering, a NAS turned off): the Worker starts without waiting for it; that config's crawls look \
         again whether it overlaps the proxy root before reading anything, each look waiting \
         `storage.root_answer_limit` at most",
    ),
    event("signal", "SIGTERM or SIGINT arrived (with `signal`)"),
    outage(
        "schema_check_failed",
        "a running Worker could not read the database's migrations (with `error`); said once until a read succeeds",
    ),
    event(
        "schema_newer_than_this_worker",
        "a newer Worker migrated the database while this one ran (with the `unknown` migrations and the \
         `newest_known`): this Worker is no longer ready, claims nothing more, releases its running items and exits 2",
    ),
    event("shutdown_started", "no more claims; running handlers get `queue.shutdown_grace`"),
    event("shutdown_grace_over", "the shutdown grace is over: a handler still running is cancelled and released"),
    event("worker_stopped", "the executor has ended"),
    outage(
        "unclean_shutdown",
        "some items could not be released at shutdown (exit 4); lease recovery will requeue them",
    ),
];

/// What a metric family is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    /// A counter.
    Counter,
    /// A gauge.
    Gauge,
    /// A histogram.
    Histogram,
}

/// The unit of a family, where it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricUnit {
    /// A number of things.
    Count,
    /// Seconds.
    Seconds,
    /// Bytes.
    Bytes,
}

/// Who records a family (and describes it to the recorder).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// The binary (`observe.rs`, `http.rs`).
    Worker,
    /// `almanac_executor::metrics`.
    Executor,
    /// Read from the store at each scrape and written as text beside the recorder's
    /// (`observe::render_watch_states`): a series whose config is gone is gone too.
    Scrape,
}

/// One metric family of ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    /// Its name.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricType,
    /// Its unit.
    pub unit: MetricUnit,
    /// Its labels.
    #[allow(dead_code, reason = "read by `cargo xtask docs`")]
    pub labels: &'static [&'static str],
    /// Who records it.
    pub owner: Owner,
    /// Its HELP text, and its meaning in operations.md.
    pub help: &'static str,
}

/// Counter: log events by their `event` field.
pub const EVENTS_TOTAL: &str = "almanac_events_total";
/// Histogram: seconds from claim to outcome, by kind and outcome.
pub const ITEM_SECONDS: &str = "almanac_item_duration_seconds";
/// Counter: files of finished crawls, by what became of them.
pub const CRAWL_FILES: &str = "almanac_crawl_files_total";
/// Counter: bytes hashed by finished crawls.
pub const CRAWL_BYTES: &str = "almanac_crawl_hashed_bytes_total";
/// Gauge: work items by kind and status.
pub const WORK_ITEMS: &str = "almanac_work_items";
/// Gauge: whether the database answered the scrape.
pub const DATABASE_UP: &str = "almanac_database_up";
/// Gauge: each config's watch mode (1 for the current one), by config and mode.
pub const WATCH_MODE: &str = "almanac_watch_mode";
/// Gauge: files a config's watcher saw changing and has not yet handed to a crawl, by config.
pub const WATCH_PENDING_FILES: &str = "almanac_watch_pending_files";

/// Every metric family of ours (the process collector's are listed in operations.md by hand: they are
/// `metrics-process`'s).
pub const METRICS: &[Metric] = &[
    Metric {
        name: EVENTS_TOTAL,
        kind: MetricType::Counter,
        unit: MetricUnit::Count,
        labels: &["event"],
        owner: Owner::Worker,
        help: "Worker events by name (claims, lost races, heartbeat failures, self-stops, recoveries, outcomes), \
               counted whatever the log level.",
    },
    Metric {
        name: ITEM_SECONDS,
        kind: MetricType::Histogram,
        unit: MetricUnit::Seconds,
        labels: &["kind", "outcome"],
        owner: Owner::Worker,
        help: "Time from claim to outcome, by kind and outcome.",
    },
    Metric {
        name: "almanac_claim_duration_seconds",
        kind: MetricType::Histogram,
        unit: MetricUnit::Seconds,
        labels: &["outcome"],
        owner: Owner::Executor,
        help: "Time from sending a claim to its answer, by outcome (claimed, empty, error, timeout).",
    },
    Metric {
        name: "almanac_heartbeat_duration_seconds",
        kind: MetricType::Histogram,
        unit: MetricUnit::Seconds,
        labels: &["outcome"],
        owner: Owner::Executor,
        help: "Time from sending a heartbeat to its answer, by outcome (renewed, lost, error, timeout).",
    },
    Metric {
        name: CRAWL_FILES,
        kind: MetricType::Counter,
        unit: MetricUnit::Count,
        labels: &["outcome"],
        owner: Owner::Worker,
        help: "Files of finished crawls, by outcome (found, ingested, failed, settling: still being written, left \
               for a crawl later).",
    },
    Metric {
        name: CRAWL_BYTES,
        kind: MetricType::Counter,
        unit: MetricUnit::Bytes,
        labels: &[],
        owner: Owner::Worker,
        help: "Bytes hashed by finished crawls.",
    },
    Metric {
        name: WORK_ITEMS,
        kind: MetricType::Gauge,
        unit: MetricUnit::Count,
        labels: &["kind", "status"],
        owner: Owner::Worker,
        help: "Work items in the queue by kind and status, as of the scrape.",
    },
    Metric {
        name: DATABASE_UP,
        kind: MetricType::Gauge,
        unit: MetricUnit::Count,
        labels: &[],
        owner: Owner::Worker,
        help: "1 when the database answered the scrape, 0 when it did not.",
    },
    Metric {
        name: WATCH_MODE,
        kind: MetricType::Gauge,
        unit: MetricUnit::Count,
        labels: &["config", "mode"],
        owner: Owner::Scrape,
        help: "How each config's root is watched, as of the scrape: 1 for its current mode (events, polling, or \
               off when no Worker watches it), 0 for the others.",
    },
    Metric {
        name: WATCH_PENDING_FILES,
        kind: MetricType::Gauge,
        unit: MetricUnit::Count,
        labels: &["config"],
        owner: Owner::Scrape,
        help: "Files the watcher of each config saw changing and has not yet handed to a crawl, as of its last \
               report (0 when no Worker watches it).",
    },
];

/// The event of this name, if it is one.
pub fn event_named(name: &str) -> Option<&'static Event> {
    EVENTS.iter().find(|e| e.name == name)
}
