//! The command line: every verb and option, as clap reads them. What each does is in [`crate::commands`].

use std::path::PathBuf;

use almanac_domain::WorkKind;
use clap::{Parser, Subcommand};

use crate::ops;
use crate::settings::{self, LogFormat, Settings};

/// Every kind as the CLI names them, for the options' help.
fn kinds_help() -> String {
    format!("{}.", WorkKind::ALL.map(ops::kind_name).join(", "))
}

/// The Almanac Worker: crawls folders of originals, builds proxies, groups bursts and keeps the catalogue.
#[derive(Parser)]
#[command(
    version,
    about = "The Almanac Worker: crawls folders of originals, builds proxies, groups bursts and keeps the catalogue.",
    after_help = "Configuration: --config-file, else almanac.toml here, else /etc/almanac/worker.toml; then \
ALMANAC__SECTION__KEY environment variables (e.g. ALMANAC__QUEUE__LEASE=30s) and DATABASE_URL.\nExit codes: 0 ok, 1 failure, 2 bad \
usage or configuration, 3 database unavailable, 4 unclean shutdown."
)]
pub struct Cli {
    /// Configuration file (default: ./almanac.toml, else /etc/almanac/worker.toml, when present).
    #[arg(long, global = true)]
    pub config_file: Option<PathBuf>,
    /// Log format: human or json (overrides log.format).
    #[arg(long, global = true)]
    pub log_format: Option<LogFormat>,
    #[command(subcommand)]
    pub command: Command,
}

impl clap::ValueEnum for LogFormat {
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
pub enum Command {
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
        #[arg(help = kinds_help())]
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
        #[arg(long, help = kinds_help())]
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
pub enum ConfigCommand {
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
    /// Choose how a storage config's root is watched for changes: auto (events, or polling on a network file
    /// system), events, polling or off (only the scheduled crawl finds changes).
    #[command(after_help = "Example: almanac-worker config watch /volume1/photos/ann polling")]
    Watch {
        /// Id or root path.
        config: String,
        /// auto, events, polling or off.
        choice: String,
    },
    /// Print the effective configuration, secrets masked.
    Check,
}

impl Cli {
    /// The settings: the file and the environment, with `--log-format` over them.
    pub fn settings(&self) -> anyhow::Result<Settings> {
        let mut settings = Settings::load(self.config_file.as_deref())?;
        if let Some(format) = self.log_format {
            settings.log.format = format;
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// The help names the settings file the package installs, and the package's unit runs the Worker with it.
    #[test]
    fn the_installed_settings_file_is_the_one_the_help_and_the_unit_name() {
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains(settings::INSTALLED_FILE), "{help}");
        let unit = include_str!("../../../packaging/almanac-worker.service");
        assert!(unit.contains(&format!("--config-file {}", settings::INSTALLED_FILE)), "{unit}");
    }

    #[test]
    fn the_help_of_a_kind_names_every_kind() {
        let mut cli = Cli::command();
        for verb in ["enqueue", "list"] {
            let help = cli.find_subcommand_mut(verb).unwrap().render_help().to_string();
            for kind in WorkKind::ALL {
                assert!(help.contains(ops::kind_name(kind).as_str()), "{verb}'s help: {help}");
            }
        }
    }
}
