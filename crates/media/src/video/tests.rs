use std::path::PathBuf;
use std::time::Duration;

use super::*;
use crate::fixtures::video_in;
use crate::fixtures::{self, FixtureExif};
use crate::{DEFAULT_MAX_PIXELS, RootFolder};

/// A stand-in for ffmpeg, written by a shell of its own (so no file handle of ours is open on it when it
/// runs), doing `poster` when asked for the poster and `web` for the web video; its output is its last
/// argument. Returns its path, as the program to run.
fn fake_ffmpeg(dir: &Path, poster: &str, web: &str) -> &'static str {
    let path = dir.join("fake-ffmpeg");
    let script =
        format!("#!/bin/sh\nfor last; do :; done\ncase \"$last\" in\n*.jpg) {poster} ;;\n*.mp4) {web} ;;\nesac\n");
    let status = std::process::Command::new("sh")
        .args(["-c", "cat > \"$1\" && chmod +x \"$1\"", "sh"])
        .arg(&path)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            std::io::Write::write_all(&mut child.stdin.take().expect("piped"), script.as_bytes())?;
            child.wait()
        })
        .expect("write the stand-in");
    assert!(status.success());
    Box::leak(path.to_string_lossy().into_owned().into_boxed_str())
}

struct Setup {
    dir: tempfile::TempDir,
    clip: Original,
    whole_jpeg: PathBuf,
    out: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    fixtures::video(&dir.path().join("clip.mp4"), 1.0, 320, 240, "2021-06-01T10:00:00Z");
    let clip = RootFolder::open(dir.path()).unwrap().open_file(b"clip.mp4").unwrap();
    let whole_jpeg = dir.path().join("whole.jpg");
    std::fs::write(&whole_jpeg, fixtures::jpeg(1280, 960, 7, true, &FixtureExif::default())).unwrap();
    assert!(std::fs::metadata(&whole_jpeg).unwrap().len() > 16 * 1024, "a poster larger than what is cut");
    let out = dir.path().join("proxies");
    Setup { dir, clip, whole_jpeg, out }
}

impl Setup {
    /// The clip's proxies, made into the proxy folder by `ffmpeg`.
    async fn made_by(
        &self,
        ffmpeg: &'static str,
        limits: ToolLimits,
        max_pixels: u64,
        cancel: &CancellationToken,
    ) -> Result<VideoProxies, MediaError> {
        make_video_proxies_with(ffmpeg, &self.clip, &fixtures::proxy_folder(&self.out), limits, max_pixels, cancel)
            .await
    }
}

fn names(dir: &Path) -> Vec<String> {
    if dir.exists() { fixtures::names(dir) } else { Vec::new() }
}

#[tokio::test]
async fn a_poster_cut_short_by_a_failing_ffmpeg_never_takes_its_name_and_the_error_says_why() {
    let s = setup();
    let cut = format!(
        "head -c 8192 '{}' > \"$last\"; echo 'av_interleaved_write_frame(): No space left on device' >&2; exit 1",
        s.whole_jpeg.display()
    );
    let ffmpeg = fake_ffmpeg(s.dir.path(), &cut, "exit 1");
    let cancel = CancellationToken::new();
    let err = s.made_by(ffmpeg, ToolLimits::default(), DEFAULT_MAX_PIXELS, &cancel).await.unwrap_err();
    assert!(
        matches!(&err, MediaError::ProxyNotMade { proxy: ProxyType::Poster, .. }),
        "a failed tool is an error: {err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("No space left on device") && message.contains("storage.proxy_root"), "{message}");
    assert_eq!(names(&s.out), Vec::<String>::new(), "neither the poster nor its temporary file is left");
}

#[tokio::test]
async fn a_poster_cut_short_is_refused_even_when_ffmpeg_says_it_succeeded() {
    let s = setup();
    let cut = format!("head -c 8192 '{}' > \"$last\"", s.whole_jpeg.display());
    let ffmpeg = fake_ffmpeg(s.dir.path(), &cut, "exit 1");
    let cancel = CancellationToken::new();
    let err = s.made_by(ffmpeg, ToolLimits::default(), DEFAULT_MAX_PIXELS, &cancel).await.unwrap_err();
    assert!(matches!(&err, MediaError::ProxyNotMade { proxy: ProxyType::Poster, .. }), "{err:?}");
    assert!(err.to_string().contains("cut short"), "{err}");
    assert_eq!(names(&s.out), Vec::<String>::new());
}

#[tokio::test]
async fn a_web_video_cut_short_is_refused_even_when_ffmpeg_says_it_succeeded() {
    let s = setup();
    // A whole poster, and a web video that is the first part of a real one.
    let web = s.dir.path().join("whole.mp4");
    let status = std::process::Command::new("ffmpeg")
        .args(["-nostdin", "-y", "-v", "error", "-i"])
        .arg(s.dir.path().join("clip.mp4"))
        .args(["-c:v", "libx264", "-preset", "veryfast", "-movflags", "+faststart", "-f", "mp4"])
        .arg(&web)
        .status()
        .unwrap();
    assert!(status.success());
    let keep = std::fs::metadata(&web).unwrap().len() * 2 / 3;
    let poster = format!("cp '{}' \"$last\"", s.whole_jpeg.display());
    let cut = format!("head -c {keep} '{}' > \"$last\"", web.display());
    let ffmpeg = fake_ffmpeg(s.dir.path(), &poster, &cut);
    let cancel = CancellationToken::new();
    let err = s.made_by(ffmpeg, ToolLimits::default(), DEFAULT_MAX_PIXELS, &cancel).await.unwrap_err();
    assert!(matches!(&err, MediaError::ProxyNotMade { proxy: ProxyType::WebVideo, .. }), "{err:?}");
    assert!(err.to_string().contains("cut short"), "{err}");
    assert_eq!(names(&s.out), ["poster.jpg"], "the whole poster stays; no part of the web video does");
    assert_eq!(std::fs::read(s.out.join("poster.jpg")).unwrap(), std::fs::read(&s.whole_jpeg).unwrap());
}

#[tokio::test]
async fn a_failing_transcode_is_an_error_and_leaves_no_web_video() {
    let s = setup();
    let poster = format!("cp '{}' \"$last\"", s.whole_jpeg.display());
    let ffmpeg = fake_ffmpeg(s.dir.path(), &poster, "echo partial > \"$last\"; echo 'Conversion failed!' >&2; exit 1");
    let cancel = CancellationToken::new();
    let err = s.made_by(ffmpeg, ToolLimits::default(), DEFAULT_MAX_PIXELS, &cancel).await.unwrap_err();
    assert!(matches!(&err, MediaError::ProxyNotMade { proxy: ProxyType::WebVideo, .. }), "{err:?}");
    assert!(err.to_string().contains("Conversion failed!"), "{err}");
    assert_eq!(names(&s.out), ["poster.jpg"]);
}

/// What a refusal for a video's frames must say: the frame's size and the setting to raise.
fn assert_refused_for_its_frames(err: &MediaError, size: &str) {
    assert!(matches!(err, MediaError::TooManyPixels { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&format!("a frame of the video claims {size} pixels")), "{message}");
    assert!(message.contains("storage.max_image_megapixels") && message.contains("refused"), "{message}");
}

/// A video's frames are held to the stills' pixel limit: ffprobe and ffmpeg refuse a picture over it before
/// decoding it, and the refusal names the frame's size and the setting. Neither proxy is left.
#[tokio::test]
async fn a_video_whose_frames_are_over_the_pixel_limit_is_refused_by_the_probe_and_by_ffmpeg() {
    let s = setup();
    let cancel = CancellationToken::new();
    // 320 x 240 is 76,800 pixels.
    let probed = probe_video(&s.clip, ToolLimits::default(), 50_000, &cancel).await;
    assert_refused_for_its_frames(&probed.unwrap_err(), "320x240");
    let made =
        make_video_proxies(&s.clip, &fixtures::proxy_folder(&s.out), ToolLimits::default(), 50_000, &cancel).await;
    assert_refused_for_its_frames(&made.unwrap_err(), "320x240");
    assert_eq!(names(&s.out), Vec::<String>::new(), "no proxy, no temporary file");
    // At the limit, the same clip is read and its proxies made.
    let facts = probe_video(&s.clip, ToolLimits::default(), 76_800, &cancel).await.unwrap();
    assert_eq!((facts.metadata.width, facts.metadata.height), (Some(320), Some(240)));
    make_video_proxies(&s.clip, &fixtures::proxy_folder(&s.out), ToolLimits::default(), 76_800, &cancel).await.unwrap();
    assert_eq!(names(&s.out), ["poster.jpg", "web.mp4"]);
}

/// A stream that grows past the limit midway (here a camera's transport stream of 320 x 240, then 640 x 480):
/// ffprobe and the poster see only its start, and ffmpeg's transcode, which leaves out every picture over the
/// limit, ends with success. The web video it wrote, cut short, is refused for the frames it left out.
#[tokio::test]
async fn a_video_that_grows_past_the_pixel_limit_midway_gets_no_web_video() {
    let s = setup();
    let (small, large) = (s.dir.path().join("small.mts"), s.dir.path().join("large.mts"));
    video_in(&small, 2.0, 320, 240, None);
    video_in(&large, 1.0, 640, 480, None);
    let joined = [std::fs::read(&small).unwrap(), std::fs::read(&large).unwrap()].concat();
    std::fs::write(s.dir.path().join("joined.mts"), joined).unwrap();
    let joined = RootFolder::open(s.dir.path()).unwrap().open_file(b"joined.mts").unwrap();
    let cancel = CancellationToken::new();
    let facts = probe_video(&joined, ToolLimits::default(), 100_000, &cancel).await.unwrap();
    assert_eq!((facts.metadata.width, facts.metadata.height), (Some(320), Some(240)), "the probe sees the start");
    let err = make_video_proxies(&joined, &fixtures::proxy_folder(&s.out), ToolLimits::default(), 100_000, &cancel)
        .await
        .unwrap_err();
    assert_refused_for_its_frames(&err, "640x480");
    assert!(!names(&s.out).iter().any(|n| n.contains("web")), "no web video, whole or not: {:?}", names(&s.out));
}

/// However ffmpeg ends, its decoder's refusal of a picture over the limit is the answer: here a stand-in that
/// writes a web video, says what libavcodec says of a picture over the limit, and ends with success.
#[tokio::test]
async fn ffmpegs_refusal_of_a_picture_over_the_limit_is_the_answer_even_when_it_ends_with_success() {
    let s = setup();
    let poster = format!("cp '{}' \"$last\"", s.whole_jpeg.display());
    let web = "echo partial > \"$last\"; echo '[h264 @ 0x1] [IMGUTILS @ 0x2] Picture size 7680x4320 exceeds specified \
               max pixel count 1000000, see the documentation if you wish to increase it' >&2; exit 0";
    let ffmpeg = fake_ffmpeg(s.dir.path(), &poster, web);
    let cancel = CancellationToken::new();
    let err = s.made_by(ffmpeg, ToolLimits::default(), 1_000_000, &cancel).await;
    let err = err.unwrap_err();
    assert_refused_for_its_frames(&err, "7680x4320");
    assert!(err.to_string().contains("(33 megapixels), more than the limit of 1 "), "{err}");
    assert_eq!(names(&s.out), ["poster.jpg"], "the web video is not left");
}

/// A tool killed by SIGKILL that the Worker did not kill (the kernel's out-of-memory killer, most often) fails the
/// file with what to look at and what to lower.
#[tokio::test]
async fn a_tool_killed_from_outside_says_it_may_have_been_the_out_of_memory_killer() {
    let s = setup();
    let ffmpeg = fake_ffmpeg(s.dir.path(), "echo decoding >&2; kill -9 $$", "exit 1");
    let cancel = CancellationToken::new();
    let err = s.made_by(ffmpeg, ToolLimits::default(), DEFAULT_MAX_PIXELS, &cancel).await.unwrap_err();
    let message = err.to_string();
    assert!(message.contains("out-of-memory killer") && message.contains("worker.max_concurrent_files"), "{message}");
    // A tool that fails of its own accord says only what it said.
    let ffmpeg = fake_ffmpeg(s.dir.path(), "echo 'Invalid data found' >&2; exit 1", "exit 1");
    let err = s.made_by(ffmpeg, ToolLimits::default(), DEFAULT_MAX_PIXELS, &cancel).await.unwrap_err();
    assert!(!err.to_string().contains("out-of-memory"), "{err}");
    assert_eq!(names(&s.out), Vec::<String>::new());
}

/// The poster is taken from half a second in; only when that gives nothing is it tried again from the start.
/// A first try that gave a whole poster is the answer (ffmpeg run once for it), and a first try stopped by its
/// time limit is the answer too: a hung ffmpeg is not waited for a second time.
#[tokio::test]
async fn a_poster_is_tried_again_from_the_start_only_when_the_first_try_gave_nothing() {
    let s = setup();
    let tries = s.dir.path().join("poster-tries");
    let count = format!("echo \"$*\" >> '{}'", tries.display());
    let tries_of = |tries: &Path| {
        let text = std::fs::read_to_string(tries).unwrap_or_default();
        text.lines().map(|l| if l.contains("-ss 0.5") { "half a second in" } else { "the start" }).collect::<Vec<_>>()
    };
    let cancel = CancellationToken::new();

    let whole = format!("{count}; cp '{}' \"$last\"", s.whole_jpeg.display());
    let ffmpeg = fake_ffmpeg(s.dir.path(), &whole, "exit 1");
    let _ = s.made_by(ffmpeg, ToolLimits::default(), DEFAULT_MAX_PIXELS, &cancel).await;
    assert_eq!(tries_of(&tries), ["half a second in"], "a whole poster at the first try");

    std::fs::remove_file(&tries).unwrap();
    let empty_then_whole = format!(
        "{count}; case \"$*\" in *'-ss 0.5'*) : > \"$last\" ;; *) cp '{}' \"$last\" ;; esac",
        s.whole_jpeg.display()
    );
    let ffmpeg = fake_ffmpeg(s.dir.path(), &empty_then_whole, "exit 1");
    let _ = s.made_by(ffmpeg, ToolLimits::default(), DEFAULT_MAX_PIXELS, &cancel).await;
    assert_eq!(tries_of(&tries), ["half a second in", "the start"], "nothing half a second in");

    std::fs::remove_file(&tries).unwrap();
    let hung = format!("{count}; exec sleep 60");
    let ffmpeg = fake_ffmpeg(s.dir.path(), &hung, "exit 1");
    let limits = ToolLimits { quick: Duration::from_secs(1), ..ToolLimits::default() };
    let err = s.made_by(ffmpeg, limits, DEFAULT_MAX_PIXELS, &cancel).await.unwrap_err();
    assert!(matches!(err, MediaError::TimedOut { .. }), "{err:?}");
    assert_eq!(tries_of(&tries), ["half a second in"], "a hung first try is not followed by a second");
}

/// ffprobe's counter-clockwise rotation becomes the clockwise quarter turn nearest to it, whatever the angle.
#[test]
fn a_rotation_becomes_the_nearest_clockwise_quarter_turn() {
    for (counter_clockwise, clockwise) in [
        (0, 0),
        (-90, 90),
        (90, 270),
        (180, 180),
        (-180, 180),
        (-270, 270),
        (-45, 90),
        (-29, 0),
        (-89, 90),
        (350, 0),
        (-350, 0),
        (725, 0),
        (i64::MIN, 0),
        (i64::MAX, 0),
    ] {
        assert_eq!(clockwise_degrees(counter_clockwise), clockwise, "{counter_clockwise}");
    }
}

/// A container time is known to be a true UTC instant when a phone wrote the file (Android's or Apple's keys),
/// and only when it is the UTC `creation_time` that dates it; a camera's (no such keys) is not.
#[tokio::test]
async fn a_phones_creation_time_is_known_as_utc_and_a_cameras_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let utc = "2023-12-25T01:15:00Z";
    fixtures::quicktime_video(&dir.path().join("pixel.mp4"), utc, &[("com.android.version", "13")]);
    fixtures::quicktime_video(&dir.path().join("gopro.mp4"), utc, &[]);
    let apple_local = [("com.apple.quicktime.creationdate", "2023-12-24T20:15:00-0500")];
    fixtures::quicktime_video(&dir.path().join("iphone.mov"), utc, &apple_local);
    let root = RootFolder::open(dir.path()).unwrap();
    let cancel = CancellationToken::new();
    for (name, in_utc, offset) in
        [("pixel.mp4", true, None), ("gopro.mp4", false, None), ("iphone.mov", true, Some(-300))]
    {
        let clip = root.open_file(name.as_bytes()).unwrap();
        let facts = probe_video(&clip, ToolLimits::default(), DEFAULT_MAX_PIXELS, &cancel).await.unwrap();
        let created = facts.created.expect("a creation time");
        assert_eq!(created.at.to_rfc3339(), "2023-12-25T01:15:00+00:00", "{name}");
        assert_eq!((facts.created_in_utc, created.offset_minutes), (in_utc, offset), "{name}");
    }
}
