//! What a file carries that PostgreSQL cannot hold as it is: a NUL inside a camera's text, a path longer than the
//! catalogue's index takes. Each used to stop the crawl at that file, at every crawl, so nothing after it in the
//! walk was ever catalogued; now the text is cleaned, the path is that file's failure, and the crawl goes on.

mod support;

use almanac_domain::ports::LONGEST_PATH;
use almanac_media::fixtures::{self, FixtureExif, exif_block as xb};
use diesel::sql_query;
use diesel::sql_types::{BigInt, Binary, Nullable, Text};
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
use support::{Library, library};

fn photo(seed: u32) -> Vec<u8> {
    fixtures::jpeg(64, 48, seed, true, &FixtureExif::camera("2019:07:04 18:30:05", "+02:00"))
}

/// A relative path of exactly `len` bytes whose names (at most 240 bytes each) are letters and digits drawn at
/// random, so that they do not compress: a path PostgreSQL must hold as long as it is.
fn random_path(len: usize, seed: u64) -> String {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[(x % 62) as usize] as char
    };
    let mut path = String::new();
    while len - path.len() > 241 + 5 {
        path.extend((0..240).map(|_| next()));
        path.push('/');
    }
    let name = len - path.len() - 4;
    path.extend((0..name).map(|_| next()));
    path.push_str(".jpg");
    assert_eq!(path.len(), len);
    path
}

#[derive(diesel::QueryableByName, Debug, PartialEq)]
struct Camera {
    #[diesel(sql_type = Binary)]
    file_path: Vec<u8>,
    #[diesel(sql_type = Nullable<Text>)]
    camera_make: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    camera_model: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    lens_model: Option<String>,
}

async fn cameras(lib: &Library) -> Vec<Camera> {
    sql_query(
        "SELECT a.file_path, m.camera_make, m.camera_model, m.lens_model
           FROM media_assets a JOIN asset_metadata m ON m.asset_id = a.id
          WHERE NOT a.is_soft_deleted
          ORDER BY a.file_path",
    )
    .load(&mut lib.conn().await)
    .await
    .unwrap()
}

/// A camera's make written as bytes with a NUL inside (EXIF type UNDEFINED, as a damaged writer leaves it), its
/// model and lens as text padded with NULs and blanks before: each is kept up to its NUL, the photo is catalogued,
/// and so is the photo after it.
#[tokio::test]
async fn a_nul_inside_a_cameras_text_is_where_the_text_ends_and_the_crawl_goes_on() {
    let lib = library().await;
    let mut block = xb::Block::camera(true);
    block.ifd0[0] = xb::E::new(xb::MAKE, xb::V::Undefined(b"Almanac\0\x01junk".to_vec()));
    block.ifd0[1] = xb::E::new(xb::MODEL, xb::V::Undefined(b"\0 Broken Writer 3000\0\0".to_vec()));
    block.exif[3] = xb::E::new(xb::LENS_MODEL, xb::V::Undefined(b"50mm\0f/1.8".to_vec()));
    lib.write("a/nul.jpg", &xb::jpeg(&block.bytes(), false));
    lib.write("b/after.jpg", &photo(1));

    let result = lib.crawl().await;
    assert_eq!((result["ingested"].as_u64(), result["failed"].as_u64()), (Some(2), Some(0)), "{result}");
    let nul = &cameras(&lib).await[0];
    assert_eq!(
        (nul.file_path.as_slice(), nul.camera_make.as_deref(), nul.camera_model.as_deref(), nul.lens_model.as_deref()),
        (&b"a/nul.jpg"[..], Some("Almanac"), Some("Broken Writer 3000"), Some("50mm")),
    );
}

/// A photo whose path is longer than the catalogue's index holds (its bytes do not compress) is that file's failure,
/// saying so and what to do; one exactly as long as the limit is catalogued, so is a longer one whose names repeat
/// (a backup inside a backup), and so are the others.
#[tokio::test]
async fn a_path_longer_than_the_catalogue_holds_fails_that_file_and_the_crawl_goes_on() {
    let lib = library().await;
    let longest = random_path(LONGEST_PATH, 7);
    let too_long = random_path(LONGEST_PATH + 1, 11);
    let far_too_long = random_path(3_500, 13);
    let repeating = "Backup/".repeat(500) + "x.jpg";
    for (n, path) in [&longest, &too_long, &far_too_long, &repeating].into_iter().enumerate() {
        lib.write(path, &photo(n as u32 + 1));
    }
    lib.write("short.jpg", &photo(9));

    let result = lib.crawl().await;
    assert_eq!((result["ingested"].as_u64(), result["failed"].as_u64()), (Some(3), Some(2)), "{result}");
    let paths: Vec<Vec<u8>> = cameras(&lib).await.into_iter().map(|c| c.file_path).collect();
    let mut want = vec![longest.clone().into_bytes(), repeating.into_bytes(), b"short.jpg".to_vec()];
    want.sort();
    assert_eq!(paths, want, "as long as the limit, and longer with names that repeat: catalogued");
    let failures = result["failures"].as_array().unwrap();
    for path in [&too_long, &far_too_long] {
        let failure = failures.iter().find(|f| f["path"] == path.as_str()).unwrap_or_else(|| panic!("{result}"));
        let reason = failure["reason"].as_str().unwrap();
        assert!(reason.starts_with(&lib.root.join(path).display().to_string()), "names the file: {reason}");
        for said in ["path is longer than", &format!("holds: {LONGEST_PATH} bytes"), "Shorten"] {
            assert!(reason.contains(said), "says {said:?}: {reason}");
        }
    }

    // Found again as they were: the catalogued ones unchanged, the others failing alike.
    let again = lib.crawl().await;
    assert_eq!((again["unchanged"].as_u64(), again["failed"].as_u64()), (Some(3), Some(2)), "{again}");
}

/// An MP4 whose video track's display matrix turns it by `degrees` (counter-clockwise), as a hand-made or damaged
/// file carries one: the matrix of the first track header (ffmpeg writes the video's first) rewritten.
fn turned_video(path: &std::path::Path, degrees: f64) {
    fixtures::video_in(path, 0.5, 64, 48, None);
    let mut bytes = std::fs::read(path).unwrap();
    let at = bytes.windows(4).position(|w| w == b"tkhd").expect("a track header") + 44;
    let (cos, sin) = (degrees.to_radians().cos(), degrees.to_radians().sin());
    let fixed = |v: f64| ((v * 65536.0).round() as i32).to_be_bytes();
    let matrix =
        [fixed(cos), fixed(sin), [0; 4], fixed(-sin), fixed(cos), [0; 4], [0; 4], [0; 4], 0x4000_0000i32.to_be_bytes()];
    bytes[at..at + 36].copy_from_slice(&matrix.concat());
    std::fs::write(path, bytes).unwrap();
}

#[derive(diesel::QueryableByName, Debug)]
struct Turn {
    #[diesel(sql_type = Text)]
    display_path: String,
    #[diesel(sql_type = BigInt)]
    orientation: i64,
}

/// Videos whose display matrix is at an angle the catalogue cannot keep (45°, 30°) are catalogued turned by the
/// nearest quarter turn, and the crawl goes on; a quarter turn stays what it is.
#[tokio::test]
async fn a_video_turned_by_an_angle_the_catalogue_cannot_keep_gets_the_nearest_quarter_turn() {
    let lib = library().await;
    for (name, degrees) in [("a45.mp4", 45.0), ("b30.mp4", 30.0), ("c90.mp4", 90.0)] {
        turned_video(&lib.root.join(name), degrees);
    }
    lib.write("d.jpg", &photo(1));

    let result = lib.crawl().await;
    assert_eq!((result["ingested"].as_u64(), result["failed"].as_u64()), (Some(4), Some(0)), "{result}");
    let turns: Vec<Turn> = sql_query(
        "SELECT a.display_path, m.orientation_degrees::bigint AS orientation
           FROM media_assets a JOIN asset_metadata m ON m.asset_id = a.id
          WHERE a.media_type = 'video' ORDER BY a.display_path",
    )
    .load(&mut lib.conn().await)
    .await
    .unwrap();
    let turns: Vec<(&str, i64)> = turns.iter().map(|t| (t.display_path.as_str(), t.orientation)).collect();
    assert_eq!(turns, [("a45.mp4", 90), ("b30.mp4", 0), ("c90.mp4", 90)]);
}

/// A photo whose camera model is `model`.
fn photo_of(model: &str, seed: u32) -> Vec<u8> {
    let exif = FixtureExif { model: Some(model.into()), ..FixtureExif::camera("2019:07:04 18:30:05", "+02:00") };
    fixtures::jpeg(64, 48, seed, true, &exif)
}

/// A value of one file that the catalogue refuses and no reader foresaw (here a check added to the test's
/// database): that file fails with the refusal, naming it, and the crawl goes on with the files before and after.
#[tokio::test]
async fn a_write_the_catalogue_refuses_for_one_file_fails_that_file_and_the_crawl_goes_on() {
    let lib = library().await;
    let mut conn = lib.conn().await;
    conn.batch_execute("ALTER TABLE asset_metadata ADD CONSTRAINT ck_test_refused CHECK (camera_model <> 'Refused')")
        .await
        .unwrap();
    lib.write("a.jpg", &photo_of("Fine", 1));
    lib.write("b.jpg", &photo_of("Refused", 2));
    lib.write("c.jpg", &photo_of("Fine too", 3));

    let result = lib.crawl().await;
    assert_eq!((result["ingested"].as_u64(), result["failed"].as_u64()), (Some(2), Some(1)), "{result}");
    let failure = &result["failures"][0];
    assert_eq!(failure["path"], "b.jpg");
    let reason = failure["reason"].as_str().unwrap();
    assert!(reason.starts_with(&lib.root.join("b.jpg").display().to_string()), "names the file: {reason}");
    assert!(
        reason.contains("the catalogue refused the values of this write") && reason.contains("ck_test_refused"),
        "{reason}"
    );
}

/// A known photo moved where the catalogue refuses its write keeps its asset, active at the path it had: the move
/// is that file's failure, nothing is soft-deleted, and once the catalogue takes it the move is recorded.
#[tokio::test]
async fn a_move_the_catalogue_refuses_lets_go_of_nothing() {
    let lib = library().await;
    lib.write("a.jpg", &photo_of("Fine", 1));
    lib.write("b.jpg", &photo_of("Fine", 2));
    assert_eq!(lib.crawl().await["ingested"], 2);
    std::fs::create_dir(lib.root.join("refused")).unwrap();
    std::fs::rename(lib.root.join("a.jpg"), lib.root.join("refused/a.jpg")).unwrap();
    let mut conn = lib.conn().await;
    conn.batch_execute(
        "ALTER TABLE media_assets ADD CONSTRAINT ck_test_refused CHECK (display_path NOT LIKE 'refused/%') NOT VALID",
    )
    .await
    .unwrap();

    let refused = lib.crawl().await;
    assert_eq!((refused["failed"].as_u64(), refused["soft_deleted"].as_u64()), (Some(1), Some(0)), "{refused}");
    assert!(refused["failures"][0]["reason"].as_str().unwrap().contains("ck_test_refused"), "{refused}");
    let active: Vec<Vec<u8>> = cameras(&lib).await.into_iter().map(|c| c.file_path).collect();
    assert_eq!(active, [b"a.jpg".to_vec(), b"b.jpg".to_vec()], "the asset kept, at the path it had");

    conn.batch_execute("ALTER TABLE media_assets DROP CONSTRAINT ck_test_refused").await.unwrap();
    let moved = lib.crawl().await;
    assert_eq!((moved["moved"].as_u64(), moved["soft_deleted"].as_u64()), (Some(1), Some(0)), "{moved}");
}

/// A bind mount made for a test, undone when dropped (lazily, so a test that fails inside it leaves none behind).
struct BindMount(std::path::PathBuf);

impl BindMount {
    fn new(from: &std::path::Path, at: &std::path::Path) -> Self {
        std::fs::create_dir_all(at).unwrap();
        let out = std::process::Command::new("mount").arg("--bind").arg(from).arg(at).output().expect("run mount");
        assert!(out.status.success(), "mount --bind (the tests run as root): {}", String::from_utf8_lossy(&out.stderr));
        Self(at.to_owned())
    }
}

impl Drop for BindMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A folder that is one of the folders above it again (here a bind mount of its parent, as a NAS user makes one to
/// see an album in two places) is passed over and reported: its files are catalogued once, at their own paths,
/// never again as copies at every level of a walk without end.
#[tokio::test]
async fn a_folder_that_is_a_folder_above_it_again_is_passed_over() {
    let lib = library().await;
    lib.write("album/a.jpg", &photo(1));
    lib.write("album/b.jpg", &photo(2));
    let _loop = BindMount::new(&lib.root.join("album"), &lib.root.join("album/again"));

    let result = lib.crawl().await;
    assert_eq!((result["ingested"].as_u64(), result["copies"].as_u64()), (Some(2), Some(0)), "{result}");
    let loops = result["folder_loops"].as_array().cloned().unwrap_or_default();
    assert_eq!(loops, [serde_json::json!(lib.root.join("album/again").display().to_string())], "{result}");
    assert!(result["unreadable_folders"].as_array().is_some_and(Vec::is_empty), "{result}");
    let paths: Vec<Vec<u8>> = cameras(&lib).await.into_iter().map(|c| c.file_path).collect();
    assert_eq!(paths, [b"album/a.jpg".to_vec(), b"album/b.jpg".to_vec()]);
}

/// What the catalogue knows under a folder passed over as a loop is kept: here the files a bind mount hides, which
/// look vanished, are not soft-deleted. And the mass-deletion guard weighs what vanished elsewhere against the
/// assets the walk looked for, not those it kept: 8 of the 10 looked for is refused, though it is 8 of 20.
#[tokio::test]
async fn what_a_folder_passed_over_as_a_loop_hides_is_kept_and_not_weighed() {
    let lib = library().await;
    lib.write("album/a.jpg", &photo(1));
    lib.write("album/b.jpg", &photo(2));
    for n in 0..10 {
        lib.write(&format!("album/again/{n}.jpg"), &photo(10 + n));
    }
    for n in 0..8 {
        lib.write(&format!("other/{n}.jpg"), &photo(30 + n));
    }
    assert_eq!(lib.crawl().await["ingested"], 20);
    // The bind mount hides the ten under `album/again`; the eight under `other` are deleted.
    let _loop = BindMount::new(&lib.root.join("album"), &lib.root.join("album/again"));
    std::fs::remove_dir_all(lib.root.join("other")).unwrap();

    let refused = lib.crawl_with(serde_json::json!({}), Default::default()).await.expect_err("the guard refuses");
    assert!(refused.to_string().contains("refusing to soft-delete 8 of 10 assets"), "{refused}");
    assert_eq!(cameras(&lib).await.len(), 20, "nothing soft-deleted");

    let confirmed = lib.crawl_with(serde_json::json!({"allow_mass_deletion": true}), Default::default()).await;
    let confirmed = confirmed.expect("confirmed");
    assert_eq!(confirmed["soft_deleted"].as_u64(), Some(8), "{confirmed}");
    let kept: Vec<Vec<u8>> = cameras(&lib).await.into_iter().map(|c| c.file_path).collect();
    assert_eq!(kept.len(), 12, "the ten hidden under the loop kept, with album's two");
}

/// A copy the catalogue recorded under a folder that is now a loop (walked before, as a plain folder) is looked at
/// when its asset's own file is deleted: through the mount it is that very file, gone, so the asset vanishes and the
/// stale copy is dropped, rather than the asset being kept for ever for a copy nobody can see.
#[tokio::test]
async fn a_copy_under_a_loop_is_looked_at_before_it_keeps_an_asset() {
    let lib = library().await;
    let (a, b) = (photo(1), photo(2));
    lib.write("album/a.jpg", &a);
    lib.write("album/b.jpg", &b);
    lib.write("album/again/a.jpg", &a);
    // One file at a time, in the walk's order: `album/a.jpg` is the asset's own path, the other its copy.
    let first = lib.run_handler(&lib.handler_with(1), lib.item(serde_json::json!({})).await).await.unwrap();
    assert_eq!((first["ingested"].as_u64(), first["copies"].as_u64()), (Some(2), Some(1)), "{first}");
    std::fs::remove_file(lib.root.join("album/again/a.jpg")).unwrap();
    let _loop = BindMount::new(&lib.root.join("album"), &lib.root.join("album/again"));
    std::fs::remove_file(lib.root.join("album/a.jpg")).unwrap();

    let result = lib.crawl().await;
    assert_eq!(result["soft_deleted"].as_u64(), Some(1), "{result}");
    let active: Vec<Vec<u8>> = cameras(&lib).await.into_iter().map(|c| c.file_path).collect();
    assert_eq!(active, [b"album/b.jpg".to_vec()]);
    let copies = lib.count("SELECT count(*) AS n FROM asset_extra_paths").await;
    assert_eq!(copies, 0, "the stale copy under the loop dropped");
}
