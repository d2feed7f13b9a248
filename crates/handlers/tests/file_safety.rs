//! File-system safety (ADR 0009) on real folders and a real catalogue: a missing share never looks like a
//! deleted library, roots never overlap, originals are read only beneath their root, a scoped item touches only
//! its config, and the sweep deletes only what is ours.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use almanac_domain::{
    ContentHash, Scope, StorageConfigId, WorkKind,
    ports::{CatalogueError, CatalogueStore, HashMatch, KnownFile, MaintenanceStore},
};
use almanac_handlers::{CrawlHandler, CrawlSettings, ProxyDeletionHandler, ProxySweepHandler};
use almanac_media::fixtures::{self, FixtureExif};
use almanac_store_pg::{NewStorageConfig, PgStore};
use diesel::sql_query;
use diesel::sql_types::{Text, Uuid};
use diesel_async::RunQueryDsl;
use support::twist::{AfterListing, CatalogueTwist, MaintenanceTwist, RealStore, Twisted};
use support::{Library, library};
use tokio_util::sync::CancellationToken;

fn photo(seed: u32) -> Vec<u8> {
    fixtures::jpeg(64, 48, seed, false, &FixtureExif::camera("2019:07:04 18:30:05", "+02:00"))
}

fn hash_of(content: &[u8]) -> String {
    almanac_media::hash_bytes(content).hash.as_hex().to_owned()
}

impl Library {
    async fn active_count(&self) -> i64 {
        self.count(&format!(
            "SELECT count(*) AS n FROM media_assets WHERE storage_config_id = '{}' AND NOT is_soft_deleted",
            self.config
        ))
        .await
    }

    async fn refused(&self, payload: serde_json::Value) -> almanac_executor::HandlerError {
        self.crawl_with(payload, CancellationToken::new()).await.expect_err("the crawl refuses")
    }

    /// A library of `n` photos, crawled once.
    async fn with_photos(&self, n: u32) {
        for i in 0..n {
            self.write(&format!("{}/IMG_{i:04}.jpg", 2019 + i % 3), &photo(i));
        }
        assert_eq!(self.crawl().await["ingested"], u64::from(n));
    }

    /// "Unmounts" the share: the library moves away and an ordinary folder holding `leftovers` takes its place.
    fn unmount_leaving(&self, leftovers: &[&str]) -> PathBuf {
        let away = self.root.with_file_name("unmounted-share");
        std::fs::rename(&self.root, &away).unwrap();
        std::fs::create_dir_all(&self.root).unwrap();
        for rel in leftovers {
            let path = self.root.join(rel);
            if rel.ends_with('/') {
                std::fs::create_dir_all(&path).unwrap();
            } else {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, b"leftover").unwrap();
            }
        }
        away
    }

    fn remount(&self, away: &Path) {
        std::fs::remove_dir_all(&self.root).unwrap();
        std::fs::rename(away, &self.root).unwrap();
    }

    async fn set_mount_point(&self, value: Option<bool>) {
        sql_query("UPDATE storage_configs SET root_is_mount_point = $2 WHERE id = $1")
            .bind::<Uuid, _>(self.config.as_uuid())
            .bind::<diesel::sql_types::Nullable<diesel::sql_types::Bool>, _>(value)
            .execute(&mut self.conn().await)
            .await
            .unwrap();
    }

    async fn mount_point(&self) -> Option<bool> {
        self.store.storage_config(self.config).await.unwrap().unwrap().root_is_mount_point
    }
}

#[tokio::test]
async fn a_mount_point_left_with_only_leftovers_is_refused_and_nothing_is_soft_deleted() {
    let lib = library().await;
    lib.with_photos(25).await;
    // What NAS systems and desktops leave on a mount point without its mount: hidden files, system folders
    // (with their own thumbnails inside), files that are not media, and media-named files in skipped folders.
    let leftover_sets: [&[&str]; 4] = [
        &[".DS_Store", "@eaDir/"],
        &["lost+found/", "#recycle/2019/IMG_0001.jpg", "@eaDir/IMG_0002.jpg/SYNOPHOTO_THUMB_XL.jpg"],
        &["Thumbs.db", "desktop.ini", ".Trashes/", "README.txt", ".localized"],
        &["#snapshot/daily/2019/IMG_0003.jpg", ".thumbnails/large/x.png", "$RECYCLE.BIN/"],
    ];
    for leftovers in leftover_sets {
        let away = lib.unmount_leaving(leftovers);
        let err = lib.refused(serde_json::json!({})).await;
        assert!(err.retryable, "{leftovers:?}: {err:?}");
        assert!(err.message.contains("holds no photos or videos"), "{leftovers:?}: {}", err.message);
        assert!(err.message.contains("25 active assets") && err.message.contains("is the share mounted"));
        assert_eq!(lib.active_count().await, 25, "{leftovers:?}: nothing soft-deleted");
        lib.remount(&away);
    }
    // Mounted again, the library is all there and nothing was lost.
    let result = lib.crawl().await;
    assert_eq!((result["unchanged"].as_u64(), result["soft_deleted"].as_u64()), (Some(25), Some(0)), "{result}");
    // An operator who really emptied the library confirms it.
    lib.unmount_leaving(&[".DS_Store"]);
    let result = lib.crawl_with(serde_json::json!({"allow_mass_deletion": true}), CancellationToken::new()).await;
    assert_eq!(result.unwrap()["soft_deleted"], 25);
}

#[tokio::test]
async fn a_root_that_stopped_being_a_mount_point_is_refused_until_confirmed() {
    let lib = library().await;
    lib.with_photos(3).await;
    assert_eq!(lib.mount_point().await, Some(false), "a complete crawl records the root's identity");
    // Registered while the share was mounted; now the folder under the mount point shows through, photos and
    // all (a stale copy): the crawl must not treat it as the library.
    lib.set_mount_point(Some(true)).await;
    let err = lib.refused(serde_json::json!({})).await;
    assert!(err.retryable && err.message.contains("was a mount point"), "{err:?}");
    assert!(err.message.contains("root_moved"), "it says how to confirm: {}", err.message);
    assert_eq!(lib.active_count().await, 3);
    let result = lib.crawl_with(serde_json::json!({"root_moved": true}), CancellationToken::new()).await.unwrap();
    assert_eq!(result["unchanged"], 3);
    assert_eq!(lib.mount_point().await, Some(false), "the new identity is recorded");
    assert_eq!(lib.crawl().await["unchanged"], 3, "and accepted from then on");
}

/// A disk mounted beneath the library (a NAS's USB disk of old photos at `usb`, and a backup copy of a photo of the
/// main disk) that is not mounted any more is not a folder whose photos were deleted, whether its mount point was
/// removed (as udisks does) or is left empty. Whole-root crawls and crawls of folders (a watcher's) keep what the
/// catalogue has under it, and an asset whose only file left is its copy there; mounted again, everything is there;
/// confirmed (`root_moved`), it is walked as it is. A fifth of the library: the mass-deletion guard would let it go.
#[tokio::test]
async fn a_disk_not_mounted_beneath_the_root_is_not_taken_for_deleted_photos() {
    use almanac_media::scratch_volume::ScratchVolume;
    let lib = library().await;
    lib.with_photos(12).await;
    let usb = lib.root.join("usb");
    let Some(volume) = ScratchVolume::small(&usb, 4096, false) else { return };
    let old: Vec<Vec<u8>> = (0..3).map(|i| photo(100 + i)).collect();
    let put_back = |lib: &Library| {
        for (i, content) in old.iter().enumerate() {
            lib.write(&format!("usb/old/IMG_{i}.jpg"), content);
        }
        lib.write("usb/backup/IMG_0000.jpg", &photo(0));
    };
    put_back(&lib);
    let first = lib.crawl().await;
    assert_eq!((first["ingested"].as_u64(), first["copies"].as_u64()), (Some(3), Some(1)), "{first}");
    let recorded = async |lib: &Library| lib.store.storage_config(lib.config).await.unwrap().unwrap().mounts_below;
    assert_eq!(recorded(&lib).await, [b"usb".to_vec()], "the mount point beneath the root is recorded");

    // Not mounted, its mount point removed; the original of the copy on it deleted from the main disk.
    drop(volume);
    assert!(!usb.exists());
    std::fs::remove_file(lib.root.join("2019/IMG_0000.jpg")).unwrap();
    let kept_by = async |lib: &Library, payload: serde_json::Value, said: &str| {
        let result = lib.crawl_with(payload.clone(), CancellationToken::new()).await.unwrap();
        assert_eq!((result["soft_deleted"].as_u64(), lib.active_count().await), (Some(0), 15), "{payload}: {result}");
        let reasons = result["unreadable_folders"].to_string();
        assert!(reasons.contains(said) && reasons.contains("root_moved"), "{payload}: {result}");
    };
    for payload in [
        serde_json::json!({}),
        serde_json::json!({"folders": ["usb"]}),
        serde_json::json!({"folders": ["usb/old"]}),
        serde_json::json!({"folders": ["2019", "usb"]}),
    ] {
        kept_by(&lib, payload, "is not there now as a folder").await;
    }
    let main_disk = lib.crawl_with(serde_json::json!({"folders": ["2019"]}), CancellationToken::new()).await.unwrap();
    assert_eq!((main_disk["soft_deleted"].as_u64(), lib.active_count().await), (Some(0), 15), "its copy: {main_disk}");
    // A link where its mount point was (to where the disk is mounted now, say): not the disk's folder.
    let elsewhere = lib.dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &usb).unwrap();
    kept_by(&lib, serde_json::json!({}), "is not there now as a folder").await;
    std::fs::remove_file(&usb).unwrap();
    // Its empty mount point left instead.
    std::fs::create_dir(&usb).unwrap();
    kept_by(&lib, serde_json::json!({}), "is not one now").await;
    kept_by(&lib, serde_json::json!({"folders": ["usb/old"]}), "is not one now").await;
    assert_eq!(recorded(&lib).await, [b"usb".to_vec()], "kept while not mounted");

    let volume = ScratchVolume::small(&usb, 4096, false).unwrap();
    put_back(&lib);
    lib.write("2019/IMG_0000.jpg", &photo(0));
    let back = lib.crawl().await;
    let counts = (back["soft_deleted"].as_u64(), back["ingested"].as_u64(), lib.active_count().await);
    assert_eq!(counts, (Some(0), Some(0), 15), "{back}");

    drop(volume);
    std::fs::create_dir(&usb).unwrap();
    let confirmed = lib.crawl_with(serde_json::json!({"root_moved": true}), CancellationToken::new()).await.unwrap();
    assert_eq!((confirmed["soft_deleted"].as_u64(), lib.active_count().await), (Some(3), 12), "{confirmed}");
    assert!(recorded(&lib).await.is_empty(), "an ordinary folder now");
}

#[tokio::test]
async fn mass_deletion_is_proportional_in_libraries_of_ten_or_more() {
    let lib = library().await;
    lib.with_photos(20).await;
    let gone = |range: std::ops::Range<u32>| {
        for i in range {
            std::fs::remove_file(lib.root.join(format!("{}/IMG_{i:04}.jpg", 2019 + i % 3))).unwrap();
        }
    };
    gone(0..11);
    let err = lib.refused(serde_json::json!({})).await;
    assert!(err.retryable && err.message.contains("11 of 20") && err.message.contains("allow_mass_deletion"));
    assert_eq!(lib.active_count().await, 20, "nothing soft-deleted");
    let result = lib.crawl_with(serde_json::json!({"allow_mass_deletion": true}), CancellationToken::new()).await;
    assert_eq!(result.unwrap()["soft_deleted"], 11);
    // Nine remain: a library of nine is below the floor of ten, so losing eight of them is allowed.
    gone(11..19);
    assert_eq!(lib.crawl().await["soft_deleted"], 8);
}

/// Another card or disk mounted where the library was, its files under the same names (`DCIM/100CANON/IMG_0001.JPG`
/// on every camera's card): each file of other content at an asset's path would take it, and that asset be
/// soft-deleted. Those count as deletions for the mass-deletion guard, and are held back until it has weighed them:
/// the crawl stops once more than half of a library of ten or more would be replaced, with nothing replaced, and
/// its next attempt meets the library as it was and stops again. Before, all 20 were soft-deleted and the crawl
/// succeeded, reporting nothing soft-deleted. Confirmed (files really edited in place), it goes on.
#[tokio::test]
async fn files_of_other_content_at_the_library_s_paths_are_weighed_by_the_guard_before_they_replace_it() {
    let lib = library().await;
    lib.with_photos(20).await;
    let replaced = "SELECT count(*) AS n FROM media_assets WHERE is_soft_deleted";
    for i in 0..20 {
        lib.write(&format!("{}/IMG_{i:04}.jpg", 2019 + i % 3), &photo(100 + i));
    }
    for attempt in 1..=2 {
        let err = lib.refused(serde_json::json!({})).await;
        assert!(err.retryable && err.message.contains("hold other content"), "{attempt}: {}", err.message);
        assert!(err.message.contains("Nothing was replaced or deleted"), "{}", err.message);
        assert!(err.message.contains("allow_mass_deletion"), "{}", err.message);
        assert_eq!((lib.count(replaced).await, lib.active_count().await), (0, 20), "attempt {attempt}");
    }
    let result = lib.crawl_with(serde_json::json!({"allow_mass_deletion": true}), CancellationToken::new()).await;
    assert_eq!(result.unwrap()["replaced"], 20, "confirmed");
    assert_eq!((lib.active_count().await, lib.count(replaced).await), (20, 20));
}

/// What vanished and what other files would replace are weighed together, before any is written: 8 photos deleted
/// and 5 written over, 13 of 20 gone in one crawl, is refused with nothing deleted or replaced, at every attempt;
/// each alone was under half. Before, the crawl succeeded with both. A few replaced alone go through.
#[tokio::test]
async fn deletions_and_replacements_together_are_weighed_by_the_guard() {
    let lib = library().await;
    lib.with_photos(20).await;
    for i in 0..8 {
        std::fs::remove_file(lib.root.join(format!("{}/IMG_{i:04}.jpg", 2019 + i % 3))).unwrap();
    }
    for i in 8..13 {
        lib.write(&format!("{}/IMG_{i:04}.jpg", 2019 + i % 3), &photo(100 + i));
    }
    for attempt in 1..=2 {
        let err = lib.refused(serde_json::json!({})).await;
        assert!(err.message.contains("refusing to soft-delete 8 of 20"), "{}", err.message);
        assert!(err.message.contains("and to replace 5 more"), "{}", err.message);
        let soft_deleted = lib.count("SELECT count(*) AS n FROM media_assets WHERE is_soft_deleted").await;
        assert_eq!(soft_deleted, 0, "attempt {attempt}: nothing deleted or replaced");
    }
    for i in 0..8 {
        lib.write(&format!("{}/IMG_{i:04}.jpg", 2019 + i % 3), &photo(i));
    }
    let result = lib.crawl().await;
    assert_eq!((result["replaced"].as_u64(), result["soft_deleted"].as_u64()), (Some(5), Some(0)), "{result}");
}

/// A confirmation holds for the first attempt of its crawl: the operator confirmed what a refusal described, and a
/// later attempt of that item (after a retry, an outage, a lost lease, a shutdown) may meet a share gone meanwhile.
/// Here the confirmed crawl's first attempt ended before settling; by its second the share is unmounted, and the
/// second is refused like an unconfirmed crawl, nothing soft-deleted. Before, it soft-deleted the whole library.
#[tokio::test]
async fn a_confirmation_of_deletions_holds_for_the_first_attempt_of_its_crawl_only() {
    let lib = library().await;
    lib.with_photos(20).await;
    for i in 0..11 {
        std::fs::remove_file(lib.root.join(format!("{}/IMG_{i:04}.jpg", 2019 + i % 3))).unwrap();
    }
    let confirmed = lib.item(serde_json::json!({"allow_mass_deletion": true})).await;
    // Its first attempt ended before it settled anything (a retryable error, an outage, a shutdown).
    sql_query("UPDATE work_items SET attempt = 1 WHERE id = $1")
        .bind::<Uuid, _>(confirmed.id.as_uuid())
        .execute(&mut lib.conn().await)
        .await
        .unwrap();
    let away = lib.unmount_leaving(&["@eaDir/"]);
    let err = lib.run_in(&lib.handler(), confirmed, CancellationToken::new()).await.unwrap_err();
    assert!(err.retryable, "{err:?}");
    assert!(err.message.contains("holds for the first attempt of its crawl"), "{}", err.message);
    assert_eq!(lib.active_count().await, 20, "nothing soft-deleted");
    lib.remount(&away);
    // A crawl confirmed again runs its first attempt on what the operator now sees.
    let result = lib.crawl_with(serde_json::json!({"allow_mass_deletion": true}), CancellationToken::new()).await;
    assert_eq!(result.unwrap()["soft_deleted"], 11);
}

#[tokio::test]
async fn a_root_overlapping_the_proxy_root_is_refused_by_the_crawl() {
    let lib = library().await;
    lib.write("IMG.jpg", &photo(1));
    for proxy_root in [lib.root.parent().unwrap().to_path_buf(), lib.root.join(".almanac-proxies"), lib.root.clone()] {
        let settings = CrawlSettings { proxy_root: proxy_root.clone(), max_concurrent_files: 1, ..lib.settings() };
        let handler = CrawlHandler::new(lib.store.clone(), settings);
        let item = lib.item(serde_json::json!({})).await;
        let err = lib.run_in(&handler, item, CancellationToken::new()).await.unwrap_err();
        assert!(!err.retryable && err.message.contains("overlap"), "{}: {err:?}", proxy_root.display());
        assert!(err.message.contains(&proxy_root.display().to_string()));
    }
    assert_eq!(lib.active_count().await, 0, "nothing ingested");
    assert!(!lib.root.join(".almanac-proxies").exists(), "nothing written");
}

#[tokio::test]
async fn roots_of_an_older_catalogue_that_overlap_are_refused_by_the_crawl_and_reported() {
    let lib = library().await;
    lib.write("bob/IMG.jpg", &photo(1));
    // An older catalogue, from before roots were checked: eve's root inside ann's, its config's id the lowest there
    // is (so ordered by id, eve's would come first: the pair is reported outer root first, whatever the ids).
    let eve_root = lib.root.join("bob");
    sql_query(
        "WITH u AS (INSERT INTO users (id, username) VALUES (gen_random_uuid(), 'eve') RETURNING id)
         INSERT INTO storage_configs (id, user_id, root_path)
         SELECT '00000000-0000-4000-8000-000000000000', u.id, $1 FROM u",
    )
    .bind::<Text, _>(eve_root.to_str().unwrap())
    .execute(&mut lib.conn().await)
    .await
    .unwrap();
    let err = lib.refused(serde_json::json!({})).await;
    assert!(!err.retryable && err.message.contains("overlaps storage config"), "{err:?}");
    assert!(err.message.contains(eve_root.to_str().unwrap()) && err.message.contains("config deactivate"));
    let overlaps = lib.store.root_overlaps().await.unwrap();
    assert_eq!(overlaps.len(), 1);
    assert_eq!((overlaps[0].first.2.as_str(), overlaps[0].second.2.as_str()), ("ann", "eve"), "the outer root first");
    assert_eq!(lib.active_count().await, 0);
}

/// The catalogue as the crawl sees it, with one twist that puts an event at an exact step of the crawl.
struct Interposed {
    inner: Arc<PgStore>,
    twist: Twist,
}

enum Twist {
    /// Loading the known files waits until the walk has listed (and closed) a folder, then runs the swap: between
    /// the listing and the reading ([`AfterListing`]).
    SwapAfterListing(AfterListing),
    /// The crawl is cancelled while a file's content is looked up, after it was read and before it is written.
    CancelAtPlacement(CancellationToken),
}

impl Interposed {
    /// `swap` runs once the walk has listed the folder `last`.
    fn swap_after_listing(inner: Arc<PgStore>, last: &Path, swap: impl FnOnce() + Send + 'static) -> Twisted<Self> {
        Twisted(Self { inner, twist: Twist::SwapAfterListing(AfterListing::new(last, swap)) })
    }

    fn cancel_at_placement(inner: Arc<PgStore>, cancel: CancellationToken) -> Twisted<Self> {
        Twisted(Self { inner, twist: Twist::CancelAtPlacement(cancel) })
    }
}

impl RealStore for Interposed {
    fn store(&self) -> &PgStore {
        &self.inner
    }
}

impl CatalogueTwist for Interposed {
    async fn known_files(
        &self,
        config: StorageConfigId,
        folder: &[u8],
        after: Option<&KnownFile>,
        limit: i64,
    ) -> Result<Vec<KnownFile>, CatalogueError> {
        if let Twist::SwapAfterListing(after_listing) = &self.twist {
            after_listing.wait_and_run().await;
        }
        self.inner.known_files(config, folder, after, limit).await
    }

    async fn find_by_hash(
        &self,
        config: StorageConfigId,
        hash: &ContentHash,
    ) -> Result<Vec<HashMatch>, CatalogueError> {
        if let Twist::CancelAtPlacement(cancel) = &self.twist {
            cancel.cancel();
        }
        self.inner.find_by_hash(config, hash).await
    }
}

#[tokio::test]
async fn a_file_or_folder_swapped_for_a_link_after_listing_is_never_read() {
    let lib = library().await;
    // Bob's photos, outside ann's root, which the all-user Worker can read.
    let bob = lib.dir.path().join("bob");
    std::fs::create_dir_all(bob.join("album")).unwrap();
    let (bobs_photo, bobs_album_photo) = (photo(100), photo(101));
    std::fs::write(bob.join("secret.jpg"), &bobs_photo).unwrap();
    std::fs::write(bob.join("album/IMG_2.jpg"), &bobs_album_photo).unwrap();
    // Ann's library: a file and a folder she will swap for links once the walk has listed them.
    lib.write("in/img_1.jpg", &photo(1));
    lib.write("in/a/IMG_2.jpg", &photo(2));
    lib.write("keep/IMG_3.jpg", &photo(3));
    let root = lib.root.clone();
    let bob_for_swap = bob.clone();
    // In the byte order of paths: `in` is listed, then `in/a` (before `in/img_1.jpg`), and the walk waits for the
    // first page of known files at `in/a/IMG_2.jpg`, the first file.
    let catalogue = Interposed::swap_after_listing(lib.store.clone(), &root.join("in/a"), move || {
        std::fs::remove_file(root.join("in/img_1.jpg")).unwrap();
        std::os::unix::fs::symlink(bob_for_swap.join("secret.jpg"), root.join("in/img_1.jpg")).unwrap();
        std::fs::remove_dir_all(root.join("in/a")).unwrap();
        std::os::unix::fs::symlink(bob_for_swap.join("album"), root.join("in/a")).unwrap();
    });
    let settings = CrawlSettings { max_concurrent_files: 2, ..lib.settings() };
    let handler = CrawlHandler::new(Arc::new(catalogue), settings);
    let item = lib.item(serde_json::json!({})).await;
    let result = lib.run_in(&handler, item, CancellationToken::new()).await.unwrap().unwrap();
    assert!(std::fs::symlink_metadata(lib.root.join("in/a")).unwrap().is_symlink(), "the swap happened");
    assert_eq!((result["ingested"].as_u64(), result["failed"].as_u64()), (Some(1), Some(2)), "{result}");
    let reasons: Vec<String> =
        result["failures"].as_array().unwrap().iter().map(|f| f["reason"].as_str().unwrap().to_owned()).collect();
    assert!(reasons.iter().all(|r| r.contains("not followed and nothing is read")), "{reasons:?}");
    // Nothing of bob's is in ann's catalogue or among her proxies.
    let bobs = format!(
        "SELECT count(*) AS n FROM media_assets WHERE content_hash IN ('{}', '{}')",
        hash_of(&bobs_photo),
        hash_of(&bobs_album_photo)
    );
    assert_eq!(lib.count(&bobs).await, 0);
    let proxy_folders = std::fs::read_dir(lib.proxies.join(lib.config.to_string())).unwrap().count();
    assert_eq!(proxy_folders, 1, "proxies of one photo only");
    assert_eq!(lib.active_count().await, 1);
}

/// A link planted in the proxy root where a photo's proxy folder goes (by anyone else who may write the proxy volume:
/// a share that exposes it, a bind mount of it) is never written through: the photo fails, saying so, and is
/// catalogued once the link is gone. Before, its proxies were written wherever the link pointed.
#[tokio::test]
async fn a_link_where_a_photos_proxy_folder_goes_is_never_written_through() {
    let lib = library().await;
    let content = photo(7);
    lib.write("2019/IMG_7.jpg", &content);
    let hash = hash_of(&content);
    let elsewhere = lib.dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let prefix = lib.proxies.join(lib.config.to_string()).join(&hash[..2]);
    std::fs::create_dir_all(&prefix).unwrap();
    std::os::unix::fs::symlink(&elsewhere, prefix.join(&hash)).unwrap();

    let result = lib.crawl().await;
    assert_eq!((result["ingested"].as_u64(), result["failed"].as_u64()), (Some(0), Some(1)), "{result}");
    let reason = result["failures"][0]["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("a link stands where the proxy folder") && reason.contains(&hash), "{reason}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing written through the link");

    std::fs::remove_file(prefix.join(&hash)).unwrap();
    let result = lib.crawl().await;
    assert_eq!(result["ingested"].as_u64(), Some(1), "{result}");
    assert!(prefix.join(&hash).join("thumbnail.jpg").is_file());
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

/// A file's proxy folder swapped for a link after the crawl made it, while the file waits for the pixel budget (as
/// someone who may write the proxy volume can: the folder's name is the content's hash), for a still and a video:
/// the proxies are written into the folder the crawl made, never through the link; the file is not recorded at a path
/// that now leads through the link; it fails for this crawl, naming the folder; and with the link gone the next crawl
/// ingests it. Before, every proxy was written by the folder's path, through whatever stood there by then.
#[tokio::test]
async fn a_proxy_folder_swapped_for_a_link_while_its_file_waits_is_never_written_through() {
    // A PNG is decoded whole, so it takes its share of the budget (a baseline JPEG is decoded in strips).
    for (file, proxy) in [("2019/IMG_7.png", "thumbnail.jpg"), ("2019/clip.mp4", "poster.jpg")] {
        let lib = library().await;
        if file.ends_with(".png") {
            lib.write(file, &fixtures::png(64, 48, 7));
        } else {
            std::fs::create_dir_all(lib.root.join("2019")).unwrap();
            fixtures::quicktime_video(&lib.root.join(file), "2023-12-25T01:15:00Z", &[]);
        }
        let hash = hash_of(&std::fs::read(lib.root.join(file)).unwrap());
        let folder = lib.proxies.join(lib.config.to_string()).join(&hash[..2]).join(&hash);
        let (elsewhere, moved) = (lib.dir.path().join("elsewhere"), lib.dir.path().join("moved"));
        std::fs::create_dir_all(&elsewhere).unwrap();
        let handler = lib.crawler(lib.settings());
        let cancel = CancellationToken::new();
        let held = handler.pixel_budget().reserve(u64::MAX, &cancel).await.unwrap();
        let crawl = lib.run_handler(&handler, lib.item(serde_json::json!({})).await);
        tokio::pin!(crawl);
        support::until_a_file_waits_for_pixels(&handler, crawl.as_mut(), file).await;
        assert!(folder.is_dir(), "{file}: the folder is made before the file waits");
        std::fs::rename(&folder, &moved).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &folder).unwrap();
        drop(held);
        let result = crawl.await.expect("the crawl succeeds");
        assert_eq!((result["ingested"].as_u64(), result["failed"].as_u64()), (Some(0), Some(1)), "{result}");
        let reason = result["failures"][0]["reason"].as_str().unwrap().to_owned();
        assert!(reason.contains("was moved, removed or replaced") && reason.contains(&hash), "{reason}");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "{file}: nothing written through the link");
        assert!(moved.join(proxy).is_file(), "{file}: written into the folder the crawl made");
        assert_eq!(lib.active_count().await, 0, "{file}: not recorded");

        std::fs::remove_file(&folder).unwrap();
        let result = lib.crawl().await;
        assert_eq!(result["ingested"].as_u64(), Some(1), "{result}");
        assert!(folder.join(proxy).is_file(), "{file}");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "{file}");
    }
}

/// A link where the config's own proxy folder goes refuses the crawl at once with one error naming it, whether the
/// config has proxies yet or not: before, a new config's crawl followed it (every proxy written where it pointed),
/// and one with proxies was told its proxy volume was not mounted.
#[tokio::test]
async fn a_link_where_the_configs_proxy_folder_goes_refuses_the_crawl_naming_it() {
    let lib = library().await;
    lib.write("2019/IMG_1.jpg", &photo(1));
    let (config_dir, elsewhere) = (lib.proxies.join(lib.config.to_string()), lib.dir.path().join("elsewhere"));
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::create_dir_all(&lib.proxies).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &config_dir).unwrap();
    let refused = async || {
        let err = lib.crawl_with(serde_json::json!({}), CancellationToken::new()).await.unwrap_err();
        assert!(err.retryable, "{err:?}");
        let said = format!("a link stands where the proxy folder {} should be", config_dir.display());
        assert!(err.message.contains(&said) && err.message.contains("Nothing was read"), "{}", err.message);
    };
    refused().await;
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing written through the link");
    std::fs::remove_file(&config_dir).unwrap();
    lib.crawl().await;
    assert_eq!(lib.active_count().await, 1);
    // The config's proxies moved to another disk and linked there, as a way to keep them elsewhere.
    std::fs::remove_dir(&elsewhere).unwrap();
    std::fs::rename(&config_dir, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &config_dir).unwrap();
    lib.write("2019/IMG_2.jpg", &photo(2));
    refused().await;
    assert_eq!(lib.active_count().await, 1);
}

#[tokio::test]
async fn a_scoped_proxy_deletion_refuses_another_configs_assets_and_deletes_nothing() {
    let lib = library().await;
    lib.write("IMG.jpg", &photo(1));
    lib.crawl().await;
    // Bob's library, crawled by the same Worker.
    let bob_root = lib.dir.path().join("bob");
    std::fs::create_dir_all(&bob_root).unwrap();
    std::fs::write(bob_root.join("IMG.jpg"), photo(2)).unwrap();
    let (_, bob) =
        lib.store.add_storage_config(&NewStorageConfig { username: "bob".into(), root_path: bob_root }).await.unwrap();
    let bob_item = lib.work_item(WorkKind::Crawl, Scope::Config(bob.id), serde_json::json!({})).await;
    lib.run_handler(&lib.handler(), bob_item).await.unwrap();
    let (ann_proxies, bob_proxies) = (proxy_rows(&lib, lib.config).await, proxy_rows(&lib, bob.id).await);
    assert!(ann_proxies == 3 && bob_proxies == 3);
    #[derive(diesel::QueryableByName)]
    struct Id {
        #[diesel(sql_type = Uuid)]
        id: uuid::Uuid,
    }
    let all: Vec<Id> = sql_query("SELECT id FROM media_assets ORDER BY storage_config_id = $1")
        .bind::<Uuid, _>(lib.config.as_uuid())
        .load(&mut lib.conn().await)
        .await
        .unwrap();
    let all: Vec<uuid::Uuid> = all.into_iter().map(|r| r.id).collect();
    let handler = ProxyDeletionHandler::new(lib.store.clone(), lib.proxies.clone());
    let payload = serde_json::json!({"asset_ids": all});
    let item = lib.work_item(WorkKind::ProxyDeletion, Scope::Config(lib.config), payload).await;
    let err = lib.run_handler(&handler, item).await.unwrap_err();
    assert!(!err.retryable && err.message.contains("belong to another storage config"), "{err:?}");
    assert!(err.message.contains(&all[0].to_string()), "it names the foreign id: {}", err.message);
    let after = (proxy_rows(&lib, lib.config).await, proxy_rows(&lib, bob.id).await);
    assert_eq!(after, (3, 3), "nothing deleted, not even ann's own");
    let proxy_files = |config: StorageConfigId| {
        walk_files(&lib.proxies.join(config.to_string())).into_iter().filter(|p| !p.contains("/.")).count()
    };
    assert_eq!((proxy_files(lib.config), proxy_files(bob.id)), (2, 2));
}

async fn proxy_rows(lib: &Library, config: StorageConfigId) -> i64 {
    lib.count(&format!(
        "SELECT count(*) AS n FROM proxy_files p JOIN media_assets a ON a.id = p.asset_id
          WHERE a.storage_config_id = '{config}'"
    ))
    .await
}

fn walk_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let kind = e.file_type().unwrap();
            if kind.is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path().strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

fn aged(path: &Path, content: &[u8]) -> PathBuf {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(7200)).unwrap();
    path.to_path_buf()
}

#[tokio::test]
async fn the_sweep_deletes_only_our_layout_and_reports_the_rest() {
    let lib = library().await;
    let config = lib.config.to_string();
    let hash = "ab".repeat(32);
    let ours = |name: &str| lib.proxies.join(&config).join("ab").join(&hash).join(name);
    // Orphans of ours, old: deleted.
    let orphans = [aged(&ours("preview.jpg"), b"p"), aged(&ours(".web.tmp.mp4"), b"w")];
    // Old files under the proxy root that are not ours: an operator's photos (the proxy root set to a
    // library's parent), a file of a config that does not exist, a name we never write, a folder that is not
    // the hash's own prefix, an upper-case hash, files too shallow or too deep.
    let missing_config = StorageConfigId::new().to_string();
    let not_ours = [
        aged(&lib.proxies.join("photos/ann/IMG_0001.jpg"), b"a photo"),
        aged(&lib.proxies.join(&missing_config).join("ab").join(&hash).join("preview.jpg"), b"x"),
        aged(&ours("IMG_0002.jpg"), b"x"),
        aged(&lib.proxies.join(&config).join("cd").join(&hash).join("thumbnail.jpg"), b"x"),
        aged(&lib.proxies.join(&config).join("AB").join("AB".repeat(32)).join("thumbnail.jpg"), b"x"),
        aged(&lib.proxies.join(&config).join("thumbnail.jpg"), b"x"),
        aged(&ours("extra/thumbnail.jpg"), b"x"),
        aged(&lib.proxies.join("notes.txt"), b"x"),
    ];
    let handler = ProxySweepHandler::new(lib.store.clone(), lib.proxies.clone(), Duration::from_secs(3600));
    let item = lib.work_item(WorkKind::ProxySweep, Scope::Unscoped, serde_json::json!({})).await;
    let result = lib.run_handler(&handler, item).await.unwrap();
    assert_eq!(result["deleted"], 2, "{result}");
    assert_eq!(result["left_alone"], not_ours.len(), "{result}");
    assert!(result["left_alone_examples"].to_string().contains("photos/ann/IMG_0001.jpg"), "{result}");
    for p in &orphans {
        assert!(!p.exists(), "{}", p.display());
    }
    for p in &not_ours {
        assert!(p.exists(), "{} was deleted", p.display());
    }
}

/// The maintenance statements, with one twist: the per-file re-check right before a sweep's unlink first
/// rewrites that file (as a retried crawl writing the same proxy again would), so the sweep's last look at the
/// file must see it young.
struct RewriteBeforeRecheck {
    inner: Arc<PgStore>,
    proxy_root: PathBuf,
}

impl RealStore for RewriteBeforeRecheck {
    fn store(&self) -> &PgStore {
        &self.inner
    }
}

impl MaintenanceTwist for RewriteBeforeRecheck {
    async fn referenced_proxy_paths(&self, paths: &[String]) -> Result<Vec<String>, CatalogueError> {
        if let [one] = paths {
            std::fs::write(self.proxy_root.join(one), b"written again by a retried crawl").unwrap();
        }
        self.inner.referenced_proxy_paths(paths).await
    }
}

#[tokio::test]
async fn the_sweep_rechecks_the_age_right_before_the_unlink() {
    let lib = library().await;
    let orphan =
        aged(&lib.proxies.join(lib.config.to_string()).join("ab").join("ab".repeat(32)).join("thumbnail.jpg"), b"old");
    let store = RewriteBeforeRecheck { inner: lib.store.clone(), proxy_root: lib.proxies.clone() };
    let handler = ProxySweepHandler::new(Arc::new(Twisted(store)), lib.proxies.clone(), Duration::from_secs(3600));
    let item = lib.work_item(WorkKind::ProxySweep, Scope::Unscoped, serde_json::json!({})).await;
    let result = lib.run_handler(&handler, item).await.unwrap();
    assert_eq!(result["deleted"], 0, "{result}");
    assert_eq!(std::fs::read(&orphan).unwrap(), b"written again by a retried crawl");
}

#[tokio::test]
async fn a_root_swapped_for_a_link_or_stored_non_canonical_is_never_read() {
    let lib = library().await;
    lib.with_photos(2).await;
    let bob = lib.dir.path().join("bob");
    std::fs::create_dir_all(&bob).unwrap();
    let bobs_photo = photo(100);
    std::fs::write(bob.join("IMG_9999.jpg"), &bobs_photo).unwrap();
    // Ann, who can write to the folder above her root, swaps her root for a link to bob's library.
    let away = lib.root.with_file_name("ann-real");
    std::fs::rename(&lib.root, &away).unwrap();
    std::os::unix::fs::symlink(&bob, &lib.root).unwrap();
    let err = lib.refused(serde_json::json!({})).await;
    assert!(!err.retryable && err.message.contains("is a link now"), "{err:?}");
    let bobs = format!("SELECT count(*) AS n FROM media_assets WHERE content_hash = '{}'", hash_of(&bobs_photo));
    assert_eq!((lib.count(&bobs).await, lib.active_count().await), (0, 2), "nothing read, nothing deleted");
    std::fs::remove_file(&lib.root).unwrap();
    std::fs::rename(&away, &lib.root).unwrap();

    // An older catalogue (before the canonical-root rule) holds eve's root spelled through `..`.
    let mut conn = lib.conn().await;
    sql_query("ALTER TABLE storage_configs DROP CONSTRAINT ck_storage_configs_root_path_canonical")
        .execute(&mut conn)
        .await
        .unwrap();
    let eve = StorageConfigId::new();
    sql_query(
        "WITH u AS (INSERT INTO users (id, username) VALUES (gen_random_uuid(), 'eve') RETURNING id)
         INSERT INTO storage_configs (id, user_id, root_path) SELECT $1, u.id, $2 FROM u",
    )
    .bind::<Uuid, _>(eve.as_uuid())
    .bind::<Text, _>(format!("{}/../bob", lib.root.display()))
    .execute(&mut conn)
    .await
    .unwrap();
    let item = lib.work_item(WorkKind::Crawl, Scope::Config(eve), serde_json::json!({})).await;
    let err = lib.run_handler(&lib.handler(), item).await.unwrap_err();
    assert!(!err.retryable && err.message.contains("not a canonical path"), "{err:?}");
    assert_eq!(lib.count(&bobs).await, 0);
}

#[tokio::test]
async fn a_crawl_cancelled_after_a_file_was_read_writes_nothing_for_it() {
    let lib = library().await;
    lib.write("before/IMG.jpg", &photo(1));
    lib.crawl().await;
    std::fs::create_dir(lib.root.join("after")).unwrap();
    std::fs::rename(lib.root.join("before/IMG.jpg"), lib.root.join("after/IMG.jpg")).unwrap();
    let at = |path: &str| format!("SELECT count(*) AS n FROM media_assets WHERE display_path = '{path}'");
    // The cancellation lands while the moved file's content is looked up: read, not yet written.
    let cancel = CancellationToken::new();
    let catalogue = Interposed::cancel_at_placement(lib.store.clone(), cancel.clone());
    let settings = CrawlSettings { settle_time: Duration::ZERO, ..CrawlSettings::new(lib.proxies.clone()) };
    let handler = CrawlHandler::new(Arc::new(catalogue), settings);
    let item = lib.item(serde_json::json!({})).await;
    let err = lib.run_in(&handler, item, cancel.clone()).await.expect_err("cancelled");
    assert!(cancel.is_cancelled() && err.message.contains("cancelled"), "{err:?}");
    assert_eq!((lib.count(&at("before/IMG.jpg")).await, lib.count(&at("after/IMG.jpg")).await), (1, 0));
    // The next crawl moves it.
    assert_eq!(lib.crawl().await["moved"], 1);
    assert_eq!(lib.count(&at("after/IMG.jpg")).await, 1);
}

#[tokio::test]
async fn a_root_that_is_a_file_or_lies_beyond_a_link_says_which_and_deletes_nothing() {
    let lib = library().await;
    lib.with_photos(2).await;
    // The share's folder replaced by a file (a clumsy `cp` onto the mount point).
    let away = lib.root.with_file_name("originals-away");
    std::fs::rename(&lib.root, &away).unwrap();
    std::fs::write(&lib.root, b"not a folder").unwrap();
    let err = lib.refused(serde_json::json!({})).await;
    assert!(err.retryable && err.message.contains("is not a folder"), "{err:?}");
    assert_eq!(lib.active_count().await, 2);
    std::fs::remove_file(&lib.root).unwrap();
    std::fs::rename(&away, &lib.root).unwrap();

    // A second library whose parent folder is later swapped for a link to elsewhere.
    let parent = lib.dir.path().join("bob-home");
    std::fs::create_dir_all(parent.join("library")).unwrap();
    let (_, bob) = lib
        .store
        .add_storage_config(&NewStorageConfig { username: "bob".into(), root_path: parent.join("library") })
        .await
        .unwrap();
    let elsewhere = lib.dir.path().join("elsewhere");
    std::fs::rename(&parent, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &parent).unwrap();
    let item = lib.work_item(WorkKind::Crawl, Scope::Config(bob.id), serde_json::json!({})).await;
    let err = lib.run_handler(&lib.handler(), item).await.unwrap_err();
    assert!(err.retryable && err.message.contains("is reached through a link"), "{err:?}");
}

#[tokio::test]
async fn a_new_library_that_is_still_empty_crawls_without_a_complaint() {
    let lib = library().await;
    let result = lib.crawl().await;
    assert_eq!((result["found"].as_u64(), result["soft_deleted"].as_u64()), (Some(0), Some(0)), "{result}");
    lib.write("IMG.jpg", &photo(1));
    assert_eq!(lib.crawl().await["ingested"], 1);
}
