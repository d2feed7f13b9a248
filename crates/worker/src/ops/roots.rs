//! Roots never overlap (ADR 0009, docs/safety.md invariant 4): the Worker's one home for the rule. Config roots are
//! canonical and never nest in one another; the proxy root never equals, contains or lies inside a config root.
//! Checked when the Worker starts, when a config is added or activated, and shown by `status`. Paths are
//! compared by [`almanac_domain::roots_overlap`] and, where they exist, by file-system identity
//! ([`almanac_media::trees_overlap`]).

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

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

/// How long a look at a library's root on the file system may take here: a share whose server stopped answering
/// (a NAS turned off, mounted `hard`) holds every call into it for ever, while one whose disks are waking up (ADR
/// 0013) answers within seconds.
pub const ROOT_ANSWERS_WITHIN: Duration = Duration::from_secs(30);

/// The answers of `looks`, each run on a thread of its own, those that came within `limit` of the first's start
/// (`None` for the others, whose threads are left behind: a call into a share that stopped answering returns only
/// when it answers again).
pub fn answered_within<T: Send + 'static>(
    limit: Duration,
    looks: Vec<Box<dyn FnOnce() -> T + Send>>,
) -> Vec<Option<T>> {
    let (answer, answers) = mpsc::channel();
    let count = looks.len();
    for (i, look) in looks.into_iter().enumerate() {
        let answer = answer.clone();
        std::thread::spawn(move || answer.send((i, look())));
    }
    let deadline = Instant::now() + limit;
    let mut found: Vec<Option<T>> = (0..count).map(|_| None).collect();
    for _ in 0..count {
        match answers.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((i, answered)) => found[i] = Some(answered),
            Err(_) => break,
        }
    }
    found
}

/// The answer of `look`, run on a thread of its own, if it came within `limit` ([`answered_within`]).
pub fn answered_in_time<T: Send + 'static>(limit: Duration, look: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    answered_within(limit, vec![Box::new(look)]).pop().flatten()
}

/// Checks the proxy root against every config's root, then creates it. Returns it resolved, and what to say of the
/// roots that did not answer ([`check_proxy_root`]).
pub fn prepare_proxy_root(proxy_root: &Path, configs: &[StorageConfig]) -> Result<(PathBuf, Vec<String>), String> {
    let resolved = resolved(proxy_root);
    let unanswered = check_proxy_root(&resolved, configs)?;
    std::fs::create_dir_all(&resolved)
        .map_err(|e| format!("storage.proxy_root: cannot create {}: {e}", resolved.display()))?;
    Ok((resolved, unanswered))
}

/// Refuses a proxy root that is `/`, or that equals, contains or lies inside a config's root (any config,
/// active or not, any user), by path or by file-system identity. The message names both paths and what to do. A
/// root that does not answer within [`ROOT_ANSWERS_WITHIN`] is not waited for: what to say of it is answered (its
/// crawls check it again before reading anything, and refuse it then).
pub fn check_proxy_root(proxy_root: &Path, configs: &[StorageConfig]) -> Result<Vec<String>, String> {
    if proxy_root.parent().is_none() {
        return Err("storage.proxy_root: / cannot be the proxy root: it would contain every library".into());
    }
    let looks = configs.iter().map(|c| overlap_look(proxy_root, &c.root_path)).collect();
    let mut unanswered = Vec::new();
    for (c, overlap) in configs.iter().zip(answered_within(ROOT_ANSWERS_WITHIN, looks)) {
        match overlap {
            Some(true) => return Err(overlap_message(proxy_root, &c.root_path)),
            Some(false) => {}
            None => unanswered.push(no_answer(&c.root_path)),
        }
    }
    Ok(unanswered)
}

/// Refuses a config root that overlaps the proxy root (`proxy_root` resolved), or that does not answer.
pub fn check_against_proxy_root(proxy_root: &Path, root: &Path) -> Result<(), String> {
    match answered_in_time(ROOT_ANSWERS_WITHIN, overlap_look(proxy_root, root)) {
        Some(true) => Err(overlap_message(proxy_root, root)),
        Some(false) => Ok(()),
        None => Err(no_answer(root)),
    }
}

/// Whether `root` and the proxy root overlap, looked at on the file system.
fn overlap_look(proxy_root: &Path, root: &Path) -> Box<dyn FnOnce() -> bool + Send> {
    let (proxy_root, root) = (proxy_root.to_owned(), root.to_owned());
    Box::new(move || almanac_media::trees_overlap(&proxy_root, &root))
}

/// What is said of a root that did not answer within [`ROOT_ANSWERS_WITHIN`].
fn no_answer(root: &Path) -> String {
    format!(
        "the storage root {} did not answer within {}s (a share whose server stopped answering?), so whether it \
         overlaps storage.proxy_root could not be seen",
        root.display(),
        ROOT_ANSWERS_WITHIN.as_secs()
    )
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

    /// The limits a share that stops answering is given are the ones operations.md states.
    #[test]
    fn the_limits_given_a_share_that_stops_answering_are_the_ones_the_docs_state() {
        let docs = include_str!("../../../../docs/operations.md").split_whitespace().collect::<Vec<_>>().join(" ");
        let (root, resolve) = (ROOT_ANSWERS_WITHIN.as_secs(), super::super::parse::RESOLVE_WITHIN.as_secs());
        assert!(docs.contains(&format!("`ROOT_ANSWERS_WITHIN` ({root} s,")), "docs/operations.md: {root} s");
        assert!(docs.contains(&format!("`RESOLVE_WITHIN` ({resolve} s,")), "docs/operations.md: {resolve} s");
    }

    /// What answers in time is answered, in order; what does not is `None`, and is not waited for.
    #[test]
    fn looks_that_do_not_answer_in_time_are_not_waited_for() {
        let looks: Vec<Box<dyn FnOnce() -> u32 + Send>> = vec![
            Box::new(|| 1),
            // A call into a share that stopped answering.
            Box::new(|| -> u32 {
                loop {
                    std::thread::park();
                }
            }),
            Box::new(|| 3),
        ];
        // Long enough for the others on a loaded machine.
        let limit = almanac_testdb::patience::patience(Duration::from_millis(200));
        assert_eq!(answered_within(limit, looks), [Some(1), None, Some(3)]);
    }

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
        assert_eq!(check_proxy_root(Path::new("/volume1/almanac/proxies"), &configs), Ok(vec![]));
        assert_eq!(check_proxy_root(Path::new("/volume1/photos/annex"), &configs), Ok(vec![]));
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
        let (made, _) = prepare_proxy_root(&real.join("almanac/proxies"), &ann).unwrap();
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
