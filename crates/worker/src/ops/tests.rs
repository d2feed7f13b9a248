//! The operator's actions over a real database and real folders.

use std::path::PathBuf;

use almanac_domain::{AssetId, NewWorkItem, Scope, Status, WorkItemId, WorkKind, WorkQueue};
use almanac_store_pg::{ItemFilter, PgStore};
use almanac_testdb::TestDatabase;

use super::configs::ProxyFolder;
use super::*;
use crate::tests::sql;

/// A store over a fresh database, a library folder registered for ann, and the folder the test owns.
async fn with_a_config() -> (TestDatabase, PgStore, almanac_domain::StorageConfig, tempfile::TempDir) {
    let db = TestDatabase::create().await;
    let store = PgStore::connect(db.url()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("photos")).unwrap();
    let (_, config) =
        add_config(&store, &dir.path().join("proxies"), "ann".into(), &dir.path().join("photos")).await.unwrap();
    (db, store, config, dir)
}

async fn set_status(db: &TestDatabase, id: WorkItemId, status: Status) {
    sql(db.url(), &format!("UPDATE work_items SET status = '{status}', finished_at = now() WHERE id = '{id}'")).await;
}

#[tokio::test]
async fn a_filter_is_read_from_names_and_retry_failed_queues_again_only_the_failed_items_it_names() {
    let (db, store, config, _dir) = with_a_config().await;
    let filter = item_filter(&store, Some("failed"), Some("burst-detection"), Some(&config.id.to_string())).await;
    let expected =
        ItemFilter { status: Some(Status::Failed), kind: Some(WorkKind::BurstDetection), config: Some(config.id) };
    assert_eq!(filter.unwrap(), expected);
    let mut items = Vec::new();
    for (kind, status) in
        [(WorkKind::Crawl, Status::Failed), (WorkKind::Crawl, Status::Cancelled), (WorkKind::Purge, Status::Failed)]
    {
        let id = store.enqueue(&NewWorkItem::new(kind, Scope::Config(config.id)).unwrap()).await.unwrap().item.id;
        set_status(&db, id, status).await;
        items.push(id);
    }
    let crawls = item_filter(&store, None, Some("crawl"), None).await.unwrap();
    assert_eq!(retry_failed(&store, crawls).await.unwrap(), [items[0]], "the failed crawl, not the cancelled one");
    let mut statuses = Vec::new();
    for id in &items {
        statuses.push(store.get(*id).await.unwrap().unwrap().status);
    }
    assert_eq!(statuses, [Status::Queued, Status::Cancelled, Status::Failed]);
}

#[tokio::test]
async fn a_regeneration_deletes_the_proxies_in_chunks_then_crawls_and_a_deactivated_config_is_refused() {
    let (_db, store, config, _dir) = with_a_config().await;
    let assets: Vec<AssetId> = (0..=work::ASSETS_PER_DELETION).map(|_| AssetId::new()).collect();
    let items = work::regeneration_items(&config, &assets).unwrap();
    let kinds: Vec<WorkKind> = items.iter().map(NewWorkItem::kind).collect();
    assert_eq!(kinds, [WorkKind::ProxyDeletion, WorkKind::ProxyDeletion, WorkKind::Crawl]);
    let made = regenerate(&store, &config.id.to_string()).await.unwrap();
    assert_eq!((made.assets, made.items.len()), (0, 1), "no assets: only the crawl");
    let crawl = store.get(made.crawl()).await.unwrap().unwrap();
    assert_eq!((crawl.kind, crawl.scope), (WorkKind::Crawl, Scope::Config(config.id)));
    deactivate_config(&store, &config.id.to_string()).await.unwrap();
    let refused = regenerate(&store, &config.id.to_string()).await.err().expect("refused");
    assert!(matches!(&refused, OpError::Refused(why) if why.contains("activate it first")), "{refused}");
}

#[tokio::test]
async fn a_removal_says_what_goes_and_what_became_of_the_proxy_folder() {
    for (folder, note) in
        [("a folder", None), ("nothing", Some("there is no ")), ("a file", Some("could not be deleted"))]
    {
        let (_db, store, config, dir) = with_a_config().await;
        deactivate_config(&store, &config.id.to_string()).await.unwrap();
        let removal = plan_removal(&store, &dir.path().join("proxies"), &config.id.to_string()).await.unwrap();
        let proxies: PathBuf = dir.path().join("proxies").join(config.id.to_string());
        assert_eq!(removal.proxies, proxies);
        let said = removal.describe();
        for named in
            [config.id.to_string(), "0 asset(s)".into(), "0 work item(s)".into(), proxies.display().to_string()]
        {
            assert!(said.contains(&named), "{named}: {said}");
        }
        assert!(said.ends_with(&format!("The originals in {} are not touched", config.root_path.display())));
        match folder {
            "a folder" => std::fs::create_dir_all(proxies.join("ab")).unwrap(),
            "a file" => {
                std::fs::create_dir_all(proxies.parent().unwrap()).unwrap();
                std::fs::write(&proxies, b"not a folder").unwrap();
            }
            _ => {}
        }
        let became = remove_config(&store, &removal).await.unwrap();
        let noted = became.note(&removal);
        match note {
            None => assert!(matches!(became, ProxyFolder::Deleted) && noted.is_none() && !proxies.exists()),
            // What is left is the operator's to delete: the proxy sweep passes over a config it does not know.
            Some(words) => assert!(
                noted.as_deref().is_some_and(|n| n.contains(words) && n.contains("by hand") && !n.contains("sweep do")),
                "{folder}: {noted:?}"
            ),
        }
        assert!(store.list_storage_configs().await.unwrap().is_empty(), "{folder}: the config is gone");
    }
}

#[test]
fn a_regeneration_s_crawl_is_its_last_item() {
    let config = almanac_domain::StorageConfig {
        id: almanac_domain::StorageConfigId::new(),
        user_id: almanac_domain::UserId::new(),
        root_path: "/photos".into(),
        is_active: true,
        root_is_mount_point: None,
        mounts_below: Vec::new(),
    };
    let (deletion, crawl) = (WorkItemId::new(), WorkItemId::new());
    let regeneration = work::Regeneration { config, assets: 1, items: vec![deletion, crawl] };
    assert_eq!(regeneration.crawl(), crawl);
}
