//! Roots never overlap (ADR 0009, docs/safety.md invariant 4): the Worker's one home for the rule. Config roots are
//! canonical and never nest in one another; the proxy root never equals, contains or lies inside a config root.
//! Checked when the Worker starts, when a config is added or activated, and shown by `status`. Paths are
//! compared by [`almanac_domain::roots_overlap`] and, where they exist, by file-system identity
//! ([`almanac_media::trees_overlap`]).

use std::path::{Path, PathBuf};

use almanac_domain::StorageConfig;
use almanac_store_pg::PgStore;

use super::OpError;

/// A path as the file system would resolve it (links followed) without creating anything: its longest
/// existing ancestor canonicalised, and the rest appended. So a proxy root that does not exist yet compares
/// with the canonical config roots, and is checked before it is created.
pub fn resolved(path: &Path) -> PathBuf {
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        if let Ok(canonical) = std::fs::canonicalize(existing) {
            return rest.iter().rev().fold(canonical, |p, name| p.join(name));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Checks the proxy root against every config's root, then creates it. Returns it resolved.
pub fn prepare_proxy_root(proxy_root: &Path, configs: &[StorageConfig]) -> Result<PathBuf, String> {
    let resolved = resolved(proxy_root);
    check_proxy_root(&resolved, configs)?;
    std::fs::create_dir_all(&resolved)
        .map_err(|e| format!("storage.proxy_root: cannot create {}: {e}", resolved.display()))?;
    Ok(resolved)
}

/// Refuses a proxy root that is `/`, or that equals, contains or lies inside a config's root (any config,
/// active or not, any user), by path or by file-system identity. The message names both paths and what to do.
pub fn check_proxy_root(proxy_root: &Path, configs: &[StorageConfig]) -> Result<(), String> {
    if proxy_root.parent().is_none() {
        return Err("storage.proxy_root: / cannot be the proxy root: it would contain every library".into());
    }
    configs.iter().try_for_each(|c| check_against_proxy_root(proxy_root, &c.root_path))
}

/// Refuses a config root that overlaps the proxy root (`proxy_root` resolved).
pub fn check_against_proxy_root(proxy_root: &Path, root: &Path) -> Result<(), String> {
    match almanac_media::trees_overlap(proxy_root, root) {
        true => Err(overlap_message(proxy_root, root)),
        false => Ok(()),
    }
}

/// Refuses a new root that is one tree with a registered config's root only as the file system sees it (a bind
/// mount, another spelling of one folder): the store, which compares paths, refuses the rest.
pub fn check_hidden_overlap(root: &Path, configs: &[StorageConfig]) -> Result<(), String> {
    match configs.iter().find(|c| almanac_media::overlap_hidden_from_paths(&c.root_path, root)) {
        Some(other) => Err(format!(
            "the root {} is the same tree as storage config {} at {}, or nests with it (a bind mount, or another \
             spelling of one folder): two configs may never cover one tree",
            root.display(),
            other.id,
            other.root_path.display()
        )),
        None => Ok(()),
    }
}

/// Refuses to serve `config` again while its root overlaps an active config's (of those `overlapping` it, as
/// the catalogue found them) or the proxy root (`proxy_root` resolved).
pub fn check_activation(
    proxy_root: &Path,
    config: &StorageConfig,
    overlapping: &[StorageConfig],
) -> Result<(), String> {
    if let Some(other) = overlapping.iter().find(|o| o.is_active) {
        return Err(format!(
            "storage config {} ({}) overlaps active storage config {} ({}): two configs on one tree would be \
             crawled at once. Deactivate that one first (almanac-worker config deactivate {})",
            config.id,
            config.root_path.display(),
            other.id,
            other.root_path.display(),
            other.id
        ));
    }
    check_against_proxy_root(proxy_root, &config.root_path)
        .map_err(|overlap| format!("{overlap}; storage config {} stays deactivated", config.id))
}

/// The refusal for a proxy root and a storage root that overlap.
pub fn overlap_message(proxy_root: &Path, root: &Path) -> String {
    let relation = if proxy_root == root || almanac_media::same_folder(proxy_root, root) {
        "is the same folder as"
    } else if proxy_root.starts_with(root) || almanac_media::lies_within(proxy_root, root) {
        "lies inside"
    } else {
        "contains"
    };
    format!(
        "storage.proxy_root {} {relation} the storage root {}: the proxy sweep could delete originals and the \
         crawl could take proxies for photos. Set storage.proxy_root to a folder outside every library (for \
         example /var/lib/almanac/proxies)",
        proxy_root.display(),
        root.display()
    )
}

/// A root as `config add` registers it: it must exist and be a folder; links, `.` and `..` are resolved and
/// the trailing slash dropped.
pub fn canonical_config_root(root: &Path) -> Result<PathBuf, String> {
    let absolute = std::path::absolute(root).map_err(|e| format!("--root {}: {e}", root.display()))?;
    let canonical = std::fs::canonicalize(&absolute).map_err(|e| {
        format!(
            "--root {}: {e}. Register a folder that exists (mount the share first); nothing was registered",
            absolute.display()
        )
    })?;
    if !canonical.is_dir() {
        return Err(format!("--root {}: not a folder; nothing was registered", canonical.display()));
    }
    Ok(canonical)
}

/// Roots that overlap in the catalogue (an older one may hold some), on disk, or with this Worker's proxy root
/// (`proxy_root` as configured), and roots that are not canonical: what `status` lists.
pub async fn root_problems(store: &PgStore, proxy_root: &Path) -> Result<Vec<String>, OpError> {
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
    problems.extend(hidden_overlaps(&configs));
    problems.extend(configs.iter().filter_map(root_not_canonical));
    let proxy_root = resolved(proxy_root);
    problems.extend(configs.iter().filter_map(|c| check_against_proxy_root(&proxy_root, &c.root_path).err()));
    Ok(problems)
}

/// Overlaps the catalogue cannot see: one tree under two paths (a bind mount, another spelling).
fn hidden_overlaps(configs: &[StorageConfig]) -> Vec<String> {
    let (mut problems, mut rest) = (Vec::new(), configs);
    while let Some((a, others)) = rest.split_first() {
        rest = others;
        for b in others.iter().filter(|b| almanac_media::overlap_hidden_from_paths(&a.root_path, &b.root_path)) {
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
    problems
}

/// Why a registered root is not canonical (reached through a link, or spelled with `.`, `..` or doubled
/// slashes): its crawls refuse to run.
fn root_not_canonical(c: &StorageConfig) -> Option<String> {
    let canonical = c.root_path.to_str().is_some_and(|r| almanac_domain::check_canonical_root(r).is_ok());
    if !canonical {
        return Some(format!(
            "storage config {} has the root {}, which is not a canonical path (`.`, `..`, a doubled or trailing \
             slash): its crawls refuse to run. Deactivate it and register the real path",
            c.id,
            c.root_path.display()
        ));
    }
    let real = std::fs::canonicalize(&c.root_path).ok().filter(|real| *real != c.root_path)?;
    Some(format!(
        "storage config {} has the root {}, which is reached through a link (the real folder is {}): its crawls \
         refuse to run. Deactivate it and register the real path",
        c.id,
        c.root_path.display(),
        real.display()
    ))
}

#[cfg(test)]
mod tests {
    use almanac_domain::{StorageConfigId, UserId};

    use super::*;

    fn config(root: &str) -> StorageConfig {
        StorageConfig {
            id: StorageConfigId::new(),
            user_id: UserId::new(),
            root_path: root.into(),
            is_active: false,
            root_is_mount_point: None,
            mounts_below: Vec::new(),
        }
    }

    #[test]
    fn a_proxy_root_overlapping_any_config_root_is_refused_naming_both() {
        let configs = [config("/volume1/photos/ann"), config("/volume1/photos/bob")];
        for (proxy_root, relation) in [
            ("/volume1", "contains"),
            ("/volume1/photos", "contains"),
            ("/volume1/photos/bob", "is the same folder as"),
            ("/volume1/photos/ann/.proxies", "lies inside"),
        ] {
            let err = check_proxy_root(Path::new(proxy_root), &configs).unwrap_err();
            assert!(err.contains(proxy_root) && err.contains(relation) && err.contains("/volume1/photos/"), "{err}");
        }
        assert!(check_proxy_root(Path::new("/"), &configs).unwrap_err().contains("/ cannot be"));
        assert_eq!(check_proxy_root(Path::new("/volume1/almanac/proxies"), &configs), Ok(()));
        assert_eq!(check_proxy_root(Path::new("/volume1/photos/annex"), &configs), Ok(()));
    }

    #[test]
    fn a_proxy_root_is_resolved_and_checked_before_it_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(real.join("photos/ann")).unwrap();
        std::os::unix::fs::symlink(real.join("photos"), real.join("link")).unwrap();
        assert_eq!(resolved(&real.join("link/ann/.proxies/x")), real.join("photos/ann/.proxies/x"));
        let ann = [config(real.join("photos/ann").to_str().unwrap())];
        let err = prepare_proxy_root(&real.join("link/ann/.proxies"), &ann).unwrap_err();
        assert!(err.contains("lies inside"), "{err}");
        assert!(!real.join("photos/ann/.proxies").exists(), "nothing is created inside a library");
        let made = prepare_proxy_root(&real.join("almanac/proxies"), &ann).unwrap();
        assert!(made.is_dir() && made == real.join("almanac/proxies"));
    }

    #[test]
    fn config_roots_are_resolved_and_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(real.join("p/ann")).unwrap();
        std::fs::create_dir_all(real.join("p/bob")).unwrap();
        std::os::unix::fs::symlink(real.join("p/ann"), real.join("link")).unwrap();
        let expected = real.join("p/ann");
        for given in [real.join("p/ann/"), real.join("p/bob/../ann"), real.join("link"), real.join("p/./ann")] {
            assert_eq!(canonical_config_root(&given).unwrap(), expected, "{}", given.display());
        }
        assert!(canonical_config_root(&real.join("missing")).unwrap_err().contains("mount the share first"));
        std::fs::write(real.join("file"), b"x").unwrap();
        assert!(canonical_config_root(&real.join("file")).unwrap_err().contains("not a folder"));
    }

    /// A folder `p/ann` and a link `link` to it, in a fresh temporary folder: one tree under two paths.
    fn one_tree_two_paths() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(real.join("p/ann")).unwrap();
        std::fs::create_dir_all(real.join("p/bob")).unwrap();
        std::os::unix::fs::symlink(real.join("p/ann"), real.join("link")).unwrap();
        (dir, real.join("p/ann"), real.join("link"))
    }

    #[test]
    fn a_root_that_is_a_registered_tree_under_another_path_is_refused_naming_the_other() {
        let (_dir, ann, link) = one_tree_two_paths();
        let registered = config(link.to_str().unwrap());
        let err = check_hidden_overlap(&ann, std::slice::from_ref(&registered)).unwrap_err();
        assert!(err.contains(&registered.id.to_string()) && err.contains(link.to_str().unwrap()), "{err}");
        assert_eq!(check_hidden_overlap(&ann.with_file_name("bob"), &[registered]), Ok(()));
    }

    #[test]
    fn a_config_is_not_activated_beside_an_active_one_on_its_tree_nor_over_the_proxy_root() {
        let (_dir, ann, _) = one_tree_two_paths();
        let proxies = ann.parent().unwrap().with_file_name("proxies");
        let this = config(ann.to_str().unwrap());
        let (mut active, inactive) = (config(ann.join("2019").to_str().unwrap()), config("/elsewhere"));
        active.is_active = true;
        let err = check_activation(&proxies, &this, &[inactive.clone(), active.clone()]).unwrap_err();
        assert!(err.contains(&format!("overlaps active storage config {}", active.id)), "{err}");
        assert_eq!(check_activation(&proxies, &this, std::slice::from_ref(&inactive)), Ok(()));
        let err = check_activation(&ann.join(".proxies"), &this, &[inactive]).unwrap_err();
        assert!(err.contains("lies inside") && err.contains("stays deactivated"), "{err}");
    }

    #[test]
    fn overlaps_hidden_from_paths_are_listed_once_per_pair() {
        let (_dir, ann, link) = one_tree_two_paths();
        let configs = [config(link.to_str().unwrap()), config(ann.to_str().unwrap())];
        let bob = config(ann.with_file_name("bob").to_str().unwrap());
        let problems = hidden_overlaps(&[configs[0].clone(), bob.clone(), configs[1].clone()]);
        assert_eq!(problems.len(), 1, "{problems:?}");
        for c in &configs {
            assert!(problems[0].contains(&c.id.to_string()), "{problems:?}");
        }
        assert_eq!(hidden_overlaps(&[bob, configs[1].clone()]), Vec::<String>::new());
    }

    #[test]
    fn a_root_spelled_oddly_or_reached_through_a_link_is_not_canonical() {
        let (_dir, ann, link) = one_tree_two_paths();
        assert_eq!(root_not_canonical(&config(ann.to_str().unwrap())), None);
        let odd = config(&format!("{}/./2019", ann.display()));
        assert!(root_not_canonical(&odd).unwrap().contains("not a canonical path"));
        let through_link = root_not_canonical(&config(link.to_str().unwrap())).unwrap();
        let real = format!("reached through a link (the real folder is {})", ann.display());
        assert!(through_link.contains(&real), "{through_link}");
    }

    #[tokio::test]
    async fn status_lists_every_root_problem() {
        let db = almanac_testdb::TestDatabase::create().await;
        let store = PgStore::connect(db.url()).unwrap();
        let (_dir, ann, link) = one_tree_two_paths();
        for (user, root) in [("ann", &ann), ("bob", &link)] {
            let new = almanac_store_pg::NewStorageConfig { username: user.into(), root_path: root.clone() };
            store.add_storage_config(&new).await.unwrap();
        }
        // One tree under two paths, one of them a link; then also a proxy root inside that tree.
        for (proxy_root, lies_inside) in [(ann.with_file_name("proxies"), 0), (ann.join(".proxies"), 2)] {
            let problems = root_problems(&store, &proxy_root).await.unwrap();
            for (expected, times) in
                [("are one tree on disk", 1), ("reached through a link", 1), ("lies inside", lies_inside)]
            {
                let found = problems.iter().filter(|p| p.contains(expected)).count();
                assert_eq!(found, times, "{expected}: {problems:?}");
            }
            assert_eq!(problems.len(), 2 + lies_inside, "{problems:?}");
        }
    }
}
