//! Storage configs as the operator handles them: find one, add, activate, deactivate and remove, each refused
//! (changing nothing) when it would break the roots rule ([`super::roots`]).

use std::path::{Path, PathBuf};

use almanac_domain::{StorageConfig, User, ports::CatalogueStore};
use almanac_store_pg::{NewStorageConfig, PgStore, StoreError};

use super::error::Cause;
use super::{OpError, parse, roots};

/// A config named by id or root: as registered, or another spelling of its root resolved on the file system.
pub async fn find_config(store: &PgStore, given: &str) -> Result<StorageConfig, OpError> {
    // As registered first: a command naming a library on a share that answers nothing never waits for it.
    match store.find_storage_config(parse::config_as_given(given)).await {
        Err(StoreError::NotFound(_)) if given.starts_with('/') => {}
        found => return Ok(found?),
    }
    let given_path = given.to_owned();
    let key = tokio::task::spawn_blocking(move || parse::config_key(&given_path))
        .await
        .map_err(|e| OpError::Failed(Cause::from(format!("resolving {given} ended abnormally: {e}"))))??;
    Ok(store.find_storage_config(&key).await?)
}

/// The config named `given`, refused when it is deactivated (its work would never be claimed).
pub async fn active_config(store: &PgStore, given: &str) -> Result<StorageConfig, OpError> {
    let c = find_config(store, given).await?;
    if !c.is_active {
        return Err(OpError::Refused(format!(
            "storage config {} ({}) is deactivated: its work is not claimed. Activate it first (almanac-worker \
             config activate {})",
            c.id,
            c.root_path.display(),
            c.id
        )));
    }
    Ok(c)
}

/// `config add`: the root is canonicalised (it must exist), must not overlap the proxy root nor another
/// config's root (forbidden, naming both), and its mount-point identity is recorded.
pub async fn add_config(
    store: &PgStore,
    proxy_root: &Path,
    username: String,
    root: &Path,
) -> Result<(User, StorageConfig), OpError> {
    let nothing = "nothing was registered";
    let root = match roots::canonical_config_root(root) {
        Ok(root) => root,
        Err(roots::Refusal::Rule(why)) => return Err(OpError::Forbidden(why)),
        Err(refusal) => return Err(refusal.then(nothing)),
    };
    let proxy_root = roots::resolved_in_time(proxy_root).map_err(|refusal| refusal.then(nothing))?;
    roots::check_against_proxy_root(&proxy_root, &root).map_err(|refusal| refusal.then(nothing))?;
    // The store compares paths; the file system also knows a bind mount or another spelling of one folder.
    let registered = store.list_storage_configs().await?;
    roots::check_hidden_overlap(&root, &registered).map_err(|refusal| refusal.then(nothing))?;
    // Looked at before it is registered: a root that stops answering now leaves nothing registered half-way.
    let looked = root.clone();
    let is_mount_point = roots::answered_in_time(roots::ROOT_ANSWERS_WITHIN, move || {
        almanac_media::RootFolder::open(&looked).and_then(|r| r.is_mount_point())
    })
    .ok_or_else(|| roots::new_root_no_answer(&root).then(nothing))?
    .map_err(|source| OpError::Io { what: format!("examining {}", root.display()), source })?;
    let (user, config) = match store.add_storage_config(&NewStorageConfig { username, root_path: root }).await {
        Ok(added) => added,
        Err(e) => match OpError::from(e) {
            OpError::Conflict(why) => return Err(OpError::Forbidden(format!("{why}; {nothing}"))),
            other => return Err(other),
        },
    };
    store.set_root_is_mount_point(config.id, is_mount_point).await?;
    Ok((user, config))
}

/// What `config activate` did.
pub enum Activation {
    /// The config was active already.
    AlreadyActive(StorageConfig),
    /// The config is served again.
    Activated(StorageConfig),
}

/// `config activate`: refused while the config's root overlaps an active config's root or the proxy root.
pub async fn activate_config(store: &PgStore, proxy_root: &Path, given: &str) -> Result<Activation, OpError> {
    let c = find_config(store, given).await?;
    if c.is_active {
        return Ok(Activation::AlreadyActive(c));
    }
    let clash = CatalogueStore::overlapping_roots(store, c.id).await?;
    let proxy_root = roots::resolved_in_time(proxy_root)
        .map_err(|refusal| refusal.then(&format!("storage config {} stays deactivated", c.id)))?;
    roots::check_activation(&proxy_root, &c, &clash)?;
    store.set_storage_config_active(c.id, true).await?;
    Ok(Activation::Activated(c))
}

/// `config deactivate`: its work is no longer claimed; its catalogue stays.
pub async fn deactivate_config(store: &PgStore, given: &str) -> Result<StorageConfig, OpError> {
    let c = find_config(store, given).await?;
    store.set_storage_config_active(c.id, false).await?;
    Ok(c)
}

/// What removing a config deletes.
pub struct Removal {
    /// The config.
    pub config: StorageConfig,
    /// Its assets in the catalogue.
    pub assets: i64,
    /// Its work items.
    pub items: i64,
    /// Its proxy folder (named by its id under the proxy root).
    pub proxies: PathBuf,
}

impl Removal {
    /// What will be (or was) removed, in words, the originals' safety included.
    pub fn describe(&self) -> String {
        let c = &self.config;
        format!(
            "storage config {} ({}): {} asset(s) of the catalogue with their proxy rows, bursts and copies, {} work \
             item(s), and the proxy files under {}. The originals in {} are not touched",
            c.id,
            c.root_path.display(),
            self.assets,
            self.items,
            self.proxies.display(),
            c.root_path.display()
        )
    }
}

/// What `config remove` would delete, read before anything is.
pub async fn plan_removal(store: &PgStore, proxy_root: &Path, given: &str) -> Result<Removal, OpError> {
    let config = find_config(store, given).await?;
    let (assets, items) = store.removal_counts(config.id).await?;
    let proxies = proxy_root.join(config.id.to_string());
    Ok(Removal { config, assets, items, proxies })
}

/// What became of a removed config's proxy folder.
pub enum ProxyFolder {
    /// Deleted with everything in it.
    Deleted,
    /// There was none here (the Workers may use another proxy root).
    Missing,
    /// It could not be deleted: left for the operator (the proxy sweep passes over folders of configs it does not
    /// know).
    Left(std::io::Error),
}

impl ProxyFolder {
    /// What the operator should know, when there is something.
    pub fn note(&self, removal: &Removal) -> Option<String> {
        let proxies = removal.proxies.display();
        match self {
            ProxyFolder::Deleted => None,
            ProxyFolder::Missing => Some(format!(
                "there is no {proxies}: if the Workers use another storage.proxy_root (is this the service's \
                 settings file? see --config-file), delete the folder {} there by hand; the proxy sweep passes over \
                 the folders of configs it does not know",
                removal.config.id
            )),
            ProxyFolder::Left(e) => Some(format!(
                "the catalogue is removed, but {proxies} could not be deleted ({e}): delete it by hand as a user who \
                 may (the Worker's, or root); the proxy sweep passes over the folders of configs it does not know"
            )),
        }
    }
}

/// `config remove --confirm`: the catalogue rows go (refused, changing nothing, while the config is active or
/// runs), then the proxy folder. Links in it are removed, never followed; the originals are never touched.
pub async fn remove_config(store: &PgStore, removal: &Removal) -> Result<ProxyFolder, OpError> {
    match store.remove_storage_config(removal.config.id).await.map_err(OpError::from) {
        Ok(()) => {}
        Err(OpError::Conflict(why)) => return Err(OpError::Forbidden(format!("{why}; nothing was removed"))),
        Err(e) => return Err(e),
    }
    Ok(match std::fs::remove_dir_all(&removal.proxies) {
        Ok(()) => ProxyFolder::Deleted,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => ProxyFolder::Missing,
        Err(e) => ProxyFolder::Left(e),
    })
}
