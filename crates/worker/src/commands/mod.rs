//! What each verb of the command line does, one file per group of verbs: reading the settings and the
//! database, calling [`crate::ops`] and printing what it returns (text beside its command, JSON where asked).

/// Prints a line of a command's output, its control characters escaped but line ends and tabs
/// ([`crate::observe::shown`]): the only way a command prints (a test holds the commands to it).
macro_rules! say {
    ($($arg:tt)*) => {
        println!("{}", crate::observe::shown(&format!($($arg)*)))
    };
}

/// As [`say!`], on the standard error.
macro_rules! esay {
    ($($arg:tt)*) => {
        eprintln!("{}", crate::observe::shown(&format!($($arg)*)))
    };
}

mod config;
mod exit;
mod follow;
mod health;
mod items;
mod run;
mod status;

pub use exit::{Exit, Failure};

use almanac_store_pg::{PgStore, SchemaState};

use crate::cli::{Command, ConfigCommand};
use crate::settings::{Settings, mask_password};

/// Runs `command` with `settings`: how the process ends.
pub async fn dispatch(command: Command, settings: Settings) -> Result<Exit, Failure> {
    // `run` logs where its settings came from (`worker_starting`); `config check` prints it whole.
    if !matches!(command, Command::Run { .. } | Command::Config(ConfigCommand::Check)) {
        for line in settings.origin.overriding_the_file() {
            esay!("almanac-worker: {line}");
        }
    }
    match command {
        Command::Run { migrate } => run::run(settings, migrate).await,
        Command::Config(ConfigCommand::Check) => config::check(&settings),
        Command::Health => Ok(health::health(&settings.http)),
        other => {
            let url = settings.database_url().map_err(Failure::failed)?.to_owned();
            let schema = almanac_store_pg::schema_state(&url).await.map_err(|e| {
                Failure::from(e).context(format!("cannot read the schema of the database at {}", mask_password(&url)))
            })?;
            refuse_newer_schema(&schema)?;
            let (timeout, lease) = (settings.database.connect_timeout, settings.queue.lease);
            let store = PgStore::in_mode(&url, 2, timeout, lease, settings.pooler_mode())?;
            on_the_database(other, &settings, &url, &store).await
        }
    }
}

/// The verbs that act on the database, once its schema is known to be one this build can read.
async fn on_the_database(command: Command, settings: &Settings, url: &str, store: &PgStore) -> Result<Exit, Failure> {
    match command {
        Command::Migrate => migrate(url).await,
        Command::Config(c) => config::on_the_database(c, settings, store).await,
        Command::Status { json } => status::status(store, settings, json).await,
        Command::Enqueue { kind, config, payload, dedup_key, wait } => {
            items::enqueue(store, &kind, config.as_deref(), payload.as_deref(), dedup_key, wait).await
        }
        Command::Cancel { id } => items::cancel(store, &id).await,
        Command::List { status, kind, config, limit } => {
            items::list(store, status.as_deref(), kind.as_deref(), config.as_deref(), limit).await
        }
        Command::Show { id } => items::show(store, &id).await,
        Command::Regenerate { config, wait } => items::regenerate(store, &config, wait).await,
        Command::Pause { config, kind } => items::set_paused(store, config, kind.as_deref(), true).await,
        Command::Resume { config, kind } => items::set_paused(store, config, kind.as_deref(), false).await,
        Command::Retry { id, failed, kind, config } => {
            items::retry(store, id.as_deref(), failed, kind.as_deref(), config.as_deref()).await
        }
        Command::Run { .. } | Command::Health => unreachable!("dispatched above"),
    }
}

/// `migrate`: applies pending migrations.
async fn migrate(url: &str) -> Result<Exit, Failure> {
    let applied = almanac_store_pg::migrate(url).await?;
    if applied.is_empty() {
        say!("the database is up to date");
    } else {
        say!("applied {} migration(s): {}", applied.len(), applied.join(", "));
    }
    Ok(Exit::Success)
}

/// Refused (exit 2) when the database's schema is newer than this build (a newer Worker migrated it): an older
/// binary must never run against it.
fn refuse_newer_schema(schema: &SchemaState) -> Result<(), Failure> {
    if schema.unknown.is_empty() {
        return Ok(());
    }
    Err(Failure::usage(format!(
        "the database's schema is newer than this almanac-worker: it has migration(s) {} that this build does not \
         know (the newest it knows is {}). A newer almanac-worker migrated it: run that version or a later one, \
         never an older one against it",
        schema.unknown.join(", "),
        schema.newest_known
    )))
}
