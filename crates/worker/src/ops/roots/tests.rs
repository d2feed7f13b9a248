//! The roots rule's checks, on real folders.

use almanac_domain::{StorageConfigId, UserId};

use super::*;

/// The limits a share that stops answering is given are the ones operations.md states.
#[test]
fn the_limits_given_a_share_that_stops_answering_are_the_ones_the_docs_state() {
    let docs = include_str!("../../../../../docs/operations.md").split_whitespace().collect::<Vec<_>>().join(" ");
    let (root, resolve) = (ROOT_ANSWERS_WITHIN.as_secs(), crate::ops::parse::RESOLVE_WITHIN.as_secs());
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
    assert!(matches!(&err, Refusal::Rule(why) if why.contains("lies inside")), "{err:?}");
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
    let refused = |given: &Path| canonical_config_root(given).unwrap_err().said().to_owned();
    assert!(refused(&real.join("missing")).contains("mount the share first"));
    std::fs::write(real.join("file"), b"x").unwrap();
    assert!(refused(&real.join("file")).contains("not a folder"));
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
    let Refusal::Rule(err) = err else { panic!("{err:?}") };
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
    let OpError::Forbidden(err) = err else { panic!("{err:?}") };
    assert!(err.contains(&format!("overlaps active storage config {}", active.id)), "{err}");
    check_activation(&proxies, &this, std::slice::from_ref(&inactive)).unwrap();
    let err = check_activation(&ann.join(".proxies"), &this, &[inactive]).unwrap_err();
    let OpError::Forbidden(err) = err else { panic!("{err:?}") };
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
    let judged = |root: &str| root_not_canonical(&config(root), std::fs::canonicalize(root).ok().as_deref());
    assert_eq!(judged(ann.to_str().unwrap()), None);
    assert!(judged(&format!("{}/./2019", ann.display())).unwrap().contains("not a canonical path"));
    let through_link = judged(link.to_str().unwrap()).unwrap();
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
