//! `almanac-worker run`: wire the store, the executor, the handlers, the listener and the HTTP endpoints.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use almanac_domain::ServedConfigs;
use almanac_executor::{Executor, HandlerRegistry};
use almanac_handlers::{
    BurstDetectionHandler, BurstSettings, CrawlHandler, CrawlSettings, ProxyDeletionHandler, ProxySweepHandler,
    PurgeHandler, PurgeSettings, RetentionSettings, ScheduleSettings, Scheduler, TokenCleanupHandler,
    WorkItemRetentionHandler,
};
use almanac_media::ToolLimits;
use almanac_store_pg::{PgStore, StoreError, WorkerConnections, listen_for_work};
use anyhow::{Context, Result, bail};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::http::{self, Health};
use crate::observe;
use crate::page::{self, Page, Samples, auth::Auth};
use crate::roots;
use crate::settings::{Settings, mask_password};

/// How often, and how long, `run` tries to reach the database before giving up.
const CONNECT_ATTEMPTS: u32 = 5;

pub async fn run(settings: Settings, migrate: bool) -> Result<ExitCode> {
    let recent = observe::init(&settings.log)?;
    let metrics = observe::install_metrics()?;
    let url = settings.database_url()?.to_owned();
    let schema = schema_state(&url).await?;
    if let Some(code) = refuse_newer_schema(&schema) {
        return Ok(code);
    }
    let pending = schema.pending;
    if !pending.is_empty() {
        if !migrate {
            eprintln!(
                "almanac-worker: {} migration(s) pending ({}): run `almanac-worker migrate`, or start with --migrate",
                pending.len(),
                pending.join(", ")
            );
            return Ok(ExitCode::from(2));
        }
        let applied = almanac_store_pg::migrate(&url).await?;
        info!(event = "migrated", applied = ?applied, "applied pending migrations");
        // A newer Worker may have migrated further meanwhile (it took the lock first): look again.
        if let Some(code) = refuse_newer_schema(&schema_state(&url).await?) {
            return Ok(code);
        }
    }
    // Heartbeats and outcomes have connections of their own (one per slot, one to spare): nothing else can
    // take them, so no crawl or probe can delay a beat into a self-stop.
    let store = PgStore::for_worker(
        &url,
        WorkerConnections {
            shared: settings.database.max_connections,
            reserved: settings.worker.slots + 1,
            acquire_timeout: settings.database.connect_timeout,
            lease: settings.queue.lease,
        },
    )?;
    let served = match &settings.worker.user {
        None => ServedConfigs::All,
        Some(name) => match store.user_by_name(name).await? {
            Some(user) => ServedConfigs::User(user.id),
            None => bail!(
                "worker.user: there is no user {name:?}; `almanac-worker config add --user {name} --root …` creates one"
            ),
        },
    };
    let executor_config = settings.executor(served)?;
    // The proxy root never overlaps a library: the sweep would delete originals, the crawl ingest proxies.
    let proxy_root = match roots::prepare_proxy_root(&settings.storage.proxy_root, &store.list_storage_configs().await?)
    {
        Ok(p) => p,
        Err(refused) => {
            eprintln!("almanac-worker: {refused}");
            return Ok(ExitCode::from(2));
        }
    };
    // A proxy root that can take no file (not writable by this user, read-only, full) would fail every crawl.
    if let Err(e) = almanac_media::check_proxy_root(&proxy_root) {
        eprintln!("almanac-worker: {e}. Fix it, then start the Worker again");
        return Ok(ExitCode::from(2));
    }
    let store = Arc::new(store);
    let mut crawl_settings = CrawlSettings::new(proxy_root.clone());
    crawl_settings.max_concurrent_files = settings.worker.max_concurrent_files;
    crawl_settings.mass_deletion = settings.mass_deletion();
    crawl_settings.max_image_pixels = settings.max_image_pixels();
    let crawl = CrawlHandler::new(store.clone(), crawl_settings);
    let registry = HandlerRegistry::new()
        .register(crawl)
        .register(BurstDetectionHandler::new(store.clone(), BurstSettings::default()))
        .register(PurgeHandler::new(
            store.clone(),
            PurgeSettings::new(proxy_root.clone(), settings.schedule.purge_after),
        ))
        .register(ProxyDeletionHandler::new(store.clone(), proxy_root.clone()))
        .register(ProxySweepHandler::new(
            store.clone(),
            proxy_root.clone(),
            ProxySweepHandler::<PgStore>::min_age_for(ToolLimits::default()),
        ))
        .register(TokenCleanupHandler::new(store.clone(), TokenCleanupHandler::<PgStore>::DEFAULT_GRACE))
        .register(WorkItemRetentionHandler::new(store.clone(), RetentionSettings::default()));
    let executor = Executor::new(store.clone(), registry, executor_config)?;

    let stop = CancellationToken::new();
    // What a Worker killed mid-write left under the proxy root, in the background (it walks the whole root).
    let debris = almanac_handlers::maintenance::remove_temporary_debris;
    tokio::spawn(debris(store.clone(), proxy_root, ToolLimits::default(), stop.clone()));
    let running = Arc::new(AtomicBool::new(true));
    let listener = tokio::spawn(listen_for_work(url.clone(), executor.waker(), stop.clone()));
    let http = if settings.http.enabled {
        let bound = http::bind(settings.http.address).await?;
        info!(event = "http_listening", address = %settings.http.address, "serving the operator's page at /, and /healthz, /readyz and /metrics");
        // Probes and metrics get a small budget of their own: a flood of scrapes cannot take the Worker's.
        let probes =
            PgStore::with_idle_transaction_limit(&url, 2, settings.database.connect_timeout, settings.queue.lease)?;
        let process = Arc::new(metrics_process::Collector::default());
        process.describe();
        // The page has connections of its own: open tabs cannot take the probes'.
        let page_store =
            PgStore::with_idle_transaction_limit(&url, 2, settings.database.connect_timeout, settings.queue.lease)?;
        let page = Arc::new(Page {
            store: page_store,
            auth: Auth::new(settings.http.token.clone()),
            recent,
            samples: Samples::default(),
            worker_id: settings.worker_id()?.to_string(),
            allowed_hosts: settings.http.allowed_hosts.clone(),
            stop: stop.clone(),
        });
        tokio::spawn(page::sample(page.clone(), stop.clone()));
        let health = Health { store: probes, metrics: metrics.clone(), process, running: running.clone(), page };
        Some(tokio::spawn(http::serve(bound, health, stop.clone())))
    } else {
        None
    };
    // Histogram samples are drained into their buckets here as well as at each scrape: memory stays bounded
    // when nothing scrapes.
    let upkeep = {
        let (metrics, stop) = (metrics.clone(), stop.clone());
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(5));
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = every.tick() => metrics.run_upkeep(),
                }
            }
        })
    };
    let scheduler = Scheduler::new(
        store.clone(),
        served,
        ScheduleSettings { crawl_interval: settings.schedule.crawl_interval, tick: settings.schedule.tick },
    );
    let scheduling = tokio::spawn(scheduler.run(stop.clone()));
    let shutdown = CancellationToken::new();
    tokio::spawn(signals(shutdown.clone()));
    let tls = match store.tls_in_use().await {
        Ok(Some(described)) => described,
        Ok(None) => "none".to_owned(),
        Err(e) => format!("unknown ({e})"),
    };
    info!(event = "worker_starting", database = %mask_password(&url), tls = %tls, served = ?served, "starting");
    let report = executor.run(shutdown).await;
    running.store(false, Ordering::Relaxed);
    stop.cancel();
    let _ = listener.await;
    let _ = scheduling.await;
    let _ = upkeep.await;
    if let Some(h) = http {
        // Open connections get a moment to finish (the live streams end with `stop`); then the server goes.
        let _ = tokio::time::timeout(Duration::from_secs(5), h).await;
    }
    if report.is_clean() {
        Ok(ExitCode::SUCCESS)
    } else {
        error!(
            event = "unclean_shutdown",
            unwritten = report.unwritten.len(),
            "could not release every running item; lease recovery will requeue them"
        );
        Ok(ExitCode::from(4))
    }
}

/// Exit 2 when the database's schema is newer than this build (a newer Worker migrated it): an older binary
/// must never run against it.
pub fn refuse_newer_schema(schema: &almanac_store_pg::SchemaState) -> Option<ExitCode> {
    if schema.unknown.is_empty() {
        return None;
    }
    eprintln!(
        "almanac-worker: the database's schema is newer than this almanac-worker: it has migration(s) {} that this \
         build does not know (the newest it knows is {}). A newer almanac-worker migrated it: run that version or a \
         later one, never an older one against it",
        schema.unknown.join(", "),
        schema.newest_known
    );
    Some(ExitCode::from(2))
}

/// Where the schema stands, trying a few times with backoff while the database is starting.
async fn schema_state(url: &str) -> Result<almanac_store_pg::SchemaState> {
    let mut delay = Duration::from_millis(500);
    for attempt in 1..=CONNECT_ATTEMPTS {
        match almanac_store_pg::schema_state(url).await {
            Ok(p) => return Ok(p),
            Err(StoreError::Unavailable(e)) if attempt < CONNECT_ATTEMPTS => {
                warn!(event = "database_unavailable", attempt, error = %e, "the database does not answer yet");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            Err(e @ StoreError::Config(_)) => {
                return Err(e).with_context(|| format!("database.url ({})", mask_password(url)));
            }
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("cannot reach the database at {} after {attempt} attempt(s)", mask_password(url))
                });
            }
        }
    }
    unreachable!("the last attempt returns")
}

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
