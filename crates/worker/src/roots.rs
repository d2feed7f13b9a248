//! Roots never overlap (ADR 0009): the proxy root against every config's root, checked when the Worker starts
//! and when a config is added, after canonicalisation.

use std::path::{Path, PathBuf};

use almanac_domain::StorageConfig;

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
    match configs.iter().find(|c| almanac_media::trees_overlap(proxy_root, &c.root_path)) {
        Some(c) => Err(overlap_message(proxy_root, &c.root_path)),
        None => Ok(()),
    }
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
}
