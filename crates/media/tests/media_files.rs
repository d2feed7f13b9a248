//! The media pipeline on real files made by the tests.

use std::path::Path;
use std::time::{Duration, Instant};

use almanac_domain::CaptureSource;
use almanac_media::fixtures::{self, FixtureExif};
use almanac_media::{
    DEFAULT_MAX_PIXELS, MediaError, MediaFormat, Original, RootFolder, StillProxies, ToolLimits, heic_to_jpeg,
    make_still_proxies, probe_video, read_exif, read_still_facts,
};
use chrono::{TimeZone, Utc};
use tokio_util::sync::CancellationToken;

/// Opens `path` the way the crawl does: beneath its folder, no link followed.
fn open(path: &Path) -> Original {
    let root = RootFolder::open(path.parent().unwrap()).unwrap();
    root.open_file(path.file_name().unwrap().as_encoded_bytes()).unwrap()
}

/// The proxies of the still at `path` (`content`, its `format`, upright), made into the folder `dir`.
fn stills(path: &Path, content: &[u8], format: MediaFormat, dir: &Path) -> Result<StillProxies, MediaError> {
    make_still_proxies(path, content, format, 1, DEFAULT_MAX_PIXELS, &fixtures::proxy_folder(dir))
}

fn dims(path: &Path) -> (u32, u32) {
    image::image_dimensions(path).unwrap()
}

#[test]
fn exif_gives_capture_time_with_offset_and_subseconds_and_camera_facts() {
    let exif = FixtureExif {
        subsec_original: Some("25".into()),
        gps: Some((48.8584, -2.2945)),
        lens: Some("50mm f/1.8".into()),
        orientation: Some(6),
        ..FixtureExif::camera("2019:07:04 18:30:05", "+02:00")
    };
    let facts = read_exif(&fixtures::jpeg(64, 48, 1, false, &exif));
    let capture = facts.capture_time(Utc::now());
    assert_eq!(capture.source, CaptureSource::ExifOriginal);
    assert_eq!(capture.offset_minutes, Some(120));
    assert_eq!(capture.at, Utc.with_ymd_and_hms(2019, 7, 4, 16, 30, 5).unwrap() + chrono::Duration::milliseconds(250));
    assert_eq!(capture.local_month_day(), (7, 4));
    assert_eq!(facts.orientation, 6);
    assert_eq!(facts.metadata.orientation_degrees, 90);
    assert_eq!(facts.metadata.camera_make.as_deref(), Some("Almanac"));
    assert_eq!(facts.metadata.camera_model.as_deref(), Some("Test Camera"));
    assert_eq!(facts.metadata.lens_model.as_deref(), Some("50mm f/1.8"));
    assert!((facts.metadata.gps_latitude.unwrap() - 48.8584).abs() < 1e-4);
    assert!((facts.metadata.gps_longitude.unwrap() + 2.2945).abs() < 1e-4);
}

#[test]
fn capture_time_falls_back_to_other_exif_dates_then_the_file_time() {
    let modified_only = FixtureExif { date_modified: Some("2021:12:31 23:59:59".into()), ..FixtureExif::default() };
    let facts = read_exif(&fixtures::jpeg(32, 32, 1, false, &modified_only));
    let capture = facts.capture_time(Utc::now());
    assert_eq!((capture.source, capture.offset_minutes), (CaptureSource::ExifModified, None));
    assert_eq!(capture.at, Utc.with_ymd_and_hms(2021, 12, 31, 23, 59, 59).unwrap());

    let mtime = Utc.with_ymd_and_hms(2018, 2, 3, 4, 5, 6).unwrap();
    let none = read_exif(&fixtures::jpeg(32, 32, 1, false, &FixtureExif::default()));
    assert_eq!(none.capture_time(mtime).source, CaptureSource::FileMtime);
    assert_eq!(none.capture_time(mtime).at, mtime);
}

#[test]
fn a_twelve_megapixel_jpeg_gives_an_upright_preview_thumbnail_and_blurhash() {
    let dir = tempfile::tempdir().unwrap();
    let exif = FixtureExif { orientation: Some(6), ..FixtureExif::camera("2020:01:01 00:00:00", "+00:00") };
    let content = fixtures::jpeg(4000, 3000, 7, true, &exif);
    let src = dir.path().join("IMG.jpg");
    std::fs::write(&src, &content).unwrap();
    let out = dir.path().join("proxies");
    let made =
        make_still_proxies(&src, &content, MediaFormat::Jpeg, 6, DEFAULT_MAX_PIXELS, &fixtures::proxy_folder(&out))
            .unwrap();
    assert_eq!((made.width, made.height), (4000, 3000));
    // Orientation 6: the stored landscape is upright as portrait.
    assert_eq!(dims(&out.join("preview.jpg")), (1440, 1920));
    assert_eq!(dims(&out.join("thumbnail.jpg")), (225, 300));
    assert_eq!(made.preview_bytes, std::fs::metadata(out.join("preview.jpg")).unwrap().len());
    assert!(made.blurhash.len() >= 6);
    // The red marker, stored top-left, is top-right once upright.
    let thumb = image::open(out.join("thumbnail.jpg")).unwrap().to_rgb8();
    let top_right = thumb.get_pixel(225 - 10, 10);
    let top_left = thumb.get_pixel(10, 10);
    assert!(top_right[0] > 180 && top_right[1] < 80, "top right is red: {top_right:?}");
    assert!(top_left[0] < 180 || top_left[1] > 80, "top left is not red: {top_left:?}");
    // Nothing but the two proxies is left in the folder.
    let mut names: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert_eq!(names, ["preview.jpg", "thumbnail.jpg"]);
}

#[test]
fn small_png_is_not_upscaled() {
    let dir = tempfile::tempdir().unwrap();
    let content = fixtures::png(200, 100, 3);
    let made = stills(&dir.path().join("a.png"), &content, MediaFormat::Png, dir.path()).unwrap();
    assert_eq!((made.width, made.height), (200, 100));
    assert_eq!(dims(&dir.path().join("preview.jpg")), (200, 100));
    assert_eq!(dims(&dir.path().join("thumbnail.jpg")), (200, 100));
}

/// A GIF whose first frame lies outside its 1 x 1 screen (a 4000 x 4000 frame here; 20,000 x 20,000 in 180 KB of
/// LZW made the decoder in the Worker's own process allocate 1.6 GB) is refused before it is decoded, saying why,
/// and nothing is written.
#[test]
fn a_gif_whose_frame_lies_outside_its_screen_is_refused_before_it_is_decoded() {
    let dir = tempfile::tempdir().unwrap();
    let mut gif = b"GIF89a".to_vec();
    gif.extend_from_slice(&[1, 0, 1, 0, 0, 0, 0, 0x2C, 0, 0, 0, 0]);
    gif.extend_from_slice(&4000u16.to_le_bytes());
    gif.extend_from_slice(&4000u16.to_le_bytes());
    gif.extend_from_slice(&[0, 8, 2, 0x4C, 0x01, 0, 0x3B]);
    let path = dir.path().join("bomb.gif");
    let err = stills(&path, &gif, MediaFormat::Gif, dir.path()).unwrap_err();
    assert!(err.to_string().contains("lies outside its 1x1 screen"), "{err}");
    assert!(!dir.path().join("preview.jpg").exists());
}

/// A CMYK JPEG, as Photoshop, print and scanner exports write it (YCCK, its inks stored inverted, an `Adobe`
/// segment saying so), gets proxies in its colours: TurboJPEG decodes it only to CMYK, and it failed with
/// "Unsupported color conversion request".
#[test]
fn a_cmyk_jpeg_gets_proxies_in_its_colours() {
    let dir = tempfile::tempdir().unwrap();
    // Red on the left half (no cyan, full magenta and yellow, no black), blue on the right; inverted as Adobe does.
    let (w, h) = (64usize, 48usize);
    let pixels: Vec<u8> = (0..w * h)
        .flat_map(|i| if i % w < w / 2 { [0u8, 255, 255, 0] } else { [255, 255, 0, 0] })
        .map(|ink| 255 - ink)
        .collect();
    let image = turbojpeg::Image {
        pixels: pixels.as_slice(),
        width: w,
        pitch: 4 * w,
        height: h,
        format: turbojpeg::PixelFormat::CMYK,
    };
    let jpeg = turbojpeg::compress(image, 95, turbojpeg::Subsamp::None).unwrap().to_vec();
    let made = stills(&dir.path().join("print.jpg"), &jpeg, MediaFormat::Jpeg, dir.path()).unwrap();
    assert_eq!((made.width, made.height), (64, 48));
    let preview = image::open(dir.path().join("preview.jpg")).unwrap().to_rgb8();
    let [r, g, b] = preview.get_pixel(8, 24).0;
    assert!(r > 200 && g < 60 && b < 60, "red on the left: {:?}", (r, g, b));
    let [r, g, b] = preview.get_pixel(56, 24).0;
    assert!(r < 60 && g < 60 && b > 200, "blue on the right: {:?}", (r, g, b));
}

#[test]
fn truncated_or_fake_jpeg_is_a_clear_error_and_writes_no_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let content = fixtures::jpeg(800, 600, 1, true, &FixtureExif::default());
    let truncated = &content[..content.len() / 3];
    let out = dir.path().join("out");
    let err = stills(Path::new("/lib/cut.jpg"), truncated, MediaFormat::Jpeg, &out).unwrap_err();
    assert!(matches!(err, MediaError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("/lib/cut.jpg"));
    assert!(!out.join("preview.jpg").exists());
    let err = stills(Path::new("/lib/x.jpg"), b"\xff\xd8\xffnonsense", MediaFormat::Jpeg, &out);
    assert!(matches!(err, Err(MediaError::Corrupt { .. })));
}

#[tokio::test]
async fn video_is_probed_and_gets_a_poster_and_a_720p_web_video() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("clip.mov");
    fixtures::video(&src, 1.5, 1280, 960, "2021-06-01T10:00:00Z");
    let cancel = CancellationToken::new();
    let facts = probe_video(&open(&src), ToolLimits::default(), DEFAULT_MAX_PIXELS, &cancel).await.unwrap();
    assert_eq!((facts.metadata.width, facts.metadata.height), (Some(1280), Some(960)));
    let duration = facts.metadata.duration_ms.unwrap();
    assert!((1400..=1700).contains(&duration), "{duration}");
    assert_eq!(facts.created.unwrap().at, Utc.with_ymd_and_hms(2021, 6, 1, 10, 0, 0).unwrap());
    assert_eq!(facts.created.unwrap().source, CaptureSource::Container);

    let out = dir.path().join("proxies");
    let made = fixtures::video_proxies_into(&open(&src), &out, &cancel).await.unwrap();
    let on_disk = |name: &str| std::fs::metadata(out.join(name)).unwrap().len();
    assert_eq!((made.poster_bytes, made.web_video_bytes), (on_disk("poster.jpg"), on_disk("web.mp4")));
    assert_eq!(dims(&out.join("poster.jpg")), (1280, 960));
    let web =
        probe_video(&open(&out.join("web.mp4")), ToolLimits::default(), DEFAULT_MAX_PIXELS, &cancel).await.unwrap();
    assert_eq!((web.metadata.width, web.metadata.height), (Some(960), Some(720)));
    let mut names: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert_eq!(names, ["poster.jpg", "web.mp4"]);
}

/// A phone's portrait video: landscape pixels (2560 × 1440) shown a quarter turn round. ffmpeg turns the frame
/// upright before scaling it, so the poster's long side is its height, and it is at most 1920 all the same (capping
/// the width alone kept it at 1440 × 2560). The web video keeps its own rule: at most 720 lines, upright.
#[tokio::test]
async fn a_portrait_video_s_poster_is_at_most_1920_on_its_longest_side() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("portrait.mov");
    fixtures::rotated_video(&src, 0.6, 2560, 1440, 90);
    let cancel = CancellationToken::new();
    let facts = probe_video(&open(&src), ToolLimits::default(), DEFAULT_MAX_PIXELS, &cancel).await.unwrap();
    assert_eq!((facts.metadata.width, facts.metadata.height), (Some(2560), Some(1440)), "stored landscape");
    assert_eq!(facts.metadata.orientation_degrees % 180, 90, "shown a quarter turn round");
    let out = dir.path().join("proxies");
    fixtures::video_proxies_into(&open(&src), &out, &cancel).await.unwrap();
    assert_eq!(dims(&out.join("poster.jpg")), (1080, 1920));
    let web =
        probe_video(&open(&out.join("web.mp4")), ToolLimits::default(), DEFAULT_MAX_PIXELS, &cancel).await.unwrap();
    let upright = (web.metadata.width, web.metadata.height, web.metadata.orientation_degrees);
    assert_eq!(upright, (Some(406), Some(720), 0));
}

#[tokio::test]
async fn a_short_clip_gets_its_first_frame_and_never_an_earlier_attempts_debris() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("blink.mp4");
    fixtures::video(&src, 0.2, 320, 240, "2021-06-01T10:00:00Z");
    let out = dir.path().join("proxies");
    // A killed attempt left half a poster behind, where ffmpeg writes (and where the Worker would find it were
    // nothing there removed first: ffmpeg writes nothing for so short a clip at its first try).
    let left = fixtures::left_scratch_folder(&out);
    std::fs::write(left.join(".poster.tmp.jpg"), b"\xff\xd8\xff half a jpeg").unwrap();
    let made = fixtures::video_proxies_into(&open(&src), &out, &CancellationToken::new()).await.unwrap();
    assert_eq!(dims(&out.join("poster.jpg")), (320, 240), "a real frame, not the debris");
    assert!(made.poster_bytes > 100);
}

#[tokio::test]
async fn a_video_that_is_not_one_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("broken.mp4");
    std::fs::write(&src, b"\0\0\0\x18ftypisom\0\0\0\0 and then garbage").unwrap();
    let err = probe_video(&open(&src), ToolLimits::default(), DEFAULT_MAX_PIXELS, &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("broken.mp4"), "{err}");
}

#[tokio::test]
async fn cancellation_stops_ffmpeg_within_a_second_and_leaves_no_process() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("long.mp4");
    fixtures::video(&src, 30.0, 1280, 720, "2021-06-01T10:00:00Z");
    let out = dir.path().join("cancelled-proxies");
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let err = fixtures::video_proxies_into(&open(&src), &out, &cancel).await.unwrap_err();
    let stopped_after = started.elapsed();
    assert!(matches!(err, MediaError::Cancelled), "{err:?}");
    // The transcode alone takes several times longer than this: returning here means it was killed, not
    // waited for (a generous bound, so a loaded CI machine does not make it flaky).
    assert!(stopped_after < Duration::from_millis(4500), "stopped {stopped_after:?} after start");
    let survivors = fixtures::processes_holding_open_beneath(&out);
    assert!(survivors.is_empty(), "ffmpeg still running: {survivors:?}");
    // The poster may have been made before the cancel; the web video, and its scratch folder, are not left.
    let left: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(
        left.iter().all(|n| n == "poster.jpg"),
        "the partial transcode is removed with its scratch folder: {left:?}"
    );
}

/// The JPEG `heic_to_jpeg` makes of the HEIF at `src`, with the default limits, its scratch files in `out`.
async fn converted(src: &Path, out: &Path) -> Vec<u8> {
    let content = std::fs::read(src).unwrap();
    let (limits, cancel) = (ToolLimits::default(), CancellationToken::new());
    heic_to_jpeg(&open(src), &content, DEFAULT_MAX_PIXELS, &fixtures::proxy_folder(out), limits, &cancel).await.unwrap()
}

#[tokio::test]
async fn heic_goes_through_libheif_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("IMG_0001.HEIC");
    fixtures::heic(&src, 640, 480, 4);
    let content = std::fs::read(&src).unwrap();
    assert_eq!(almanac_media::detect_format(&src, &content[..16]), Some(MediaFormat::Heic));
    let out = dir.path().join("proxies");
    let jpeg = converted(&src, &out).await;
    let made = stills(&src, &jpeg, MediaFormat::Heic, &out).unwrap();
    assert_eq!((made.width, made.height), (640, 480));
    assert_eq!(dims(&out.join("thumbnail.jpg")), (300, 225));
    let mut names: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert_eq!(names, ["preview.jpg", "thumbnail.jpg"]);
}

/// A HEIF is held to the pixel limit before `heif-convert` runs, as every still is before it is decoded: the
/// sizes its images claim are read from its boxes (a real HEIC's, as heif-enc wrote them, which the pixel budget is
/// charged), and a file whose image claims more than the limit is refused, saying so, with nothing written.
#[tokio::test]
async fn a_heic_claiming_too_many_pixels_is_refused_before_heif_convert_runs() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("IMG_0003.HEIC");
    fixtures::heic(&src, 640, 480, 6);
    let mut content = std::fs::read(&src).unwrap();
    assert_eq!(almanac_media::full_decode_pixels(&content, MediaFormat::Heic), 640 * 480);
    // Its image's `ispe` (a full box: version and flags, then width and height) made to claim 30,000 × 30,000, as a
    // crafted file would; libheif decodes up to 32,768 × 32,768.
    let at = content.windows(4).position(|w| w == b"ispe").expect("an ispe box");
    content[at + 8..at + 12].copy_from_slice(&30_000u32.to_be_bytes());
    content[at + 12..at + 16].copy_from_slice(&30_000u32.to_be_bytes());
    std::fs::write(&src, &content).unwrap();
    assert_eq!(almanac_media::full_decode_pixels(&content, MediaFormat::Heic), 900_000_000);
    let out = dir.path().join("proxies");
    let (limits, cancel) = (ToolLimits::default(), CancellationToken::new());
    match heic_to_jpeg(&open(&src), &content, DEFAULT_MAX_PIXELS, &fixtures::proxy_folder(&out), limits, &cancel).await
    {
        Err(MediaError::TooManyPixels { reason, .. }) => {
            assert!(reason.contains("claims 30000x30000 pixels"), "{reason}");
            assert!(reason.contains("storage.max_image_megapixels"), "{reason}");
        }
        other => panic!("a HEIC claiming 900 megapixels: {other:?}"),
    }
    // The reason is the size check's own words (heif-convert's refusal reads otherwise), and nothing was written.
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0, "heif-convert never ran");
}

/// A HEIF of several images (heif-convert writes one JPEG for each, numbered): the primary's is taken, and
/// nothing is left behind.
#[tokio::test]
async fn a_heic_of_several_images_gives_its_primary_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("IMG_0002.HEIC");
    fixtures::heic_of_several(&src, &[(640, 480), (320, 200), (100, 80)], 5);
    let out = dir.path().join("proxies");
    let jpeg = converted(&src, &out).await;
    let made = stills(&src, &jpeg, MediaFormat::Heic, &out).unwrap();
    assert_eq!((made.width, made.height), (640, 480), "the primary image");
    let mut names: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert_eq!(names, ["preview.jpg", "thumbnail.jpg"]);
}

/// A link placed where heif-convert writes its JPEG (`.heic-decode.jpg`), in the proxy folder or in the scratch folder
/// a killed Worker left, is never written through: heif-convert writes into a scratch folder made anew, the file the
/// links point to, outside, is left as it was, and the scratch folder is gone afterwards.
#[tokio::test]
async fn a_link_at_heif_convert_s_output_name_is_never_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("IMG_0005.HEIC");
    fixtures::heic(&src, 640, 480, 4);
    let outside = dir.path().join("outside.jpg");
    std::fs::write(&outside, b"someone else's file").unwrap();
    let out = dir.path().join("proxies");
    let left = fixtures::left_scratch_folder(&out);
    std::os::unix::fs::symlink(&outside, out.join(".heic-decode.jpg")).unwrap();
    std::os::unix::fs::symlink(&outside, left.join(".heic-decode.jpg")).unwrap();
    let jpeg = converted(&src, &out).await;
    assert_eq!(image::load_from_memory(&jpeg).unwrap().to_rgb8().dimensions(), (640, 480));
    assert_eq!(std::fs::read(&outside).unwrap(), b"someone else's file");
    let names: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, [".heic-decode.jpg"], "only the link in the proxy folder is left (not ours to remove)");
}

/// Which corner of `image` holds the red marker [`fixtures::picture`] draws top-left, if one does. Its other corners
/// are never red when the picture's seed gives a high blue (seed 5: 185).
fn red_corner(image: &image::RgbImage) -> Option<&'static str> {
    let (w, h) = image.dimensions();
    let red = |x, y| {
        let p = image.get_pixel(x, y);
        p[0] > 180 && p[1] < 80 && p[2] < 80
    };
    [("top left", 2, 2), ("top right", w - 3, 2), ("bottom right", w - 3, h - 3), ("bottom left", 2, h - 3)]
        .into_iter()
        .find(|(_, x, y)| red(*x, *y))
        .map(|(corner, ..)| corner)
}

/// Where the marker stored top-left is once the stored pixels are turned by EXIF orientation 1 to 8.
fn corner_after(orientation: u16) -> &'static str {
    ["top left", "top right", "bottom right", "bottom left"][usize::from((orientation - 1) % 4)]
}

/// An iPhone's portrait photo: its pixels stored landscape, a quarter turn clockwise in the HEIF's `irot` and the
/// same in its EXIF (orientation 6). libheif turns it as it decodes, so the preview is upright (portrait, the marker
/// stored top-left now top-right) and not turned a second time by the EXIF orientation, which left it on its side.
/// The catalogue records it as it records the same photo taken as a JPEG: the stored size and a quarter turn.
#[tokio::test]
async fn a_heic_turned_by_its_irot_is_turned_once_whatever_its_exif_says() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("IMG_0004.HEIC");
    let exif = FixtureExif { orientation: Some(6), ..FixtureExif::camera("2023:05:06 07:08:09", "+02:00") };
    fixtures::heic_transformed(&src, 640, 480, 5, &exif, &[fixtures::irot(3)]);
    let content = std::fs::read(&src).unwrap();
    assert_eq!(read_exif(&content).orientation, 6, "the HEIC's EXIF says a quarter turn too");
    let facts = read_still_facts(&content, None);
    assert_eq!((facts.orientation, facts.metadata.orientation_degrees), (6, 90));
    let out = dir.path().join("proxies");
    let jpeg = converted(&src, &out).await;
    let made = make_still_proxies(
        &src,
        &jpeg,
        MediaFormat::Heic,
        facts.orientation,
        DEFAULT_MAX_PIXELS,
        &fixtures::proxy_folder(&out),
    )
    .unwrap();
    assert_eq!((made.width, made.height), (640, 480), "the stored size, before the turn");
    assert_eq!(dims(&out.join("preview.jpg")), (480, 640), "upright: taller than wide");
    assert_eq!(dims(&out.join("thumbnail.jpg")), (225, 300));
    let preview = image::open(out.join("preview.jpg")).unwrap().to_rgb8();
    assert_eq!(red_corner(&preview), Some("top right"), "turned a quarter turn clockwise, once");
}

/// A HEIF's orientation is what its primary image's `irot` and `imir` make of it, in the order they are listed,
/// whatever its EXIF says (orientation 6 in every one of these): the orientation read is the one libheif shows, the
/// marker stored top-left where that orientation puts it, and the sides exchanged for a quarter turn.
#[tokio::test]
async fn a_heif_orientation_is_what_its_irot_and_imir_make_libheif_show() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("proxies");
    let exif = FixtureExif { orientation: Some(6), ..FixtureExif::default() };
    let (irot, imir) = (fixtures::irot, fixtures::imir);
    let cases = [
        ("none", vec![], 1),
        ("irot 1", vec![irot(1)], 8),
        ("irot 2", vec![irot(2)], 3),
        ("irot 3", vec![irot(3)], 6),
        ("imir 0", vec![imir(0)], 4),
        ("imir 1", vec![imir(1)], 2),
        ("irot 3 then imir 0", vec![irot(3), imir(0)], 7),
        ("imir 0 then irot 3", vec![imir(0), irot(3)], 5),
    ];
    for (name, properties, orientation) in cases {
        let src = dir.path().join(format!("{name}.heic"));
        fixtures::heic_transformed(&src, 64, 48, 5, &exif, &properties);
        let facts = read_still_facts(&std::fs::read(&src).unwrap(), None);
        assert_eq!(facts.orientation, orientation, "{name}");
        let shown = image::load_from_memory(&converted(&src, &out).await).unwrap().to_rgb8();
        let sides = if orientation >= 5 { (48, 64) } else { (64, 48) };
        assert_eq!(shown.dimensions(), sides, "{name}");
        assert_eq!(red_corner(&shown), Some(corner_after(orientation)), "{name}");
    }
}

#[test]
fn apple_burst_and_live_photo_identifiers_are_read_from_the_maker_note() {
    let exif = FixtureExif {
        apple_burst_id: Some("0F2D-BURST".into()),
        apple_content_id: Some("A1B2-LIVE".into()),
        ..FixtureExif::camera("2022:02:02 10:00:00", "+00:00")
    };
    let facts = read_exif(&fixtures::jpeg(64, 48, 1, false, &exif));
    assert_eq!(facts.metadata.camera_burst_id.as_deref(), Some("0F2D-BURST"));
    assert_eq!(facts.metadata.live_photo_content_id.as_deref(), Some("A1B2-LIVE"));
    let plain = read_exif(&fixtures::jpeg(64, 48, 1, false, &FixtureExif::camera("2022:02:02 10:00:00", "+00:00")));
    assert_eq!((plain.metadata.camera_burst_id, plain.metadata.live_photo_content_id), (None, None));
}
