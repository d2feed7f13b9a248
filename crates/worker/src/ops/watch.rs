//! How a config's root is watched (ADR 0014): the operator's choice, which `config watch` sets.

use almanac_domain::StorageConfig;
use almanac_domain::ports::WatchChoice;
use almanac_store_pg::PgStore;

use super::{OpError, configs, parse};

/// What `config watch` did.
pub struct WatchSet {
    /// The config.
    pub config: StorageConfig,
    /// The choice it had.
    pub was: WatchChoice,
    /// The choice it has now.
    pub now: WatchChoice,
}

impl WatchSet {
    /// What was done, in words.
    pub fn describe(&self) -> String {
        let c = &self.config;
        let what = if self.was == self.now { "was already" } else { "is now" };
        let effect = match self.now {
            WatchChoice::Auto => "events, or polling on a network file system",
            WatchChoice::Events => "the file system's change events",
            WatchChoice::Polling => "polling its folders every watch.poll_interval",
            WatchChoice::Off => "not watched: only the scheduled crawl finds changes",
        };
        let inactive = if c.is_active { "" } else { " (it is deactivated: watched once activated)" };
        format!("storage config {} ({}) {what} watched: {} ({effect}){inactive}", c.id, c.root_path.display(), self.now)
    }
}

/// `config watch <config> <choice>`: how the Worker holding the config's watch follows its root. The choice is
/// read first: an unknown one changes nothing.
pub async fn set_watch(store: &PgStore, given: &str, choice: &str) -> Result<WatchSet, OpError> {
    let now = parse::parse_watch_choice(choice)?;
    let config = configs::find_config(store, given).await?;
    let was = store.set_storage_config_watch(config.id, now).await?;
    Ok(WatchSet { config, was, now })
}
