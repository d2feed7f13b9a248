//! The known files of one folder, for a crawl of the folders a watcher saw change (ADR 0014): exactly the paths
//! below it, in the byte order of paths, page by page, own and extra paths interleaved; and the config's count of
//! active assets, which such a crawl's mass-deletion guard weighs against.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use almanac_domain::{
    AssetMetadata, CaptureSource, CaptureTime, ContentHash, MediaType, NewWorkItem, Scope, StorageConfigId, WorkKind,
    WorkQueue,
    ports::{CatalogueStore, Fence, FileFacts, IngestOutcome, KnownFile, NewAsset, Sidecar},
};
use almanac_store_pg::{NewStorageConfig, PgStore};
use almanac_testdb::TestDatabase;
use chrono::Utc;

fn asset(config: StorageConfigId, n: u8, path: &[u8]) -> NewAsset {
    let at = Utc::now();
    NewAsset {
        storage_config_id: config,
        facts: FileFacts { file_path: path.to_vec(), display_path: String::new(), size: 10, mtime: at },
        content_hash: ContentHash::from_bytes([n; 32]),
        media_type: MediaType::Image,
        capture: CaptureTime { at, offset_minutes: Some(0), source: CaptureSource::FileMtime },
        metadata: AssetMetadata::default(),
        proxies: vec![],
        replaces: None,
        sidecar: None,
    }
}

/// Every known file of `folder`, read in pages of `limit`.
async fn all_of(store: &PgStore, config: StorageConfigId, folder: &[u8], limit: i64) -> Vec<(Vec<u8>, bool)> {
    let (mut all, mut after): (Vec<KnownFile>, Option<KnownFile>) = (Vec::new(), None);
    loop {
        let page = store.known_files(config, folder, after.as_ref(), limit).await.unwrap();
        assert!(page.len() <= limit as usize);
        let Some(last) = page.last().cloned() else { break };
        all.extend(page);
        after = Some(last);
    }
    all.into_iter().map(|k| (k.facts.file_path, k.extra)).collect()
}

async fn claim(store: &PgStore, config: StorageConfigId) -> Fence {
    store.enqueue(&NewWorkItem::new(WorkKind::Crawl, Scope::Config(config)).unwrap()).await.unwrap();
    let request = support::claimer("w1");
    store.claim(&request).await.unwrap().expect("the crawl").fence
}

#[tokio::test]
async fn a_folders_known_files_are_the_paths_below_it_page_by_page_and_nothing_beside_it() {
    let db = TestDatabase::create().await;
    let store = PgStore::new(db.url(), 4, Duration::from_secs(10)).unwrap();
    let add = |user: &str| NewStorageConfig { username: user.into(), root_path: PathBuf::from(format!("/p/{user}")) };
    let config = store.add_storage_config(&add("ann")).await.unwrap().1.id;
    let other = store.add_storage_config(&add("bob")).await.unwrap().1.id;
    let fence = claim(&store, config).await;
    // Around `a`'s range on both sides: `a` itself, `a b/` and `a.jpg` (before `a/`), `a0.jpg` and `ab/` (after).
    let paths: [&[u8]; 10] = [
        b"a",
        b"a b/x.jpg",
        b"a.jpg",
        b"a/b.jpg",
        b"a/b/c.jpg",
        b"a/gone.jpg",
        b"a/\xff.jpg",
        b"a0.jpg",
        b"ab/y.jpg",
        b"z.jpg",
    ];
    let mut ids = Vec::new();
    for (n, path) in paths.iter().enumerate() {
        let IngestOutcome::Ingested(id) = store.ingest(fence, &asset(config, n as u8, path)).await.unwrap() else {
            panic!("ingested")
        };
        ids.push(id);
    }
    let copy =
        |path: &[u8]| FileFacts { file_path: path.to_vec(), display_path: String::new(), size: 1, mtime: Utc::now() };
    store.record_extra_path(fence, config, ids[0], &copy(b"a/b.jpg.copy")).await.unwrap();
    store.record_extra_path(fence, config, ids[0], &copy(b"a0/copy.jpg")).await.unwrap();
    assert_eq!(store.soft_delete(fence, config, &[ids[5]], &[]).await.unwrap(), 1);
    // Another config's files in the same range are never its.
    let bob = claim(&store, other).await;
    store.ingest(bob, &asset(other, 99, b"a/b.jpg")).await.unwrap();

    let own = |p: &[u8]| (p.to_vec(), false);
    for limit in [1, 2, 3, 100] {
        let a = all_of(&store, config, b"a", limit).await;
        let expected = vec![own(b"a/b.jpg"), (b"a/b.jpg.copy".to_vec(), true), own(b"a/b/c.jpg"), own(b"a/\xff.jpg")];
        assert_eq!(a, expected, "folder a in pages of {limit}");
        assert_eq!(all_of(&store, config, b"a/b", limit).await, vec![own(b"a/b/c.jpg")]);
        assert_eq!(all_of(&store, config, b"a b", limit).await, vec![own(b"a b/x.jpg")]);
        assert_eq!(all_of(&store, config, b"a0", limit).await, vec![(b"a0/copy.jpg".to_vec(), true)]);
        assert!(all_of(&store, config, b"a/b.jpg", limit).await.is_empty(), "a file is not a folder");
        assert!(all_of(&store, config, b"nowhere", limit).await.is_empty());
        assert_eq!(all_of(&store, config, b"", limit).await.len(), 11, "the whole root: 9 own paths and 2 copies");
    }
    assert_eq!(store.active_assets(config).await.unwrap(), 9, "the soft-deleted one is not counted");
    assert_eq!(store.active_assets(other).await.unwrap(), 1);

    // The copies of some assets, wherever they are, in the byte order of their paths; none of another asset's.
    store.record_extra_path(fence, config, ids[9], &copy(b"0/z-copy.jpg")).await.unwrap();
    let extra = |assets: Vec<_>| {
        let store = store.clone();
        async move {
            let found = store.extra_paths_of(config, &assets).await.unwrap();
            assert!(found.iter().all(|k| k.extra), "only copies");
            found.into_iter().map(|k| (k.asset_id, k.facts.file_path)).collect::<Vec<_>>()
        }
    };
    assert_eq!(
        extra(vec![ids[0], ids[9]]).await,
        [(ids[9], b"0/z-copy.jpg".to_vec()), (ids[0], b"a/b.jpg.copy".to_vec()), (ids[0], b"a0/copy.jpg".to_vec())]
    );
    assert_eq!(extra(vec![ids[9]]).await, [(ids[9], b"0/z-copy.jpg".to_vec())]);
    assert!(extra(vec![ids[1], ids[2]]).await.is_empty(), "assets without copies");
    assert!(extra(Vec::new()).await.is_empty());

    // A copy of an asset no longer active (it lost its own path since the copy was placed) revives it there.
    store.record_extra_path(fence, config, ids[5], &copy(b"revived/gone.jpg")).await.unwrap();
    assert_eq!(store.active_assets(config).await.unwrap(), 10, "revived");
    assert_eq!(all_of(&store, config, b"revived", 100).await, vec![own(b"revived/gone.jpg")], "as its own path");
}

/// A known file comes back with the facts it was recorded with: its size and time, and its sidecar (path, size
/// and time) when it had one, none when it had none. A crawl compares them with what it finds on disk: a sidecar
/// read back as missing would have every photo's capture time read again on each crawl.
#[tokio::test]
async fn a_known_file_comes_back_with_its_size_time_and_sidecar() {
    let db = TestDatabase::create().await;
    let store = PgStore::new(db.url(), 4, Duration::from_secs(10)).unwrap();
    let new = NewStorageConfig { username: "ann".into(), root_path: PathBuf::from("/p/ann") };
    let config = store.add_storage_config(&new).await.unwrap().1.id;
    let fence = claim(&store, config).await;
    // Whole microseconds: what the database keeps.
    let at = |s: i64| chrono::DateTime::from_timestamp(1_700_000_000 + s, 123_456_000).unwrap();
    let sidecar = Sidecar { path: b"f/a.jpg.xmp".to_vec(), size: 4_321, mtime: at(7) };
    let mut with = asset(config, 1, b"f/a.jpg");
    with.facts.size = 5_000_000_000;
    with.facts.mtime = at(3);
    with.sidecar = Some(sidecar.clone());
    let mut without = asset(config, 2, b"f/b.jpg");
    without.facts.mtime = at(5);
    for a in [&with, &without] {
        assert!(matches!(store.ingest(fence, a).await.unwrap(), IngestOutcome::Ingested(_)));
    }
    let known = store.known_files(config, b"f", None, 10).await.unwrap();
    let facts: Vec<_> = known.iter().map(|k| (k.facts.file_path.clone(), k.facts.size, k.facts.mtime)).collect();
    assert_eq!(facts, [(b"f/a.jpg".to_vec(), 5_000_000_000, at(3)), (b"f/b.jpg".to_vec(), 10, at(5))]);
    assert_eq!(known[0].sidecar, Some(sidecar), "the sidecar recorded");
    assert_eq!(known[1].sidecar, None, "no sidecar recorded");
}
