//! `config …`: storage configs (add, list, activate, deactivate, remove, watch) and `config check` of the Worker's own
//! settings.

use std::path::Path;

use almanac_store_pg::PgStore;

use super::{Exit, Failure};
use crate::cli::ConfigCommand;
use crate::ops::{self, Activation};
use crate::settings::Settings;

/// The `config` verbs that read or change storage configs.
pub async fn on_the_database(command: ConfigCommand, settings: &Settings, store: &PgStore) -> Result<Exit, Failure> {
    let proxy_root = &settings.storage.proxy_root;
    match command {
        ConfigCommand::Add { user, root } => {
            let (user, config) = ops::add_config(store, proxy_root, user, &root).await?;
            say!("{}\t{}\t{}", config.id, user.username, config.root_path.display());
        }
        ConfigCommand::List => {
            say!("ID\tACTIVE\tROOT");
            for c in store.list_storage_configs().await? {
                let root = crate::observe::value_shown(&c.root_path.display().to_string());
                say!("{}\t{}\t{root}", c.id, if c.is_active { "yes" } else { "no" });
            }
        }
        ConfigCommand::Remove { config, confirm } => return remove(store, proxy_root, &config, confirm).await,
        ConfigCommand::Activate { config } => match ops::activate_config(store, proxy_root, &config).await? {
            Activation::AlreadyActive(c) => say!("{} ({}) is active already", c.id, c.root_path.display()),
            Activation::Activated(c) => {
                say!("activated {} ({}): its work is scheduled again", c.id, c.root_path.display());
            }
        },
        ConfigCommand::Deactivate { config } => {
            let c = ops::deactivate_config(store, &config).await?;
            say!("deactivated {} ({})", c.id, c.root_path.display());
        }
        ConfigCommand::Watch { config, choice } => {
            say!("{}", ops::set_watch(store, &config, &choice).await?.describe())
        }
        ConfigCommand::Check => unreachable!("needs no database"),
    }
    Ok(Exit::Success)
}

/// `config remove`: says what it would delete, and deletes it with `--confirm`.
async fn remove(store: &PgStore, proxy_root: &Path, config: &str, confirm: bool) -> Result<Exit, Failure> {
    let removal = ops::plan_removal(store, proxy_root, config).await?;
    if !confirm {
        say!("would remove {}.\nRun again with --confirm to remove it.", removal.describe());
        return Ok(Exit::Usage);
    }
    let folder = ops::remove_config(store, &removal).await?;
    if let Some(note) = folder.note(&removal) {
        esay!("almanac-worker: {note}");
    }
    say!("removed {}.", removal.describe());
    Ok(Exit::Success)
}

/// `config check`: the effective settings, secrets masked, and whether the proxy root takes files.
pub fn check(settings: &Settings) -> Result<Exit, Failure> {
    for line in settings.origin.described() {
        esay!("almanac-worker: {line}");
    }
    say!("{}", settings.masked_toml().trim_end_matches('\n'));
    let proxy_root = settings.storage.proxy_root.clone();
    let look = move || proxy_root_takes_files(&ops::roots::resolved(&proxy_root));
    match ops::roots::answered_in_time(ops::roots::ROOT_ANSWERS_WITHIN, look) {
        Some(Ok(note)) => {
            esay!("almanac-worker: {note}");
            Ok(Exit::Success)
        }
        Some(Err(problem)) => Err(Failure::usage(problem)),
        None => Err(Failure::failed(anyhow::anyhow!(
            "{}: whether it takes files could not be seen",
            ops::roots::proxy_root_no_answer(&settings.storage.proxy_root).said()
        ))),
    }
}

/// Whether the proxy root can take a file ([`almanac_media::check_proxy_root`], the check `run` and every crawl
/// make). One that does not exist yet is checked in the folder `run` would create it in.
fn proxy_root_takes_files(proxy_root: &Path) -> Result<String, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_check_says_whether_the_proxy_root_takes_files() {
        let dir = tempfile::tempdir().unwrap();
        let note = proxy_root_takes_files(dir.path()).unwrap();
        assert_eq!(note, format!("storage.proxy_root {} takes files", dir.path().display()));
        let later = dir.path().join("almanac/proxies");
        let note = proxy_root_takes_files(&later).unwrap();
        assert!(note.contains("does not exist yet; almanac-worker run creates it"), "{note}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the check creates nothing");

        // A file where a folder should be: nothing can be created beneath it.
        std::fs::write(dir.path().join("almanac"), b"a file").unwrap();
        let problem = proxy_root_takes_files(&later).unwrap_err();
        assert!(problem.contains("storage.proxy_root") && problem.contains("cannot create it"), "{problem}");
        // That file as the proxy root: it exists, and takes no files.
        let problem = proxy_root_takes_files(&dir.path().join("almanac")).unwrap_err();
        assert!(problem.contains("storage.proxy_root") && !problem.contains("does not exist"), "{problem}");
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
            esay!("SKIPPED: cannot mount a read-only tmpfs here");
            return;
        }
        let problem = proxy_root_takes_files(&proxies);
        let _ = std::process::Command::new("umount").arg("-l").arg(&proxies).status();
        let problem = problem.unwrap_err();
        assert!(problem.contains("storage.proxy_root") && problem.contains(&proxies.display().to_string()));
        assert!(problem.contains("mounted read-only; mount it read-write"), "{problem}");
    }
}
