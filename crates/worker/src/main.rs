//! `almanac-worker`: the Worker of Almanac, a self-hosted photo and video flashback library.
//!
//! Exit codes: 0 success; 1 failure; 2 bad usage or configuration; 3 the database is unavailable;
//! 4 shutdown could not write everything (lease recovery will requeue what was left).

mod http;
mod observe;
mod ops;
mod page;
mod roots;
mod run;
mod settings;

use std::path::PathBuf;
use std::process::ExitCode;

use almanac_domain::{
    DedupKey, NewWorkItem, ProgressEstimate, ProxyDeletionArgs, Scope, Status, WorkArgs, WorkItemId, WorkKind,
    WorkQueue,
};
use almanac_store_pg::{ItemFilter, NewStorageConfig, PgStore, StoreError};
use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use crate::ops::{PauseTarget, config_id, parse_item_id, parse_kind, parse_status, progress_text};
use crate::settings::Settings;

/// The Almanac Worker: crawls folders of originals, builds proxies, groups bursts and keeps the catalogue.
#[derive(Parser)]
#[command(
    version,
    about = "The Almanac Worker: crawls folders of originals, builds proxies, groups bursts and keeps the catalogue.",
    after_help = "Configuration: almanac.toml (or --config-file), then ALMANAC__SECTION__KEY \
environment variables (e.g. ALMANAC__QUEUE__LEASE=30s) and DATABASE_URL.\nExit codes: 0 ok, 1 failure, 2 bad \
usage or configuration, 3 database unavailable, 4 unclean shutdown."
)]
struct Cli {
    /// Configuration file (default: ./almanac.toml when present).
    #[arg(long, global = true)]
    config_file: Option<PathBuf>,
    /// Log format: human or json (overrides log.format).
    #[arg(long, global = true)]
    log_format: Option<settings::LogFormat>,
    #[command(subcommand)]
    command: Command,
}

impl clap::ValueEnum for settings::LogFormat {
    fn value_variants<'a>() -> &'a [Self] {
        &[settings::LogFormat::Human, settings::LogFormat::Json]
    }
    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(match self {
            settings::LogFormat::Human => "human",
            settings::LogFormat::Json => "json",
        }))
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run the Worker until SIGTERM or Ctrl-C.
    #[command(after_help = "Example: DATABASE_URL=postgres://almanac@db/almanac almanac-worker run --migrate")]
    Run {
        /// Apply pending migrations first instead of refusing to start.
        #[arg(long)]
        migrate: bool,
    },
    /// Apply pending database migrations.
    Migrate,
    /// Storage configs (folders of originals), and the Worker's own configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Enqueue a work item.
    #[command(after_help = "Examples:\n  almanac-worker enqueue crawl --config /photos/ann --dedup-key crawl:ann\n  \
almanac-worker enqueue crawl --config /photos/ann --payload '{\"allow_mass_deletion\": true}'\n  \
almanac-worker enqueue token-cleanup")]
    Enqueue {
        /// crawl, burst-detection, purge, proxy-deletion, proxy-sweep, token-cleanup, work-item-retention.
        kind: String,
        /// The storage config, by id or root path (for scoped kinds).
        #[arg(long)]
        config: Option<String>,
        /// Kind-specific input, as JSON.
        #[arg(long)]
        payload: Option<String>,
        /// When an item with this key is already queued, return it instead.
        #[arg(long)]
        dedup_key: Option<String>,
        /// Follow the item until it ends (a progress bar on a terminal, plain lines otherwise) and exit with its
        /// outcome: 0 succeeded, 1 failed or cancelled. Interrupting the wait leaves the item running.
        #[arg(long)]
        wait: bool,
    },
    /// Cancel a work item: at once when queued, at its next heartbeat when running.
    Cancel {
        /// The item's id.
        id: String,
    },
    /// List work items, newest first.
    #[command(after_help = "Example: almanac-worker list --status failed --kind crawl --config /photos/ann")]
    List {
        /// queued, running, succeeded, failed or cancelled.
        #[arg(long)]
        status: Option<String>,
        /// crawl, burst-detection, purge, proxy-deletion, proxy-sweep, token-cleanup, work-item-retention.
        #[arg(long)]
        kind: Option<String>,
        /// A storage config, by id or root path.
        #[arg(long)]
        config: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// Show one work item: payload, attempts and counters, last error, progress, result (a crawl's failed files).
    Show {
        /// The item's id.
        id: String,
    },
    /// Put failed or cancelled items back in the queue: one by id, or every failed one (`--failed`), optionally
    /// of one kind or config. Their failure and stall counts start again from zero.
    #[command(after_help = "Examples:\n  almanac-worker retry 01a2…\n  almanac-worker retry --failed --kind crawl")]
    Retry {
        /// The item's id.
        id: Option<String>,
        /// Every failed item (with --kind and --config to narrow it).
        #[arg(long, conflicts_with = "id")]
        failed: bool,
        #[arg(long, requires = "failed")]
        kind: Option<String>,
        #[arg(long, requires = "failed")]
        config: Option<String>,
    },
    /// Rebuild a storage config's proxies: they are deleted (proxy_deletion items) and a crawl, queued behind
    /// them, makes them again from the originals. The originals are never touched.
    Regenerate {
        /// The storage config, by id or root path.
        #[arg(long)]
        config: String,
        /// Follow the crawl until it ends and exit with its outcome.
        #[arg(long)]
        wait: bool,
    },
    /// Pause a storage config or a kind: its queued work is not claimed (what runs finishes) until resumed.
    #[command(
        after_help = "Examples:\n  almanac-worker pause --config /photos/ann\n  almanac-worker pause --kind crawl"
    )]
    Pause {
        /// A storage config, by id or root path.
        #[arg(long, required_unless_present = "kind", conflicts_with = "kind")]
        config: Option<String>,
        /// A kind, everywhere.
        #[arg(long)]
        kind: Option<String>,
    },
    /// Resume a paused storage config or kind.
    Resume {
        /// A storage config, by id or root path.
        #[arg(long, required_unless_present = "kind", conflicts_with = "kind")]
        config: Option<String>,
        /// A kind.
        #[arg(long)]
        kind: Option<String>,
    },
    /// Ask a running Worker on this machine whether it is ready (`GET /readyz` on http.address): exit 0 when it
    /// is, 1 otherwise. For container health checks (the image has no curl).
    Health,
    /// Show the queue: counts by kind and status, running items, recent failures.
    Status {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Register a folder of originals for a user (created when missing).
    #[command(after_help = "Example: almanac-worker config add --user ann --root /volume1/photos/ann")]
    Add {
        #[arg(long)]
        user: String,
        #[arg(long)]
        root: PathBuf,
    },
    /// List storage configs.
    List,
    /// Stop serving a storage config (its catalogue stays).
    Deactivate {
        /// Id or root path.
        config: String,
    },
    /// Remove a deactivated storage config for good: its catalogue (assets, proxies, bursts) and work items are
    /// deleted, and its proxy files; the originals are never touched. Says what it would delete unless given
    /// --confirm.
    Remove {
        /// Id or root path.
        config: String,
        /// Delete, having read what will be deleted.
        #[arg(long)]
        confirm: bool,
    },
    /// Serve a deactivated storage config again (refused while its root overlaps an active config's root or
    /// the proxy root).
    Activate {
        /// Id or root path.
        config: String,
    },
    /// Print the effective configuration, secrets masked.
    Check,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut settings = match Settings::load(cli.config_file.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("almanac-worker: {e:#}");
            return ExitCode::from(2);
        }
    };
    if let Some(format) = cli.log_format {
        settings.log.format = format;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("almanac-worker: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli.command, settings)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("almanac-worker: {e:#}");
            let unavailable = e.chain().any(|c| {
                matches!(c.downcast_ref::<StoreError>(), Some(StoreError::Unavailable(_)))
                    || matches!(c.downcast_ref::<ops::OpError>(), Some(ops::OpError::Store(StoreError::Unavailable(_))))
                    || matches!(
                        c.downcast_ref::<almanac_domain::QueueError>(),
                        Some(almanac_domain::QueueError::Unavailable(_))
                    )
            });
            // A setting to fix (a refused TLS certificate, say) is a configuration error, as at load time.
            let settings = e.chain().any(|c| {
                matches!(c.downcast_ref::<StoreError>(), Some(StoreError::Config(_)))
                    || matches!(c.downcast_ref::<ops::OpError>(), Some(ops::OpError::Store(StoreError::Config(_))))
            });
            ExitCode::from(if unavailable {
                3
            } else if settings {
                2
            } else {
                1
            })
        }
    }
}

async fn dispatch(command: Command, settings: Settings) -> Result<ExitCode> {
    match command {
        Command::Run { migrate } => run::run(settings, migrate).await,
        Command::Config(ConfigCommand::Check) => {
            print!("{}", settings.masked_toml());
            match proxy_root_takes_files(&roots::resolved(&settings.storage.proxy_root)) {
                Ok(note) => {
                    eprintln!("almanac-worker: {note}");
                    Ok(ExitCode::SUCCESS)
                }
                Err(problem) => {
                    eprintln!("almanac-worker: {problem}");
                    Ok(ExitCode::from(2))
                }
            }
        }
        Command::Health => Ok(health(&settings)),
        other => {
            let url = settings.database_url()?.to_owned();
            let schema = almanac_store_pg::schema_state(&url).await.with_context(|| {
                format!("cannot read the schema of the database at {}", settings::mask_password(&url))
            })?;
            if let Some(code) = run::refuse_newer_schema(&schema) {
                return Ok(code);
            }
            let store = PgStore::new(&url, 2, settings.database.connect_timeout)?;
            admin(other, &settings, &url, &store).await
        }
    }
}

/// `config check`: whether the proxy root can take a file ([`almanac_media::check_proxy_root`], the check `run`
/// and every crawl make). One that does not exist yet is checked in the folder `run` would create it in.
fn proxy_root_takes_files(proxy_root: &std::path::Path) -> Result<String, String> {
    let existing = proxy_root.ancestors().find(|p| p.exists()).unwrap_or(proxy_root);
    match almanac_media::check_proxy_root(existing) {
        Ok(()) if existing == proxy_root => Ok(format!("storage.proxy_root {} takes files", proxy_root.display())),
        Ok(()) => Ok(format!(
            "storage.proxy_root {} does not exist yet; almanac-worker run creates it (in {}, which takes files)",
            proxy_root.display(),
            existing.display()
        )),
        Err(e) if existing == proxy_root => Err(e.to_string()),
        Err(almanac_media::MediaError::ProxyRootUnwritable { source, .. }) => Err(format!(
            "storage.proxy_root {} does not exist yet, and almanac-worker run cannot create it in {} ({source}): \
             make that folder writable by the Worker's user, or point storage.proxy_root elsewhere",
            proxy_root.display(),
            existing.display()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// `config add`: the root is canonicalised (it must exist), must not overlap the proxy root nor another
/// config's root (exit 2 naming both), and its mount-point identity is recorded.
async fn add_config(settings: &Settings, store: &PgStore, user: String, root: &std::path::Path) -> Result<ExitCode> {
    let refuse = |message: String| {
        eprintln!("almanac-worker: {message}");
        Ok(ExitCode::from(2))
    };
    let root = match roots::canonical_config_root(root) {
        Ok(root) => root,
        Err(e) => return refuse(e),
    };
    let proxy_root = roots::resolved(&settings.storage.proxy_root);
    if almanac_media::trees_overlap(&proxy_root, &root) {
        return refuse(format!("{}; nothing was registered", roots::overlap_message(&proxy_root, &root)));
    }
    // The store compares paths; the file system also knows a bind mount or another spelling of one folder.
    let configs = store.list_storage_configs().await?;
    let hidden_overlap =
        |c: &&almanac_domain::StorageConfig| almanac_media::overlap_hidden_from_paths(&c.root_path, &root);
    if let Some(other) = configs.iter().find(hidden_overlap) {
        return refuse(format!(
            "the root {} is the same tree as storage config {} at {}, or nests with it (a bind mount, or another \
             spelling of one folder): two configs may never cover one tree; nothing was registered",
            root.display(),
            other.id,
            other.root_path.display()
        ));
    }
    let (user, config) = match store.add_storage_config(&NewStorageConfig { username: user, root_path: root }).await {
        Ok(added) => added,
        Err(StoreError::Conflict(why)) => return refuse(format!("{why}; nothing was registered")),
        Err(e) => return Err(e.into()),
    };
    let is_mount_point = almanac_media::RootFolder::open(&config.root_path)
        .and_then(|r| r.is_mount_point())
        .with_context(|| format!("examining {}", config.root_path.display()))?;
    store.set_root_is_mount_point(config.id, is_mount_point).await?;
    println!("{}\t{}\t{}", config.id, user.username, config.root_path.display());
    Ok(ExitCode::SUCCESS)
}

async fn admin(command: Command, settings: &Settings, url: &str, store: &PgStore) -> Result<ExitCode> {
    match command {
        Command::Migrate => {
            let applied = almanac_store_pg::migrate(url).await?;
            if applied.is_empty() {
                println!("the database is up to date");
            } else {
                println!("applied {} migration(s): {}", applied.len(), applied.join(", "));
            }
        }
        Command::Config(ConfigCommand::Add { user, root }) => return add_config(settings, store, user, &root).await,
        Command::Config(ConfigCommand::List) => {
            println!("ID\tACTIVE\tROOT");
            for c in store.list_storage_configs().await? {
                println!("{}\t{}\t{}", c.id, if c.is_active { "yes" } else { "no" }, c.root_path.display());
            }
        }
        Command::Config(ConfigCommand::Remove { config, confirm }) => {
            let c = ops::find_config(store, &config).await?;
            let (assets, items) = store.removal_counts(c.id).await?;
            let proxies = settings.storage.proxy_root.join(c.id.to_string());
            let what = format!(
                "storage config {} ({}): {assets} asset(s) of the catalogue with their proxy rows, bursts and copies, \
                 {items} work item(s), and the proxy files under {}. The originals in {} are not touched",
                c.id,
                c.root_path.display(),
                proxies.display(),
                c.root_path.display()
            );
            if !confirm {
                println!("would remove {what}.\nRun again with --confirm to remove it.");
                return Ok(ExitCode::from(2));
            }
            match store.remove_storage_config(c.id).await {
                Ok(()) => {}
                Err(StoreError::Conflict(why)) => {
                    eprintln!("almanac-worker: {why}; nothing was removed");
                    return Ok(ExitCode::from(2));
                }
                Err(e) => return Err(e.into()),
            }
            // The rows are gone; now the files (a folder named by the config's id under the proxy root; links in it
            // are removed, never followed). What cannot be deleted is left for the proxy sweep, and said.
            match std::fs::remove_dir_all(&proxies) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => eprintln!(
                    "almanac-worker: there is no {}: if the Workers use another storage.proxy_root, delete the \
                     folder {} there (or let the proxy sweep do it)",
                    proxies.display(),
                    c.id
                ),
                Err(e) => eprintln!(
                    "almanac-worker: the catalogue is removed, but {} could not be deleted ({e}); the proxy sweep \
                     deletes such files later, or delete the folder by hand",
                    proxies.display()
                ),
            }
            println!("removed {what}.");
        }
        Command::Config(ConfigCommand::Activate { config }) => {
            let c = ops::find_config(store, &config).await?;
            if c.is_active {
                println!("{} ({}) is active already", c.id, c.root_path.display());
                return Ok(ExitCode::SUCCESS);
            }
            let clash = almanac_domain::CatalogueStore::overlapping_roots(store, c.id).await?;
            if let Some(other) = clash.iter().find(|o| o.is_active) {
                eprintln!(
                    "almanac-worker: storage config {} ({}) overlaps active storage config {} ({}): two configs on \
                     one tree would be crawled at once. Deactivate that one first (almanac-worker config deactivate \
                     {})",
                    c.id,
                    c.root_path.display(),
                    other.id,
                    other.root_path.display(),
                    other.id
                );
                return Ok(ExitCode::from(2));
            }
            let proxy_root = roots::resolved(&settings.storage.proxy_root);
            if almanac_media::trees_overlap(&proxy_root, &c.root_path) {
                eprintln!(
                    "almanac-worker: {}; storage config {} stays deactivated",
                    roots::overlap_message(&proxy_root, &c.root_path),
                    c.id
                );
                return Ok(ExitCode::from(2));
            }
            store.set_storage_config_active(c.id, true).await?;
            println!("activated {} ({}): its work is scheduled again", c.id, c.root_path.display());
        }
        Command::Config(ConfigCommand::Deactivate { config }) => {
            let c = ops::find_config(store, &config).await?;
            store.set_storage_config_active(c.id, false).await?;
            println!("deactivated {} ({})", c.id, c.root_path.display());
        }
        Command::Enqueue { kind, config, payload, dedup_key, wait } => {
            let kind = parse_kind(&kind)?;
            let scope = match config {
                Some(c) => Scope::Config(ops::active_config(store, &c).await?.id),
                None => Scope::Unscoped,
            };
            let mut item = NewWorkItem::new(kind, scope)?;
            if let Some(p) = payload {
                let payload = serde_json::from_str(&p).context("--payload must be JSON")?;
                almanac_domain::check_payload(kind, &payload).context("--payload")?;
                item = item.with_payload(payload);
            }
            if let Some(k) = dedup_key {
                item = item.with_dedup_key(DedupKey::new(k)?);
            }
            let enqueued = store.enqueue(&item).await?;
            println!("{}\t{}", enqueued.item.id, if enqueued.created { "queued" } else { "already queued" });
            if wait {
                return follow(store, enqueued.item.id).await;
            }
        }
        Command::Cancel { id } => {
            println!("{}", ops::cancel_item(store, parse_item_id(&id)?).await?);
        }
        Command::Status { json } => status(store, settings, json).await?,
        Command::List { status, kind, config, limit } => {
            let filter = ItemFilter {
                status: status.map(|s| parse_status(&s)).transpose()?,
                kind: kind.map(|k| parse_kind(&k)).transpose()?,
                config: config_id(store, config).await?,
            };
            println!("ID\tKIND\tSTATUS\tCONFIG\tREQUESTED\tATTEMPT\tLAST ERROR");
            for i in store.find_items(&filter, limit.max(1)).await? {
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}\t{}",
                    i.id,
                    i.kind,
                    i.status,
                    i.scope.storage_config().map_or("-".into(), |c| c.to_string()),
                    i.requested_at.format("%Y-%m-%d %H:%M:%S"),
                    i.attempt,
                    i.last_error.as_deref().map_or("-".into(), |e| e.chars().take(120).collect::<String>())
                );
            }
        }
        Command::Show { id } => show(store, &id).await?,
        Command::Regenerate { config, wait } => {
            let c = ops::find_config(store, &config).await?;
            if !c.is_active {
                anyhow::bail!(
                    "storage config {} ({}) is deactivated: activate it first (almanac-worker config activate {})",
                    c.id,
                    c.root_path.display(),
                    c.id
                );
            }
            let assets = store.active_asset_ids(c.id).await?;
            // Deletions first, the crawl behind them: one config's items run one at a time, oldest first.
            let mut items: Vec<NewWorkItem> = assets
                .chunks(5_000)
                .map(|chunk| {
                    ProxyDeletionArgs { asset_ids: chunk.to_vec(), proxy_types: None }.work(Scope::Config(c.id))
                })
                .collect::<Result<_, _>>()?;
            items.push(NewWorkItem::new(WorkKind::Crawl, Scope::Config(c.id))?);
            let enqueued = store.enqueue_many(&items).await?;
            let ids: Vec<WorkItemId> = enqueued.iter().map(|e| e.item.id).collect();
            let crawl = *ids.last().expect("the crawl");
            println!(
                "{} proxy deletion item(s) for {} assets, then crawl {crawl}, queued for {} ({})",
                items.len() - 1,
                assets.len(),
                c.id,
                c.root_path.display()
            );
            if wait {
                // Each deletion, then the crawl: the first that does not succeed is the outcome.
                for id in ids {
                    let code = follow(store, id).await?;
                    if code != ExitCode::SUCCESS {
                        return Ok(code);
                    }
                }
            }
        }
        Command::Pause { config, kind } => {
            println!("{}", ops::set_paused(store, pause_target(config, kind)?, true).await?)
        }
        Command::Resume { config, kind } => {
            println!("{}", ops::set_paused(store, pause_target(config, kind)?, false).await?)
        }
        Command::Retry { id, failed, kind, config } => {
            let (filter, ids) = match (id, failed) {
                (Some(id), _) => {
                    println!("{}\n1 item(s) queued again", ops::retry_item(store, parse_item_id(&id)?).await?);
                    return Ok(ExitCode::SUCCESS);
                }
                (None, true) => {
                    let filter = ItemFilter {
                        status: Some(Status::Failed),
                        kind: kind.map(|k| parse_kind(&k)).transpose()?,
                        config: config_id(store, config).await?,
                    };
                    (filter, None::<Vec<WorkItemId>>)
                }
                (None, false) => {
                    eprintln!("almanac-worker: retry needs an item id, or --failed");
                    return Ok(ExitCode::from(2));
                }
            };
            let retried = store.retry_items(&filter, ids.as_deref()).await?;
            for id in &retried {
                println!("{id}\tqueued again");
            }
            println!("{} item(s) queued again", retried.len());
        }
        Command::Run { .. } | Command::Config(ConfigCommand::Check) | Command::Health => {
            unreachable!("dispatched above")
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What `pause` and `resume` name: a config or a kind.
fn pause_target(config: Option<String>, kind: Option<String>) -> Result<PauseTarget> {
    Ok(match (config, kind) {
        (Some(c), _) => PauseTarget::Config(c),
        (None, Some(k)) => PauseTarget::Kind(parse_kind(&k)?),
        (None, None) => anyhow::bail!("say what: --config ID|ROOT or --kind KIND"),
    })
}

/// `health`: `GET /readyz` on the Worker's own HTTP address (an unspecified address means this machine).
fn health(settings: &Settings) -> ExitCode {
    use std::io::{Read, Write};
    if !settings.http.enabled {
        println!("not ready: http.enabled is false, so there is nothing to ask; enable it for health checks");
        return ExitCode::FAILURE;
    }
    let mut address = settings.http.address;
    if address.ip().is_unspecified() {
        address.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let timeout = std::time::Duration::from_secs(5);
    let answer = std::net::TcpStream::connect_timeout(&address, timeout).and_then(|mut stream| {
        stream.set_read_timeout(Some(timeout))?;
        stream.write_all(b"GET /readyz HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
        let mut reply = String::new();
        stream.take(4096).read_to_string(&mut reply)?;
        Ok(reply)
    });
    match answer {
        Ok(reply) if reply.starts_with("HTTP/1.1 200") || reply.starts_with("HTTP/1.0 200") => {
            println!("ready");
            ExitCode::SUCCESS
        }
        Ok(reply) => {
            println!("not ready: {}", reply.lines().next().unwrap_or("no answer"));
            ExitCode::FAILURE
        }
        Err(e) => {
            println!("not ready: no Worker answers on {address} ({e})");
            ExitCode::FAILURE
        }
    }
}

/// `show ID`: everything an operator asks about one item.
async fn show(store: &PgStore, id: &str) -> Result<()> {
    let id = parse_item_id(id)?;
    let i = store.get(id).await?.ok_or_else(|| anyhow::anyhow!("no work item {id}"))?;
    let at = |t: Option<chrono::DateTime<chrono::Utc>>| {
        t.map_or("-".into(), |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
    };
    println!("id           {}", i.id);
    println!("kind         {}", i.kind);
    println!("config       {}", i.scope.storage_config().map_or("- (unscoped)".into(), |c| c.to_string()));
    println!("status       {}", i.status);
    println!("attempt      {} (failures {} of {}, stalls {})", i.attempt, i.failures, i.max_attempts, i.stalls);
    println!("requested    {}", at(Some(i.requested_at)));
    println!("run after    {}", at(Some(i.run_after)));
    println!("started      {}", at(i.started_at));
    println!("finished     {}", at(i.finished_at));
    println!("worker       {}", i.worker_id.as_deref().unwrap_or("-"));
    println!("dedup key    {}", i.dedup_key.as_deref().unwrap_or("-"));
    if i.cancel_requested_at.is_some() {
        println!("cancel asked {}", at(i.cancel_requested_at));
    }
    println!("last error   {}", i.last_error.as_deref().unwrap_or("-"));
    println!("payload      {}", i.payload);
    if i.progress.is_some() {
        println!("progress     {}", progress_text(&i));
    }
    if let Some(result) = &i.result {
        println!("result       {result}");
        let failed = ops::failed_files(&i);
        if !failed.listed.is_empty() {
            println!(
                "failed files ({}{}):",
                failed.total,
                if failed.total > failed.listed.len() as u64 { ", the first listed" } else { "" }
            );
            for (path, reason) in &failed.listed {
                println!("  {path}: {reason}");
            }
        }
    }
    Ok(())
}

/// Follows a work item until it ends: a progress bar on a terminal (standard error), else a plain line whenever
/// its state or progress changes (at most every five seconds while it runs). 0 when it succeeded, 1 otherwise.
async fn follow(store: &PgStore, id: WorkItemId) -> Result<ExitCode> {
    use std::io::IsTerminal;
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(indicatif::ProgressStyle::with_template("{bar:30} {msg}").expect("a valid template"));
        bar
    });
    let (mut last_line, mut last_printed) = (String::new(), None::<std::time::Instant>);
    loop {
        let item = store.get(id).await?.ok_or_else(|| anyhow::anyhow!("work item {id} no longer exists"))?;
        let line = match item.status {
            Status::Queued => "queued".to_owned(),
            Status::Running => {
                let estimate = item.progress.as_ref().and_then(ProgressEstimate::from_progress);
                if let (Some(bar), Some(e)) = (&bar, &estimate) {
                    bar.set_length(e.total.unwrap_or(0));
                    bar.set_position(e.done);
                }
                let progress = if estimate.is_some() { progress_text(&item) } else { "started".to_owned() };
                format!("running on {}: {progress}", item.worker_id.as_deref().unwrap_or("-"))
            }
            Status::Succeeded | Status::Failed | Status::Cancelled => {
                if let Some(bar) = &bar {
                    bar.finish_and_clear();
                }
                let outcome = match (item.status, item.last_error.as_deref()) {
                    (Status::Succeeded, _) => "succeeded".to_owned(),
                    (status, Some(error)) => format!("{status}: {error}"),
                    (status, None) => status.to_string(),
                };
                println!("{id} {outcome}");
                return Ok(if item.status == Status::Succeeded { ExitCode::SUCCESS } else { ExitCode::FAILURE });
            }
        };
        match &bar {
            Some(bar) => bar.set_message(line),
            None if line != last_line
                && (item.status != Status::Running
                    || last_printed.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(5))) =>
            {
                println!("{id} {line}");
                (last_line, last_printed) = (line, Some(std::time::Instant::now()));
            }
            None => {}
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// Roots that overlap in the catalogue (an older one may hold some) or with this Worker's proxy root.
async fn root_problems(store: &PgStore, settings: &Settings) -> Result<Vec<String>> {
    let mut problems: Vec<String> = store
        .root_overlaps()
        .await?
        .into_iter()
        .map(|o| {
            format!(
                "storage config {} ({}, user {}) and {} ({}, user {}) cover one tree: their crawls refuse to run \
                 until one is deactivated (almanac-worker config deactivate ID)",
                o.first.0,
                o.first.1.display(),
                o.first.2,
                o.second.0,
                o.second.1.display(),
                o.second.2
            )
        })
        .collect();
    let configs = store.list_storage_configs().await?;
    // Overlaps the catalogue cannot see: one tree under two paths (a bind mount, another spelling).
    for (i, a) in configs.iter().enumerate() {
        for b in &configs[i + 1..] {
            if almanac_media::overlap_hidden_from_paths(&a.root_path, &b.root_path) {
                problems.push(format!(
                    "storage configs {} ({}) and {} ({}) are one tree on disk (a bind mount or another spelling): \
                     deactivate one (almanac-worker config deactivate ID)",
                    a.id,
                    a.root_path.display(),
                    b.id,
                    b.root_path.display()
                ));
            }
        }
    }
    for c in &configs {
        let canonical = c.root_path.to_str().is_some_and(|r| almanac_domain::check_canonical_root(r).is_ok());
        if let Ok(real) = std::fs::canonicalize(&c.root_path)
            && canonical
            && real != c.root_path
        {
            problems.push(format!(
                "storage config {} has the root {}, which is reached through a link (the real folder is {}): its \
                 crawls refuse to run. Deactivate it and register the real path",
                c.id,
                c.root_path.display(),
                real.display()
            ));
        }
        if !canonical {
            problems.push(format!(
                "storage config {} has the root {}, which is not a canonical path (`.`, `..`, a doubled or \
                 trailing slash): its crawls refuse to run. Deactivate it and register the real path",
                c.id,
                c.root_path.display()
            ));
        }
    }
    let proxy_root = roots::resolved(&settings.storage.proxy_root);
    for c in configs {
        if almanac_media::trees_overlap(&proxy_root, &c.root_path) {
            problems.push(roots::overlap_message(&proxy_root, &c.root_path));
        }
    }
    Ok(problems)
}

async fn status(store: &PgStore, settings: &Settings, json: bool) -> Result<()> {
    let summary = store.queue_summary().await?;
    let running = store.list_items(Some(Status::Running), 100).await?;
    let failed = store.list_items(Some(Status::Failed), 10).await?;
    let problems = root_problems(store, settings).await?;
    let (paused_kinds, paused_configs) = store.paused().await?;
    if json {
        let value = serde_json::json!({
            "counts": summary.iter().map(|r| serde_json::json!({"kind": r.kind.as_str(), "status": r.status.as_str(), "count": r.count})).collect::<Vec<_>>(),
            "running": running.iter().map(|i| {
                let mut item = serde_json::to_value(i).unwrap_or_default();
                if let Some(e) = i.progress.as_ref().and_then(ProgressEstimate::from_progress) {
                    item["estimate"] = serde_json::json!({
                        "done": e.done,
                        "total": e.total,
                        "percent": e.percent,
                        "per_second": e.per_second,
                        "remaining_seconds": e.remaining.map(|r| r.as_secs()),
                    });
                }
                item
            }).collect::<Vec<_>>(),
            "recent_failures": failed,
            "root_problems": problems,
            "paused": {
                "kinds": paused_kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
                "configs": paused_configs.iter().map(|(id, root)| serde_json::json!({"id": id.to_string(), "root": root})).collect::<Vec<_>>(),
            },
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    println!("{:<22}{:>9}{:>9}{:>11}{:>9}{:>11}", "KIND", "QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED");
    let mut kinds: Vec<WorkKind> = summary.iter().map(|r| r.kind).collect();
    kinds.dedup();
    for kind in kinds {
        let n = |status: Status| summary.iter().find(|r| r.kind == kind && r.status == status).map_or(0, |r| r.count);
        println!(
            "{:<22}{:>9}{:>9}{:>11}{:>9}{:>11}",
            kind.as_str(),
            n(Status::Queued),
            n(Status::Running),
            n(Status::Succeeded),
            n(Status::Failed),
            n(Status::Cancelled)
        );
    }
    if !running.is_empty() {
        println!("\nRUNNING");
        for i in &running {
            let progress = progress_text(i);
            println!(
                "{}  {}  config {}  worker {}  attempt {}  progress {}",
                i.id,
                i.kind,
                i.scope.storage_config().map_or("-".into(), |c| c.to_string()),
                i.worker_id.as_deref().unwrap_or("-"),
                i.attempt,
                progress
            );
        }
    }
    if !paused_kinds.is_empty() || !paused_configs.is_empty() {
        println!("\nPAUSED (queued work not claimed; almanac-worker resume)");
        for kind in &paused_kinds {
            println!("kind {kind}");
        }
        for (id, root) in &paused_configs {
            println!("config {id}  {root}");
        }
    }
    if !problems.is_empty() {
        println!("\nROOT PROBLEMS");
        for p in &problems {
            println!("{p}");
        }
    }
    if !failed.is_empty() {
        println!("\nRECENT FAILURES");
        for i in &failed {
            println!("{}  {}  {}", i.id, i.kind, i.last_error.as_deref().unwrap_or("-"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_check_says_whether_the_proxy_root_takes_files() {
        let dir = tempfile::tempdir().unwrap();
        let note = proxy_root_takes_files(dir.path()).unwrap();
        assert!(note.contains("takes files"), "{note}");
        let later = dir.path().join("almanac/proxies");
        let note = proxy_root_takes_files(&later).unwrap();
        assert!(note.contains("does not exist yet; almanac-worker run creates it"), "{note}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the check creates nothing");

        // A file where a folder should be: nothing can be created beneath it.
        std::fs::write(dir.path().join("almanac"), b"a file").unwrap();
        let problem = proxy_root_takes_files(&later).unwrap_err();
        assert!(problem.contains("storage.proxy_root") && problem.contains("cannot create it"), "{problem}");
    }

    #[test]
    fn config_check_names_a_proxy_root_on_a_read_only_volume() {
        let dir = tempfile::tempdir().unwrap();
        let proxies = dir.path().join("proxies");
        std::fs::create_dir(&proxies).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "ro,size=16k", "tmpfs"])
            .arg(&proxies)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("SKIPPED: cannot mount a read-only tmpfs here");
            return;
        }
        let problem = proxy_root_takes_files(&proxies);
        let _ = std::process::Command::new("umount").arg("-l").arg(&proxies).status();
        let problem = problem.unwrap_err();
        assert!(problem.contains("storage.proxy_root") && problem.contains(&proxies.display().to_string()));
        assert!(problem.contains("mounted read-only; mount it read-write"), "{problem}");
    }
}
