//! A proxy is whole or absent: on a proxy volume that fills up or cannot be written, nothing cut short takes a
//! proxy's name, the error says so, and the proxy root's check names the setting and the cause. The volumes
//! are small tmpfs mounts; where mounting is not permitted the tests say SKIPPED and pass. A proxy is written where
//! it belongs and nowhere else: a link at its temporary name is not followed.

use std::path::Path;

use almanac_domain::ProxyType;
use almanac_media::fixtures::{self, FixtureExif};
use almanac_media::scratch_volume::ScratchVolume;
use almanac_media::{
    DEFAULT_MAX_PIXELS, MediaError, MediaFormat, RootFolder, ToolLimits, check_proxy_root, heic_to_jpeg,
    make_proxy_folder, make_still_proxies, make_video_proxies,
};
use tokio_util::sync::CancellationToken;

use fixtures::names;

#[tokio::test]
async fn a_proxy_volume_that_fills_up_under_ffmpeg_leaves_no_poster_cut_short() {
    let dir = tempfile::tempdir().unwrap();
    fixtures::video(&dir.path().join("clip.mov"), 1.0, 1280, 960, "2021-06-01T10:00:00Z");
    // Room for 16 KiB: the poster of this clip is larger, so ffmpeg stops writing it and fails.
    let Some(volume) = ScratchVolume::small(&dir.path().join("proxies"), 16, false) else { return };
    let clip = RootFolder::open(dir.path()).unwrap().open_file(b"clip.mov").unwrap();
    let cancel = CancellationToken::new();
    let err = fixtures::video_proxies_into(&clip, volume.path(), &cancel).await.unwrap_err();
    assert!(matches!(&err, MediaError::ProxyNotMade { proxy: ProxyType::Poster, .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("No space left on device"), "ffmpeg's own words: {message}");
    assert!(message.contains("storage.proxy_root") && message.contains("full"), "what to do: {message}");
    assert_eq!(names(volume.path()), Vec::<String>::new(), "no poster, no temporary file");
}

/// heif-convert writes its JPEG of a HEIC into the proxy volume, and when the volume fills up part-way it says "could
/// not write image" and ends with success, leaving the JPEG cut short. That is the volume's failure, read from its
/// words: a write error naming `storage.proxy_root`, not a damaged photo (which the crawl would remember and not read
/// again once there is room), and no scratch file is left. Before, the JPEG cut short was handed on and the photo
/// failed as corrupt.
#[tokio::test]
async fn a_proxy_volume_that_fills_up_under_heif_convert_is_the_volumes_failure_not_the_photos() {
    let dir = tempfile::tempdir().unwrap();
    fixtures::heic(&dir.path().join("IMG_0001.HEIC"), 1600, 1200, 3);
    let content = std::fs::read(dir.path().join("IMG_0001.HEIC")).unwrap();
    // Room for 16 KiB: heif-convert's JPEG of this photo is larger.
    let Some(volume) = ScratchVolume::small(&dir.path().join("proxies"), 16, false) else { return };
    let photo = RootFolder::open(dir.path()).unwrap().open_file(b"IMG_0001.HEIC").unwrap();
    let cancel = CancellationToken::new();
    let limits = ToolLimits::default();
    let Err(err) =
        heic_to_jpeg(&photo, &content, DEFAULT_MAX_PIXELS, &fixtures::proxy_folder(volume.path()), limits, &cancel)
            .await
    else {
        panic!("heif-convert's JPEG cut short was handed on as whole");
    };
    assert!(matches!(&err, MediaError::ProxyWrite { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("could not write image") && message.contains("out of disk space"), "{message}");
    assert!(message.contains("storage.proxy_root"), "{message}");
    assert_eq!(names(volume.path()), Vec::<String>::new(), "no scratch JPEG is left");

    // With room, the same photo converts whole.
    drop(volume);
    let room = dir.path().join("room");
    let jpeg = heic_to_jpeg(&photo, &content, DEFAULT_MAX_PIXELS, &fixtures::proxy_folder(&room), limits, &cancel)
        .await
        .unwrap();
    assert!(jpeg.ends_with(&[0xFF, 0xD9]));
}

#[test]
fn a_full_proxy_volume_fails_a_still_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let Some(volume) = ScratchVolume::small(&dir.path().join("proxies"), 64, true) else { return };
    let jpeg = fixtures::jpeg(1600, 1200, 5, true, &FixtureExif::default());
    let path = Path::new("IMG_0005.JPG");
    let err = make_still_proxies(
        path,
        &jpeg,
        MediaFormat::Jpeg,
        1,
        DEFAULT_MAX_PIXELS,
        &fixtures::proxy_folder(volume.path()),
    )
    .unwrap_err();
    assert!(matches!(&err, MediaError::ProxyWrite { .. }), "{err:?}");
    assert!(err.to_string().contains("storage.proxy_root"), "{err}");
    assert_eq!(names(volume.path()), ["filler"], "neither a proxy nor a temporary file is left");
}

#[test]
fn the_proxy_root_check_names_a_full_volume() {
    let dir = tempfile::tempdir().unwrap();
    let Some(volume) = ScratchVolume::small(&dir.path().join("proxies"), 64, true) else { return };
    let err = check_proxy_root(volume.path()).unwrap_err();
    assert!(matches!(&err, MediaError::ProxyRootUnwritable { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("storage.proxy_root") && message.contains(&volume.path().display().to_string()));
    assert!(message.contains("its volume is full; free space on it"), "{message}");
    assert_eq!(names(volume.path()), ["filler"], "the check leaves nothing behind");
}

#[test]
fn the_proxy_root_check_names_a_folder_that_cannot_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let Some(volume) = ScratchVolume::read_only(&dir.path().join("proxies")) else { return };
    let message = check_proxy_root(volume.path()).unwrap_err().to_string();
    assert!(message.contains("storage.proxy_root"), "{message}");
    assert!(
        message.contains("mounted read-only; mount it read-write")
            || message.contains("the Worker's user may not write there"),
        "{message}"
    );
}

/// Links placed at the poster's and the web video's temporary names (by anyone who can write the proxy tree), in the
/// proxy folder and in a scratch folder a killed Worker left, are never written through: ffmpeg writes into a scratch
/// folder made anew (those left in it are removed first), the files the links point to, outside, are left as they
/// were, and the proxies are files of their own.
#[tokio::test]
async fn links_at_the_temporary_names_of_a_video_s_proxies_are_never_written_through() {
    let dir = tempfile::tempdir().unwrap();
    fixtures::video(&dir.path().join("clip.mp4"), 1.0, 320, 240, "2021-06-01T10:00:00Z");
    let out = dir.path().join("proxies");
    let left = fixtures::left_scratch_folder(&out);
    let mut outside = Vec::new();
    for (proxy, name) in [(ProxyType::Poster, "poster"), (ProxyType::WebVideo, "web")] {
        let target = dir.path().join(format!("outside-{name}"));
        std::fs::write(&target, b"someone else's file").unwrap();
        std::os::unix::fs::symlink(&target, out.join(proxy.temporary_file_name().unwrap())).unwrap();
        std::os::unix::fs::symlink(&target, left.join(proxy.temporary_file_name().unwrap())).unwrap();
        outside.push(target);
    }
    let clip = RootFolder::open(dir.path()).unwrap().open_file(b"clip.mp4").unwrap();
    fixtures::video_proxies_into(&clip, &out, &CancellationToken::new()).await.unwrap();
    for target in &outside {
        assert_eq!(std::fs::read(target).unwrap(), b"someone else's file", "{}", target.display());
    }
    for proxy in ["poster.jpg", "web.mp4"] {
        assert!(std::fs::symlink_metadata(out.join(proxy)).unwrap().is_file(), "{proxy} is a file, not the link");
    }
    // The links in the proxy folder are not ours to remove (the start-up clean-up takes old temporary names); the
    // scratch folder is gone with what was left in it.
    assert_eq!(names(&out), [".poster.tmp.jpg", ".web.tmp.mp4", "poster.jpg", "web.mp4"]);
}

/// The folder of a file's proxies swapped for a link to a folder outside after it was made, before the proxies are
/// written (as someone who may write the proxy volume can while a still waits for the pixel budget or a video for its
/// transcode; the folder's name is the content's hash, which anyone can work out): ffmpeg's poster and web video,
/// ffprobe's check of it, heif-convert's JPEG and heif-info, and our own JPEG writes all reach the folder that was
/// made, never the link's target. Before, each of them wrote by the folder's path.
#[tokio::test]
async fn a_proxy_folder_swapped_for_a_link_redirects_no_tool_and_no_write() {
    let dir = tempfile::tempdir().unwrap();
    fixtures::video(&dir.path().join("clip.mp4"), 1.0, 320, 240, "2021-06-01T10:00:00Z");
    // Of several images: heif-convert writes one JPEG for each, and heif-info names the primary.
    fixtures::heic_of_several(&dir.path().join("IMG_0001.HEIC"), &[(640, 480), (320, 240)], 3);
    let library = RootFolder::open(dir.path()).unwrap();
    let (root, outside) = (dir.path().join("proxies"), dir.path().join("outside"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let cancel = CancellationToken::new();
    for (n, file) in ["clip.mp4", "IMG_0001.HEIC"].into_iter().enumerate() {
        let folder = make_proxy_folder(&root, Path::new(&format!("c1/ab/hash{n}"))).unwrap();
        let moved = dir.path().join(format!("moved{n}"));
        std::fs::rename(folder.path(), &moved).unwrap();
        std::os::unix::fs::symlink(&outside, folder.path()).unwrap();
        let original = library.open_file(file.as_bytes()).unwrap();
        if file.ends_with(".mp4") {
            let limits = ToolLimits::default();
            make_video_proxies(&original, &folder, limits, DEFAULT_MAX_PIXELS, &cancel).await.unwrap();
            assert_eq!(names(&moved), ["poster.jpg", "web.mp4"]);
        } else {
            let content = std::fs::read(dir.path().join(file)).unwrap();
            let limits = ToolLimits::default();
            let jpeg = heic_to_jpeg(&original, &content, DEFAULT_MAX_PIXELS, &folder, limits, &cancel).await.unwrap();
            let path = dir.path().join(file);
            make_still_proxies(&path, &jpeg, MediaFormat::Heic, 1, DEFAULT_MAX_PIXELS, &folder).unwrap();
            assert_eq!(names(&moved), ["preview.jpg", "thumbnail.jpg"], "heif-convert's JPEG removed");
        }
        assert_eq!(names(&outside), Vec::<String>::new(), "{file}: nothing written through the link");
        let refused = folder.still_in_place().unwrap_err();
        assert!(matches!(refused, MediaError::ProxyFolderMoved { .. }), "{file}: {refused}");
    }
}
