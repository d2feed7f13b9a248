//! `almanac-worker run`: wire the store, the executor, the handlers, the listener and the HTTP endpoints, each
//! step a function of its own, in the order `run` reads.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use almanac_domain::ports::ServedConfigs;
use almanac_executor::{Executor, ExecutorConfig, HandlerRegistry};
use almanac_handlers::{
    BurstDetectionHandler, BurstSettings, CrawlHandler, CrawlSettings, ProxyDeletionHandler, ProxySweepHandler,
    PurgeHandler, PurgeSettings, RetentionSettings, Scheduler, TokenCleanupHandler, Watching, WorkItemRetentionHandler,
};
use almanac_store_pg::{PgStore, PoolerMode, SchemaState, StoreError, WorkerConnections, listen_for_work};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::{Exit, Failure, refuse_newer_schema};
use crate::http::{self, Health};
use crate::observe::{self, Recent};
use crate::ops::roots;
use crate::page::{self, Page, Samples, auth::Auth};
use crate::settings::{Settings, mask_password};

/// How often, and how long, `run` tries to reach the database before giving up.
const CONNECT_ATTEMPTS: u32 = 5;

/// Connections of the pool of the probes, the metrics and the schema's watch: a flood of scrapes cannot take the
/// Worker's, nor a busy crawl theirs.
pub(crate) const PROBE_CONNECTIONS: usize = 2;
/// Connections of the operator page's pool: open tabs cannot take the probes'.
pub(crate) const PAGE_CONNECTIONS: usize = 2;
/// The connection that listens for wake-ups.
pub(crate) const LISTENER_CONNECTIONS: usize = 1;

/// The pools of a fixed size a Worker opens beside the shared and the reserved ones, by the name
/// docs/operations.md's "Sizing" table gives them (checked against it).
pub(crate) const FIXED_POOLS: [(&str, usize); 3] =
    [("probes", PROBE_CONNECTIONS), ("page", PAGE_CONNECTIONS), ("listener", LISTENER_CONNECTIONS)];

/// The most connections a Worker with these settings opens (docs/operations.md, "Sizing", checked against it).
pub(crate) fn most_connections(settings: &Settings) -> usize {
    let fixed: usize = FIXED_POOLS.iter().map(|(_, connections)| connections).sum();
    settings.database.max_connections + ExecutorConfig::reserved_connections(settings.worker.slots) + fixed
}

/// How long a stopping Worker waits for the hand-backs of claims it gave up on (each waits for its claim).
const HAND_BACKS_WAIT: Duration = Duration::from_secs(5);

/// Runs the Worker until SIGTERM or Ctrl-C.
pub async fn run(settings: Settings, migrate: bool) -> Result<Exit, Failure> {
    let recent = observe::init(&settings.log).map_err(Failure::failed)?;
    // Before any original is read or tool started: both run at this priority (ADR 0013).
    almanac_media::set_priority(settings.priority().map_err(Failure::failed)?);
    let metrics = observe::install_metrics().map_err(Failure::failed)?;
    let url = settings.database_url().map_err(Failure::failed)?.to_owned();
    prepare_schema(&url, migrate).await?;
    let store = worker_store(&settings, &url)?;
    let served = served_configs(&settings, &url, &store).await?;
    let executor_config = settings.executor(served).map_err(Failure::failed)?;
    let proxy_root = proxy_root(&settings, &url, &store).await?;
    let store = Arc::new(store);
    let registry = handlers(&settings, &store, &proxy_root, served);
    let executor = Executor::new(store.clone(), registry, executor_config).map_err(Failure::failed)?;

    let stop = CancellationToken::new();
    // What a Worker killed mid-write left under the proxy root, in the background (it walks the whole root).
    let debris = almanac_handlers::maintenance::remove_temporary_debris;
    tokio::spawn(debris(store.clone(), proxy_root.clone(), settings.tool_limits(), stop.clone()));
    let running = Arc::new(AtomicBool::new(true));
    let listener = wake_ups(&settings, &url, executor.waker(), &stop);
    // The Worker's own checks of the database (probes, metrics, the schema's) have a small pool of their own: a
    // flood of scrapes cannot take the Worker's connections, nor a busy crawl theirs.
    let (timeout, lease, mode) = (settings.database.connect_timeout, settings.queue.lease, settings.pooler_mode());
    let probes = PgStore::in_mode(&url, PROBE_CONNECTIONS, timeout, lease, mode)?;
    let http = serve_http(&settings, &url, probes.clone(), recent, &metrics, &running, &stop).await?;
    let upkeep = tokio::spawn(metrics_upkeep(metrics, stop.clone()));
    let schedule = settings.schedule_settings().map_err(Failure::failed)?;
    let scheduling = tokio::spawn(Scheduler::new(store.clone(), served, schedule).run(stop.clone()));
    // One watcher per config across Workers (ADR 0014): this Worker's, for the watches it holds.
    let (worker_id, watch) = (settings.worker_id(), settings.watch_settings());
    let watch =
        Watching::new(store.clone(), worker_id.map_err(Failure::failed)?, served, watch.map_err(Failure::failed)?)
            .avoiding(&proxy_root);
    let watching = tokio::spawn(watch.run(stop.clone()));
    let shutdown = CancellationToken::new();
    tokio::spawn(signals(shutdown.clone()));
    let schema = tokio::spawn(watch_schema(probes, running.clone(), shutdown.clone(), stop.clone()));
    let tls = tls(&store).await;
    let pooler_mode = settings.pooler_mode();
    let settings_file = settings.origin.file.as_deref().map(|f| f.display().to_string());
    info!(event = "worker_starting", database = %mask_password(&url), pooler_mode = %pooler_mode, tls = %tls,
          served = ?served, connections = most_connections(&settings),
          settings_file = settings_file.as_deref().unwrap_or("none"),
          environment = %settings.origin.environment_summary(), "starting");

    let report = executor.run(shutdown).await;
    // Claims given up on (timed out) are handed back by tasks of the store's: they finish before the process ends.
    store.hand_backs_settled(HAND_BACKS_WAIT).await;
    running.store(false, Ordering::Relaxed);
    stop.cancel();
    if let Some(listener) = listener {
        let _ = listener.await;
    }
    let _ = scheduling.await;
    let _ = watching.await;
    let _ = upkeep.await;
    let newer_schema = schema.await.ok().flatten();
    if let Some(h) = http {
        // Open connections get a moment to finish (the live streams end with `stop`); then the server goes.
        let _ = tokio::time::timeout(Duration::from_secs(5), h).await;
    }
    ended(&report, newer_schema)
}

/// How `run` ends: exit 2 when a newer Worker migrated the database meanwhile, whatever the release did
/// (restarted, this binary would only refuse the schema at start); else 0, or 4 when not every running item was
/// released.
fn ended(report: &almanac_executor::ShutdownReport, newer_schema: Option<SchemaState>) -> Result<Exit, Failure> {
    if !report.is_clean() {
        error!(
            event = "unclean_shutdown",
            unwritten = report.unwritten.len(),
            "could not release every running item; lease recovery will requeue them"
        );
    }
    match newer_schema {
        Some(schema) => refuse_newer_schema(&schema).map(|()| Exit::Success).map_err(|refused| {
            let items = if report.is_clean() {
                "its running items were released"
            } else {
                "some of its running items could not be released: lease recovery requeues them"
            };
            refused.context(format!("this Worker stopped: the database was migrated while it ran, and {items}"))
        }),
        None if report.is_clean() => Ok(Exit::Success),
        None => Ok(Exit::Unclean),
    }
}

/// How often a running Worker reads which migrations the database has: a newer Worker that migrates the database
/// stops this one within about this long (docs/operations.md, "Upgrading").
pub(crate) const SCHEMA_CHECK_EVERY: Duration = Duration::from_secs(10);

/// Reads the database's migrations every [`SCHEMA_CHECK_EVERY`] until `stop`. One this build does not know (a
/// newer Worker migrated the database while this one ran) makes this Worker not ready and starts its shutdown: it
/// claims nothing more, its running items get the shutdown's grace and are released, and it exits 2, as it would
/// refuse the schema at start (the package's unit does not restart it after exit 2). A read that fails is tried at
/// the next turn, and said once until one succeeds again.
async fn watch_schema(
    store: PgStore,
    running: Arc<AtomicBool>,
    shutdown: CancellationToken,
    stop: CancellationToken,
) -> Option<SchemaState> {
    let mut every = tokio::time::interval(SCHEMA_CHECK_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await; // at once: the schema was read at start
    let mut failing = false;
    loop {
        tokio::select! {
            () = stop.cancelled() => return None,
            _ = every.tick() => {}
        }
        let schema = match store.schema_state().await {
            Ok(schema) => schema,
            Err(e) => {
                if !failing {
                    warn!(
                        event = "schema_check_failed",
                        error = %e,
                        "could not read the database's migrations; tried again every {} s until it answers",
                        SCHEMA_CHECK_EVERY.as_secs()
                    );
                }
                failing = true;
                continue;
            }
        };
        failing = false;
        if schema.unknown.is_empty() {
            continue;
        }
        running.store(false, Ordering::Relaxed);
        error!(
            event = "schema_newer_than_this_worker",
            unknown = ?schema.unknown,
            newest_known = %schema.newest_known,
            "a newer almanac-worker migrated the database while this one ran: this Worker claims nothing more, \
             releases its running items and exits 2. Run the newer version here too"
        );
        shutdown.cancel();
        return Some(schema);
    }
}

/// Refuses a schema newer than this build, and applies pending migrations when `migrate` (refusing to start
/// without it).
async fn prepare_schema(url: &str, migrate: bool) -> Result<(), Failure> {
    let schema = schema_state(url).await?;
    refuse_newer_schema(&schema)?;
    let pending = schema.pending;
    if pending.is_empty() {
        return Ok(());
    }
    if !migrate {
        return Err(Failure::usage(format!(
            "{} migration(s) pending ({}): run `almanac-worker migrate`, or start with --migrate",
            pending.len(),
            pending.join(", ")
        )));
    }
    let applied = almanac_store_pg::migrate(url).await?;
    info!(event = "migrated", applied = ?applied, "applied pending migrations");
    // A newer Worker may have migrated further meanwhile (it took the lock first): look again.
    refuse_newer_schema(&schema_state(url).await?)
}

/// Where the schema stands, trying a few times with backoff while the database is starting.
async fn schema_state(url: &str) -> Result<SchemaState, Failure> {
    patiently(url, || almanac_store_pg::schema_state(url)).await
}

/// `read`, tried again with backoff while the database is unavailable (starting, or restarting while the Worker
/// starts): `run` gives up only after [`CONNECT_ATTEMPTS`] tries. A setting to fix is said at once.
async fn patiently<T, F, Fut>(url: &str, mut read: F) -> Result<T, Failure>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let mut delay = Duration::from_millis(500);
    for attempt in 1..=CONNECT_ATTEMPTS {
        match read().await {
            Ok(answer) => return Ok(answer),
            Err(StoreError::Unavailable(e)) if attempt < CONNECT_ATTEMPTS => {
                warn!(event = "database_unavailable", attempt, error = %e, "the database does not answer yet");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            Err(e @ StoreError::Config(_)) => {
                return Err(Failure::from(e).context(format!("database.url ({})", mask_password(url))));
            }
            Err(e) => {
                return Err(Failure::from(e).context(format!(
                    "cannot reach the database at {} after {attempt} attempt(s)",
                    mask_password(url)
                )));
            }
        }
    }
    unreachable!("the last attempt returns")
}

/// The Worker's store. Heartbeats and outcomes have connections of their own (one per slot, one to spare):
/// nothing else can take them, so no crawl or probe can delay a beat into a self-stop.
fn worker_store(settings: &Settings, url: &str) -> Result<PgStore, Failure> {
    let connections = WorkerConnections {
        shared: settings.database.max_connections,
        reserved: ExecutorConfig::reserved_connections(settings.worker.slots),
        acquire_timeout: settings.database.connect_timeout,
        lease: settings.queue.lease,
    };
    Ok(PgStore::for_worker_in_mode(url, connections, settings.pooler_mode())?)
}

/// Wakes the executor when work is enqueued: LISTEN on `database.listen_url` (a direct connection), else on the
/// database's own URL, except through a pooler in transaction mode, where a LISTEN would hold a server session
/// the pooler hands to others and never hear a notification: then the Worker polls only, and says so once.
fn wake_ups(
    settings: &Settings,
    url: &str,
    wake: Arc<tokio::sync::Notify>,
    stop: &CancellationToken,
) -> Option<JoinHandle<()>> {
    let listen_on = match (&settings.database.listen_url, settings.pooler_mode()) {
        (Some(direct), _) => direct.clone(),
        (None, PoolerMode::Session) => url.to_owned(),
        (None, PoolerMode::Transaction) => {
            warn!(
                event = "polling_only",
                poll_interval_ms = settings.queue.poll_interval.as_millis() as u64,
                "database.pooler_mode is transaction and no database.listen_url is set: not listening for enqueued \
                 work (a LISTEN through the pooler would never hear it); new work is found at the next poll. Set \
                 database.listen_url to a direct connection to PostgreSQL to be woken at once"
            );
            return None;
        }
    };
    Some(tokio::spawn(listen_for_work(listen_on, wake, stop.clone())))
}

/// Whose configs this Worker serves (`worker.user`, or all).
async fn served_configs(settings: &Settings, url: &str, store: &PgStore) -> Result<ServedConfigs, Failure> {
    let Some(name) = &settings.worker.user else { return Ok(ServedConfigs::All) };
    match patiently(url, || store.user_by_name(name)).await? {
        Some(user) => Ok(ServedConfigs::User(user.id)),
        None => Err(Failure::failed(anyhow::anyhow!(
            "worker.user: there is no user {name:?}; `almanac-worker config add --user {name} --root …` creates one"
        ))),
    }
}

/// The proxy root, resolved and created. It never overlaps a library (the sweep would delete originals, the
/// crawl ingest proxies), and must take files (not writable by this user, read-only or full, it would fail
/// every crawl): refused otherwise.
async fn proxy_root(settings: &Settings, url: &str, store: &PgStore) -> Result<PathBuf, Failure> {
    let configs = patiently(url, || store.list_storage_configs()).await?;
    let not_started = |refusal: roots::Refusal| match refusal {
        roots::Refusal::Rule(why) => Failure::usage(why),
        // Exit 1, not 2: a service manager starts the Worker again (the packaged unit does), and it runs once the
        // share answers.
        roots::Refusal::NoAnswer(why) => {
            Failure::failed(anyhow::anyhow!("{why}: no crawl could write proxies. Start the Worker once it answers"))
        }
    };
    let (proxy_root, unanswered) =
        roots::prepare_proxy_root(&settings.storage.proxy_root, &configs).map_err(not_started)?;
    for said in unanswered {
        tracing::warn!(event = "root_not_answering", "{said}; its crawls look again before reading anything");
    }
    let checked = proxy_root.clone();
    roots::answered_in_time(roots::ROOT_ANSWERS_WITHIN, move || almanac_media::check_proxy_root(&checked))
        .ok_or_else(|| not_started(roots::proxy_root_no_answer(&proxy_root)))?
        .map_err(|e| Failure::usage(format!("{e}. Fix it, then start the Worker again")))?;
    if almanac_media::effective_user() == 0 {
        tracing::warn!(
            event = "running_as_root",
            proxy_root = %proxy_root.display(),
            "this Worker runs as root: the proxy folders it makes belong to root, and a Worker run later as the \
             service's user cannot write them (its crawls of those configs then stop, naming the folder). Run the \
             Worker as the service's user (the package's systemd unit runs it as almanac)"
        );
    }
    Ok(proxy_root)
}

/// A handler for every kind, with its settings.
fn handlers(settings: &Settings, store: &Arc<PgStore>, proxy_root: &Path, served: ServedConfigs) -> HandlerRegistry {
    let mut crawl = CrawlSettings::new(proxy_root.to_path_buf());
    crawl.max_concurrent_files = settings.worker.max_concurrent_files;
    crawl.mass_deletion = settings.mass_deletion();
    crawl.max_image_pixels = settings.max_image_pixels();
    crawl.settle_time = settings.storage.settle_time;
    crawl.root_answer_limit = settings.storage.root_answer_limit;
    crawl.tool_limits = settings.tool_limits();
    let purge = PurgeSettings::new(proxy_root.to_path_buf(), settings.schedule.purge_after);
    let sweep_min_age = ProxySweepHandler::<PgStore>::min_age_for(settings.tool_limits());
    let token_grace = TokenCleanupHandler::<PgStore>::DEFAULT_GRACE;
    HandlerRegistry::new()
        .register(CrawlHandler::new(store.clone(), crawl))
        .register(BurstDetectionHandler::new(store.clone(), BurstSettings::default()))
        .register(PurgeHandler::new(store.clone(), purge))
        .register(ProxyDeletionHandler::new(store.clone(), proxy_root.to_path_buf()))
        .register(
            ProxySweepHandler::new(store.clone(), proxy_root.to_path_buf(), sweep_min_age)
                .serving(served)
                .guarded_by(settings.mass_deletion()),
        )
        .register(TokenCleanupHandler::new(store.clone(), token_grace))
        .register(WorkItemRetentionHandler::new(store.clone(), RetentionSettings::default()))
}

/// The HTTP server (probes, metrics, the operator's page) when `http.enabled`, serving until `stop`.
async fn serve_http(
    settings: &Settings,
    url: &str,
    probes: PgStore,
    recent: Recent,
    metrics: &PrometheusHandle,
    running: &Arc<AtomicBool>,
    stop: &CancellationToken,
) -> Result<Option<JoinHandle<()>>, Failure> {
    if !settings.http.enabled {
        return Ok(None);
    }
    let bound = http::bind(settings.http.address).await.map_err(Failure::failed)?;
    info!(event = "http_listening", address = %settings.http.address, "serving the operator's page at /, and /healthz, /readyz and /metrics");
    let (timeout, lease, mode) = (settings.database.connect_timeout, settings.queue.lease, settings.pooler_mode());
    let process = Arc::new(metrics_process::Collector::default());
    process.describe();
    // The page has connections of its own: open tabs cannot take the probes'.
    let page = Arc::new(Page {
        store: PgStore::in_mode(url, PAGE_CONNECTIONS, timeout, lease, mode)?,
        auth: Auth::new(settings.http.token.clone()),
        recent,
        samples: Samples::default(),
        worker_id: settings.worker_id().map_err(Failure::failed)?.to_string(),
        allowed_hosts: settings.http.allowed_hosts.clone(),
        stop: stop.clone(),
    });
    tokio::spawn(page::sample(page.clone(), stop.clone()));
    let health = Health { store: probes, metrics: metrics.clone(), process, running: running.clone(), page };
    Ok(Some(tokio::spawn(http::serve(bound, health, stop.clone()))))
}

/// Histogram samples are drained into their buckets here as well as at each scrape: memory stays bounded when
/// nothing scrapes. Not mutated (ADR 0005): nothing but memory over hours tells it from doing nothing.
#[mutants::skip]
async fn metrics_upkeep(metrics: PrometheusHandle, stop: CancellationToken) {
    let mut every = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = every.tick() => metrics.run_upkeep(),
        }
    }
}

/// The TLS in use on the store's connections, in words for the start-up log.
async fn tls(store: &PgStore) -> String {
    match store.tls_in_use().await {
        Ok(Some(described)) => described,
        Ok(None) => "none".to_owned(),
        Err(e) => format!("unknown ({e})"),
    }
}

/// Cancels `shutdown` at SIGTERM or Ctrl-C.
async fn signals(shutdown: CancellationToken) {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            error!(error = %e, "cannot listen for SIGTERM");
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => info!(event = "signal", signal = "SIGTERM", "shutting down"),
        _ = tokio::signal::ctrl_c() => info!(event = "signal", signal = "SIGINT", "shutting down"),
    }
    shutdown.cancel();
}

#[cfg(test)]
mod tests;
