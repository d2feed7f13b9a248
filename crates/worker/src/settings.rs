//! The Worker's configuration: built-in defaults < the settings file (`--config-file`, else `almanac.toml` here, else
//! the package's `/etc/almanac/worker.toml`) < environment
//! (`ALMANAC__SECTION__KEY`, e.g. `ALMANAC__QUEUE__LEASE=30s`), and `DATABASE_URL`. Unknown keys and bad
//! values are errors that name the key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use almanac_domain::{
    WorkerId,
    ports::{LeaseDuration, RetryPolicy, ServedConfigs},
};
use almanac_executor::ExecutorConfig;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use almanac_store_pg::PoolerMode;
pub use almanac_store_pg::mask_password;

/// Everything the Worker can be told.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    pub database: Database,
    pub queue: Queue,
    pub worker: Worker,
    pub storage: Storage,
    pub schedule: Schedule,
    pub watch: Watch,
    pub http: Http,
    pub log: Log,
    /// Where these settings came from (not a setting).
    #[serde(skip)]
    pub origin: Origin,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Database {
    /// PostgreSQL URL; `DATABASE_URL` wins when set.
    pub url: Option<String>,
    /// The `pool_mode` of a connection pooler between the Worker and PostgreSQL: `session` (also for none) or
    /// `transaction` (PgBouncer's `pool_mode = transaction`). See ADR 0012.
    pub pooler_mode: String,
    /// A direct connection to PostgreSQL, past any pooler, on which the Worker listens for enqueued work. Without
    /// it the Worker listens on `url`, unless `pooler_mode` is `transaction` (then it polls only).
    pub listen_url: Option<String>,
    pub max_connections: usize,
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Queue {
    #[serde(with = "humantime_serde")]
    pub lease: Duration,
    #[serde(with = "humantime_serde")]
    pub heartbeat_interval: Duration,
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    pub max_stalls: i32,
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    #[serde(with = "humantime_serde")]
    pub retry_base: Duration,
    #[serde(with = "humantime_serde")]
    pub retry_cap: Duration,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Worker {
    /// Names this Worker; defaults to `<hostname>-<pid>`.
    pub id: Option<String>,
    /// Serve only this user's storage configs (by user name); all active configs when unset.
    pub user: Option<String>,
    pub slots: usize,
    pub max_concurrent_files: usize,
    /// The nice value of reading originals and of the tools (0 to 19; 0 leaves them at the Worker's).
    pub nice: i32,
    /// The I/O priority of reading originals and of the tools: `normal`, `low` or `idle` (ADR 0013).
    pub io_priority: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Storage {
    pub proxy_root: PathBuf,
    /// In a library of this many active assets or more, a crawl refuses to soft-delete more than
    /// `mass_deletion_max_percent` of them at once, unless confirmed (`allow_mass_deletion`).
    pub mass_deletion_min_assets: u64,
    /// See `mass_deletion_min_assets`; 1 to 100.
    pub mass_deletion_max_percent: u8,
    /// Stills whose header claims more megapixels than this, and videos with a frame of more, are refused before
    /// decoding (a decompression bomb), recorded as failed files with the reason.
    pub max_image_megapixels: u64,
    /// A file is read only once its size and mtime have stayed the same this long (a copy or a sync still
    /// writing it is left for a crawl that much later); 0 to 1 h.
    #[serde(with = "humantime_serde")]
    pub settle_time: Duration,
    /// The longest a video's web transcode may take before it is stopped and the file recorded as failed (its
    /// error names this setting); 1 min to 24 h. Raise it for long videos on a slow machine; give every Worker of a
    /// database the same (the proxy sweep leaves files younger than the longest write alone).
    #[serde(with = "humantime_serde")]
    pub transcode_limit: Duration,
    /// The longest each look a crawl makes before it reads anything (at the library's root, the proxy root, the
    /// proxy folder) may take, and a quarter of the longest the library's share may answer none of the crawl's calls
    /// in the middle of it while one waits, before the crawl gives its slot up, saying the share did not answer; 1 s
    /// to 1 h.
    #[serde(with = "humantime_serde")]
    pub root_answer_limit: Duration,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Schedule {
    #[serde(with = "humantime_serde")]
    pub crawl_interval: Duration,
    /// A config whose root a Worker watches is crawled whole this often instead (the safety net).
    #[serde(with = "humantime_serde")]
    pub watched_crawl_interval: Duration,
    /// Soft-deleted assets are purged after this long.
    #[serde(with = "humantime_serde")]
    pub purge_after: Duration,
    /// How often the scheduler looks for due periodic work.
    #[serde(with = "humantime_serde")]
    pub tick: Duration,
    /// A daily window in which no scheduled work starts, e.g. `01:00-06:30` (local time), `01:00-06:30 UTC`.
    pub quiet_hours: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Http {
    pub enabled: bool,
    pub address: SocketAddr,
    /// The operator's page allows actions (retry, cancel, pause, crawl) to whoever gives this token; none set
    /// means the page is read-only. At least 16 characters.
    pub token: Option<String>,
    /// Host names the HTTP server answers to beside IP addresses and `localhost`, on every route (the page,
    /// `/metrics`, `/healthz`, `/readyz`): a reverse proxy's name, the name a scraper or probe uses, each alone
    /// (any port) or as `name:port`. A request naming any other host is refused, so a web site cannot read the
    /// page or the metrics through DNS rebinding.
    pub allowed_hosts: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Human,
    Json,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Log {
    pub format: LogFormat,
    /// A tracing filter, e.g. `info` or `info,almanac_handlers=debug`.
    pub level: String,
}

impl Default for Database {
    fn default() -> Self {
        Self {
            url: None,
            pooler_mode: PoolerMode::default().name().to_owned(),
            listen_url: None,
            max_connections: ExecutorConfig::DEFAULT_SHARED_CONNECTIONS,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

// The defaults of the queue, the worker, the storage and the schedule are their owners' (the executor's, the
// crawl's, the scheduler's, purge's): read here, never restated.

impl Default for Queue {
    fn default() -> Self {
        let retry = RetryPolicy::default();
        Self {
            lease: LeaseDuration::DEFAULT.get(),
            heartbeat_interval: ExecutorConfig::DEFAULT_HEARTBEAT_INTERVAL,
            poll_interval: ExecutorConfig::DEFAULT_POLL_INTERVAL,
            max_stalls: ExecutorConfig::DEFAULT_MAX_STALLS,
            shutdown_grace: ExecutorConfig::DEFAULT_SHUTDOWN_GRACE,
            retry_base: retry.base,
            retry_cap: retry.cap,
        }
    }
}

impl Default for Worker {
    fn default() -> Self {
        let max_concurrent_files = almanac_handlers::CrawlSettings::DEFAULT_MAX_CONCURRENT_FILES;
        let priority = almanac_media::Priority::default();
        Self {
            id: None,
            user: None,
            slots: ExecutorConfig::DEFAULT_SLOTS,
            max_concurrent_files,
            nice: priority.nice,
            io_priority: priority.io.name().to_owned(),
        }
    }
}

impl Default for Schedule {
    fn default() -> Self {
        let schedule = almanac_handlers::ScheduleSettings::default();
        Self {
            crawl_interval: schedule.crawl_interval,
            watched_crawl_interval: schedule.watched_crawl_interval,
            purge_after: almanac_handlers::PurgeSettings::DEFAULT_PURGE_AFTER,
            tick: schedule.tick,
            quiet_hours: None,
        }
    }
}

impl Default for Http {
    fn default() -> Self {
        Self {
            enabled: true,
            address: SocketAddr::from(([127, 0, 0, 1], 9464)),
            token: None,
            allowed_hosts: Vec::new(),
        }
    }
}

impl Default for Log {
    fn default() -> Self {
        Self { format: LogFormat::Human, level: "info".into() }
    }
}

impl Settings {
    /// Loads the settings: defaults, then `file` (or [`default_file`]), then the environment.
    pub fn load(file: Option<&Path>) -> Result<Self> {
        let file = file.map(Path::to_path_buf).or_else(default_file);
        Self::load_from(file.as_deref(), std::env::vars())
    }

    /// As [`Settings::load`], the file (if any) and the environment given.
    pub fn load_from(file: Option<&Path>, env: impl IntoIterator<Item = (String, String)>) -> Result<Self> {
        let mut builder = config::Config::builder()
            .add_source(config::Config::try_from(&Settings::default()).context("built-in defaults")?);
        // The settings' shape, to tell the list settings (an empty list is no value to the `config` crate).
        let shape = serde_json::to_value(Settings::default()).context("built-in defaults")?;
        // A file that cannot be parsed is reported with the offending line: secrets in it are hidden first.
        let mut file_text = String::new();
        if let Some(path) = file {
            file_text = files::read(path)?;
            builder = builder.add_source(config::File::from(path).format(config::FileFormat::Toml));
        }
        let env: Vec<(String, String)> = env.into_iter().collect();
        let mut map = config::Map::new();
        for (variable, value) in &env {
            if let Some(rest) = variable.strip_prefix("ALMANAC__") {
                map.insert(rest.to_ascii_lowercase().replace("__", "."), (variable.clone(), value.clone()));
            }
        }
        let mut variables: Vec<(String, String)> = Vec::new();
        for (key, (variable, value)) in map {
            variables.push((variable, key.clone()));
            // A list setting (`http.allowed_hosts`) given in the environment: its items, comma-separated.
            let pointer = format!("/{}", key.replace('.', "/"));
            builder = match shape.pointer(&pointer) {
                Some(serde_json::Value::Array(_)) => {
                    let items: Vec<String> =
                        value.split(',').map(str::trim).filter(|i| !i.is_empty()).map(str::to_owned).collect();
                    builder.set_override(key.as_str(), items)
                }
                _ => builder.set_override(key.as_str(), value),
            }
            .with_context(|| format!("setting {key}"))?;
        }
        if let Some((variable, url)) = env.iter().find(|(k, _)| k == "DATABASE_URL") {
            builder = builder.set_override("database.url", url.clone())?;
            // It wins over ALMANAC__DATABASE__URL too, which then sets nothing.
            variables.retain(|(_, setting)| setting != "database.url");
            variables.push((variable.clone(), "database.url".into()));
        }
        let mut settings: Settings = builder
            .build()
            .map_err(|e| anyhow::anyhow!("reading the configuration: {}", hide_secrets(&e.to_string(), &file_text)))?
            .try_deserialize()
            .map_err(|e| anyhow::anyhow!("bad configuration: {}", hide_secrets(&e.to_string(), &file_text)))?;
        settings.validate()?;
        // The file alone, to tell which of its settings the environment replaced (it parsed above).
        let in_file = file.and_then(|_| {
            let text = config::File::from_str(&file_text, config::FileFormat::Toml);
            config::Config::builder().add_source(text).build().ok()
        });
        let in_file = |key: &str| in_file.as_ref().is_some_and(|c| c.get::<config::Value>(key).is_ok());
        settings.origin = Origin::new(file, variables, in_file);
        Ok(settings)
    }

    fn validate(&self) -> Result<()> {
        if let Some(url) = &self.database.url {
            check_database_url("database.url", url)?;
        }
        if let Some(url) = &self.database.listen_url {
            check_database_url("database.listen_url", url)?;
        }
        if PoolerMode::parse(&self.database.pooler_mode).is_none() {
            let modes: Vec<&str> = PoolerMode::ALL.iter().map(|m| m.name()).collect();
            bail!(
                "database.pooler_mode: {:?} is not a mode this Worker knows: give one of {} (session for PostgreSQL \
                 itself or a pooler in session mode; transaction for PgBouncer's pool_mode = transaction)",
                self.database.pooler_mode,
                modes.join(", ")
            );
        }
        if let Some(token) = &self.http.token
            && (token.chars().count() < 16 || token.chars().any(char::is_whitespace))
        {
            bail!(
                "http.token: must be at least 16 characters without spaces (it guards the page's actions); make one \
                 with `head -c 24 /dev/urandom | base64`"
            );
        }
        if let Some(bad) = self.http.allowed_hosts.iter().find(|h| crate::http::host_name(h).is_none()) {
            bail!(
                "http.allowed_hosts: {bad:?} is not a host name: give it as the request's Host header names it, \
                 e.g. \"almanac.example\" or \"almanac.example:8443\" (no scheme, no path)"
            );
        }
        if self.database.max_connections == 0 {
            bail!("database.max_connections: must be at least 1");
        }
        if !(1..=64).contains(&self.worker.max_concurrent_files) {
            bail!("worker.max_concurrent_files: {} must be from 1 to 64", self.worker.max_concurrent_files);
        }
        self.storage_checked()?;
        if self.schedule.tick.is_zero() {
            bail!("schedule.tick: must be above zero");
        }
        self.schedule_settings()?;
        self.watch_settings()?;
        self.priority()?;
        self.executor(ServedConfigs::All).map(|_| ())
    }

    /// The database URL, or an error saying how to give one.
    pub fn database_url(&self) -> Result<&str> {
        self.database.url.as_deref().with_context(|| {
            format!(
                "no database: set DATABASE_URL (or ALMANAC__DATABASE__URL), or database.url in the settings file \
                     (almanac.toml here, else {INSTALLED_FILE}, or the one --config-file names)"
            )
        })
    }

    /// How the Worker's connections reach PostgreSQL (`database.pooler_mode`, checked when loaded).
    pub fn pooler_mode(&self) -> PoolerMode {
        PoolerMode::parse(&self.database.pooler_mode).unwrap_or_default()
    }

    /// This Worker's id: `worker.id`, or `<hostname>-<pid>`.
    pub fn worker_id(&self) -> Result<WorkerId> {
        let id = match &self.worker.id {
            Some(id) => id.clone(),
            None => {
                let host = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_owned()).unwrap_or_default();
                format!("{}-{}", if host.is_empty() { "worker" } else { &host }, std::process::id())
            }
        };
        WorkerId::new(id).map_err(|e| anyhow::anyhow!("worker.id: {e}"))
    }

    /// The executor's knobs, checked.
    pub fn executor(&self, served: ServedConfigs) -> Result<ExecutorConfig> {
        let lease = LeaseDuration::new(self.queue.lease).map_err(|e| anyhow::anyhow!("queue.lease: {e}"))?;
        let mut c = ExecutorConfig::new(self.worker_id()?, served);
        c.lease = lease;
        c.heartbeat_interval = self.queue.heartbeat_interval;
        c.poll_interval = self.queue.poll_interval;
        c.slots = self.worker.slots;
        c.max_stalls = self.queue.max_stalls;
        c.shutdown_grace = self.queue.shutdown_grace;
        c.recovery_interval = lease.half();
        c.retry = RetryPolicy { base: self.queue.retry_base, cap: self.queue.retry_cap, ..RetryPolicy::default() };
        c.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(c)
    }

    /// The most pixels a still may decode to (`storage.max_image_megapixels`, in pixels).
    pub fn max_image_pixels(&self) -> u64 {
        self.storage.max_image_megapixels * 1_000_000
    }

    /// The crawl's mass-deletion guard.
    pub fn mass_deletion(&self) -> almanac_handlers::MassDeletionGuard {
        almanac_handlers::MassDeletionGuard {
            min_assets: self.storage.mass_deletion_min_assets,
            max_percent: self.storage.mass_deletion_max_percent,
        }
    }

    /// The settings as TOML with secrets masked (`config check`).
    pub fn masked_toml(&self) -> String {
        let mut shown = self.clone();
        shown.database.url = shown.database.url.as_deref().map(mask_password);
        shown.database.listen_url = shown.database.listen_url.as_deref().map(mask_password);
        shown.http.token = shown.http.token.as_ref().map(|_| "***".to_owned());
        let value = serde_json::to_value(&shown).unwrap_or_default();
        let mut out = String::new();
        if let serde_json::Value::Object(sections) = value {
            for (section, fields) in sections {
                out.push_str(&format!("[{section}]\n"));
                if let serde_json::Value::Object(fields) = fields {
                    for (k, v) in fields {
                        if !v.is_null() {
                            out.push_str(&format!("{k} = {v}\n"));
                        }
                    }
                }
                out.push('\n');
            }
        }
        out
    }
}

/// `message` with the value of every `*url`, `token` or `*password*` line of the configuration file replaced by `***`
/// (a parse error quotes the offending line, and that line may be the database URL).
fn hide_secrets(message: &str, file_text: &str) -> String {
    let mut shown = message.to_owned();
    for line in file_text.lines() {
        let Some((key, value)) = line.split_once('=') else { continue };
        let key = key.trim().to_ascii_lowercase();
        if !(key.ends_with("url") || key == "token" || key.contains("password")) {
            continue;
        }
        let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
        if !value.is_empty() {
            shown = shown.replace(value, "***");
        }
        // The line itself, however the parser quotes it.
        let raw = line.trim();
        if raw.len() > key.len() {
            shown = shown.replace(raw, &format!("{key} = ***"));
        }
    }
    shown
}

/// Refuses a connection string (the setting `key`) the driver cannot read (either form), naming the setting and
/// never the secret.
fn check_database_url(key: &str, url: &str) -> Result<()> {
    almanac_store_pg::ConnectTarget::parse(url).map(|_| ()).map_err(|e| {
        let shown = mask_password(url);
        if shown == almanac_store_pg::conninfo_hidden() {
            // The driver's own words may quote part of an unreadable string, password included.
            return anyhow::anyhow!(
                "{key}: the value cannot be read as a PostgreSQL connection URL or key=value string (it is not shown: \
                 it may hold a password). Give it as postgres://USER:PASSWORD@HOST:5432/DATABASE, special \
                 characters percent-encoded, or as host=HOST dbname=DATABASE user=USER password=…"
            );
        }
        anyhow::anyhow!(
            "{key}: {} cannot be used ({e}). Give it as postgres://USER@HOST:5432/DATABASE (a password as \
             postgres://USER:PASSWORD@…, special characters percent-encoded) or as host=HOST dbname=DATABASE \
             user=USER; TLS with sslmode=disable|prefer|require|verify-ca|verify-full and sslrootcert=FILE|system",
            shown
        )
    })
}

mod files;
mod origin;
mod storage;
mod watch;
mod work;

#[cfg(test)]
use files::first_file;
pub use files::{INSTALLED_FILE, default_file};
pub use origin::Origin;

pub use watch::Watch;

#[cfg(test)]
mod tests;
