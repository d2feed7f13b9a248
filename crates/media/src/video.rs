use std::ffi::OsString;
use std::path::Path;

use almanac_domain::{AssetMetadata, CaptureSource, CaptureTime, ProxyType};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::proxy_folder::{ProxyFolder, Scratch};
use crate::still::{check_jpeg, file_name};
use crate::tool::Given;
use crate::tool::{OPEN_ORIGINAL, run_tool};
use crate::{MediaError, Original, ToolLimits};

/// What ffprobe says about a video.
#[derive(Debug, Clone, PartialEq)]
pub struct VideoFacts {
    /// Metadata for the catalogue.
    pub metadata: AssetMetadata,
    /// The container's creation time, if any.
    pub created: Option<CaptureTime>,
    /// Whether a creation time there with no offset is a true UTC instant: the file was written by a phone
    /// (its container carries Android's `com.android.*` or Apple's `com.apple.quicktime.*` keys), whose
    /// `creation_time` is UTC. Cameras that write their local clock as UTC (GoPro, DJI) carry neither, and their
    /// time is left as it reads.
    pub created_in_utc: bool,
}

/// What making a video's proxies produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VideoProxies {
    /// Size of `poster.jpg`.
    pub poster_bytes: u64,
    /// Size of `web.mp4`.
    pub web_video_bytes: u64,
}

#[derive(Deserialize)]
struct Probe {
    #[serde(default)]
    streams: Vec<Stream>,
    format: Option<Format>,
}

#[derive(Deserialize)]
struct Stream {
    codec_type: Option<String>,
    width: Option<u32>,
    height: Option<u32>,
    #[serde(default)]
    tags: std::collections::HashMap<String, String>,
    #[serde(default)]
    side_data_list: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct Format {
    duration: Option<String>,
    #[serde(default)]
    tags: std::collections::HashMap<String, String>,
}

/// A video's time from its container's tags, the first of these that is plausible:
/// - an iPhone's local time with its offset (`com.apple.quicktime.creationdate`), which holds the day the video was
///   taken: written `+0100`, with no colon, which RFC 3339 (and chrono's parser of it) refuses, so it is read as
///   EXIF dates are;
/// - the UTC `creation_time`, with the offset the Apple key says when that key has none
///   ([`CaptureTime::with_offset_from_local`]);
/// - the Apple key's local time, with no offset, when there is no UTC time.
fn container_time(tag: &impl Fn(&str) -> Option<String>) -> Option<CaptureTime> {
    let apple = tag("com.apple.quicktime.creationdate").and_then(|t| crate::dates::parse_date_text(&t));
    let local = apple.map(|stamp| stamp.capture(CaptureSource::Container));
    let utc = tag("creation_time").and_then(|t| DateTime::parse_from_rfc3339(&t).ok()).map(|t| CaptureTime {
        at: t.with_timezone(&Utc),
        offset_minutes: None,
        source: CaptureSource::Container,
    });
    let with_offset = local.filter(|l| l.offset_minutes.is_some());
    let utc = utc.map(|u| u.with_offset_from_local(local.filter(plausible)));
    [with_offset, utc, local].into_iter().flatten().find(plausible)
}

/// An unset clock (the Unix or QuickTime epoch) or a date in the future is no capture time: the file name or the
/// mtime then decide.
fn plausible(c: &CaptureTime) -> bool {
    use chrono::Datelike;
    c.at.year() >= 1980 && c.at <= Utc::now() + chrono::Duration::days(1)
}

/// Reads a video's dimensions, duration, rotation, creation time and Apple content identifier with ffprobe,
/// which reads the open original (never its path). ffprobe decodes a picture or two to describe the streams: one
/// larger than `max_pixels` is refused before it is decoded ([`decoder_limit`]).
pub async fn probe_video(
    original: &Original,
    limits: ToolLimits,
    max_pixels: u64,
    cancel: &CancellationToken,
) -> Result<VideoFacts, MediaError> {
    let path = original.path();
    let args = args(&["-v", "error"])
        .into_iter()
        .chain(decoder_limit(max_pixels))
        .chain(args(&["-print_format", "json", "-show_format", "-show_streams", OPEN_ORIGINAL]))
        .collect();
    let out =
        run_tool("ffprobe", "ffmpeg", args, Given::input(tool_input(original)?), path, limits.quick, cancel).await?;
    let probe: Probe = serde_json::from_slice(&out).map_err(|e| MediaError::corrupt(path, e))?;
    let video = probe
        .streams
        .iter()
        .find(|s| s.codec_type.as_deref() == Some("video"))
        .ok_or_else(|| MediaError::corrupt(path, "no video stream"))?;
    let format = probe.format.as_ref();
    let tag = |key: &str| -> Option<String> {
        format
            .and_then(|f| f.tags.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)))
            .or_else(|| video.tags.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)))
            .and_then(|(_, v)| crate::text::metadata_text(v.as_bytes()))
    };
    let rotation = video
        .side_data_list
        .iter()
        .find_map(|d| d.get("rotation").and_then(serde_json::Value::as_i64))
        .or_else(|| tag("rotate").and_then(|r| r.parse().ok()))
        .unwrap_or(0);
    let created = match container_time(&tag) {
        Some(created) => Some(created),
        // An AVI's IDIT chunk and an AVCHD camcorder's date are not among ffprobe's tags: read from the open file.
        None => crate::dates::read_embedded_video_date(original).await.filter(plausible),
    };
    let duration_ms = format
        .and_then(|f| f.duration.as_deref())
        .and_then(|d| d.parse::<f64>().ok())
        .filter(|d| d.is_finite() && *d >= 0.0)
        .map(|d| (d * 1000.0).round() as u64);
    let metadata = AssetMetadata {
        width: video.width.filter(|w| *w > 0),
        height: video.height.filter(|h| *h > 0),
        orientation_degrees: clockwise_degrees(rotation),
        duration_ms,
        camera_make: tag("com.apple.quicktime.make").or_else(|| tag("make")),
        camera_model: tag("com.apple.quicktime.model").or_else(|| tag("model")),
        live_photo_content_id: tag("com.apple.quicktime.content.identifier"),
        ..AssetMetadata::default()
    };
    let phone = |tags: &std::collections::HashMap<String, String>| {
        tags.keys()
            .any(|k| ["com.android.", "com.apple.quicktime."].iter().any(|p| k.to_ascii_lowercase().starts_with(p)))
    };
    // The UTC `creation_time` itself, not the Apple key's local time without an offset taken when there is none.
    let utc = tag("creation_time").and_then(|t| DateTime::parse_from_rfc3339(&t).ok());
    let taken_from_utc = created.is_some_and(|c| utc.is_some_and(|u| u == c.at));
    let created_in_utc = taken_from_utc && (format.is_some_and(|f| phone(&f.tags)) || phone(&video.tags));
    Ok(VideoFacts { metadata, created, created_in_utc })
}

/// The clockwise turn that makes a video upright, from ffprobe's counter-clockwise rotation in degrees. The
/// catalogue keeps 0, 90, 180 or 270: a display matrix at another angle (a hand-made or damaged file, where ffprobe
/// says -45 or -29) is taken to the nearest quarter turn. Such an angle was refused at the catalogue's write, and
/// stopped the crawl at that video at every crawl.
fn clockwise_degrees(counter_clockwise: i64) -> u16 {
    let clockwise = (-counter_clockwise.rem_euclid(360)).rem_euclid(360);
    (((clockwise + 45) / 90 * 90) % 360) as u16
}

/// Writes `poster.jpg` (a frame near the start, upright, at most 1920 px on its longest side) and `web.mp4`
/// (H.264, at most 720 lines, AAC, fast start) into `folder`, each written under a temporary name in the folder's
/// scratch folder ([`ProxyFolder::scratch`]: nobody else may write there, and ffmpeg is given it through its handle,
/// never its path), flushed to disk, then renamed into place. ffmpeg reads the open original,
/// never its path, and decodes no picture larger than `max_pixels` ([`decoder_limit`]): a video with one is
/// refused, and neither proxy takes its name.
///
/// A proxy takes its name only when whole: ffmpeg ended with success, and the file checks out (the poster
/// decodes to its end; the web video probes with a video stream and a duration, and every packet its index
/// lists is there). Otherwise its temporary file is removed and the answer is a
/// [`MediaError::ProxyNotMade`] with ffmpeg's last words or what the check found (a full proxy volume shows
/// here: ffmpeg stops writing and fails).
pub async fn make_video_proxies(
    original: &Original,
    folder: &ProxyFolder,
    limits: ToolLimits,
    max_pixels: u64,
    cancel: &CancellationToken,
) -> Result<VideoProxies, MediaError> {
    make_video_proxies_with("ffmpeg", original, folder, limits, max_pixels, cancel).await
}

/// [`make_video_proxies`] with the ffmpeg program named (tests give a stand-in that fails as a full disk does).
pub(crate) async fn make_video_proxies_with(
    ffmpeg: &'static str,
    original: &Original,
    folder: &ProxyFolder,
    limits: ToolLimits,
    max_pixels: u64,
    cancel: &CancellationToken,
) -> Result<VideoProxies, MediaError> {
    let input = OsString::from(OPEN_ORIGINAL);
    let scratch = folder.scratch()?;
    let making = Making { ffmpeg, original, input, folder, scratch, limits, max_pixels, cancel };
    let poster_bytes = making.poster().await?;
    let web_video_bytes = making.web_video().await?;
    drop(making);
    folder.sync()?;
    Ok(VideoProxies { poster_bytes, web_video_bytes })
}

/// One video's proxies being made: ffmpeg run on the open original, writing into `folder`.
struct Making<'a> {
    ffmpeg: &'static str,
    original: &'a Original,
    /// The original as ffmpeg is told to read it (its standard input).
    input: OsString,
    folder: &'a ProxyFolder,
    /// Where ffmpeg writes, before each proxy is renamed into the folder.
    scratch: Scratch<'a>,
    limits: ToolLimits,
    /// The most pixels a picture ffmpeg decodes may have.
    max_pixels: u64,
    cancel: &'a CancellationToken,
}

impl Making<'_> {
    /// A proxy that is not whole, or that ffmpeg could not make: why.
    fn not_made(&self, proxy: ProxyType, reason: String) -> MediaError {
        MediaError::ProxyNotMade {
            path: self.original.path().to_owned(),
            proxy,
            dir: self.folder.path().to_owned(),
            reason,
        }
    }

    /// A tool that fails while making a proxy: stopped (cancel, time limit) and missing stay what they are.
    fn failed(&self, proxy: ProxyType, e: MediaError) -> MediaError {
        match e {
            MediaError::Tool { tool, message, .. } => self.not_made(proxy, format!("{tool} failed ({message})")),
            other => other,
        }
    }

    /// Runs ffmpeg with `args` within `limit`, reading `input` (the original, opened again for the tool) and writing
    /// into the folder.
    async fn ffmpeg(
        &self,
        args: Vec<OsString>,
        input: std::fs::File,
        limit: std::time::Duration,
    ) -> Result<(), MediaError> {
        let given = Given { stdin: Some(input), folder: Some(&self.scratch) };
        run_tool(self.ffmpeg, "ffmpeg", args, given, self.original.path(), limit, self.cancel).await.map(drop)
    }

    /// `poster.jpg`, checked whole and flushed, then renamed into place; its size.
    async fn poster(&self) -> Result<u64, MediaError> {
        let poster = file_name(ProxyType::Poster);
        let poster_tmp = ProxyType::Poster.temporary_file_name().expect("a file proxy");
        self.poster_frame(poster_tmp).await?;
        let checked = async {
            let jpeg =
                self.scratch.read(poster_tmp).await.map_err(|e| MediaError::write(self.scratch.join(poster_tmp), e))?;
            check_jpeg(&jpeg).map_err(|reason| {
                self.not_made(ProxyType::Poster, format!("the JPEG ffmpeg wrote is not whole ({reason})"))
            })?;
            self.scratch.sync_file(poster_tmp).await
        };
        let checked = checked.await;
        if let Err(e) = checked {
            self.scratch.remove(poster_tmp);
            return Err(e);
        }
        // Its size as written: what stands at its name once it is placed is not looked at again.
        let size = self.scratch.size(poster_tmp)?;
        self.scratch.place(poster_tmp, poster)?;
        Ok(size)
    }

    /// Has ffmpeg write a frame near the start to `poster_tmp` (removed when this fails).
    ///
    /// A clip shorter than half a second has no frame there (ffmpeg then succeeds and writes nothing, or
    /// fails): that case is tried again from the start, and only that second try's failure is the answer. A
    /// cancel or a time limit ends it at the first try.
    async fn poster_frame(&self, poster_tmp: &str) -> Result<(), MediaError> {
        let poster_args = |seek: &[&str]| -> Vec<OsString> {
            args(&["-nostdin", "-y", "-v", "error"])
                .into_iter()
                .chain(decoder_limit(self.max_pixels))
                .chain(args(seek))
                .chain(args(&["-i"]))
                .chain([self.input.clone()])
                .chain(args(&["-frames:v", "1", "-vf", &poster_scale(), "-q:v", "3", "-update", "1"]))
                .chain([self.scratch.for_tool(poster_tmp)])
                .collect()
        };
        let first_try = self.ffmpeg(poster_args(&["-ss", "0.5"]), tool_input(self.original)?, self.limits.quick);
        match first_try.await {
            Err(stopped @ (MediaError::Cancelled | MediaError::TimedOut { .. } | MediaError::ToolMissing { .. })) => {
                self.scratch.remove(poster_tmp);
                Err(stopped)
            }
            Ok(()) if self.scratch.is_non_empty(poster_tmp) => Ok(()),
            _ => {
                self.scratch.remove(poster_tmp);
                // Shorter than half a second: take the very first frame.
                let first_frame = self.ffmpeg(poster_args(&[]), tool_input(self.original)?, self.limits.quick);
                if let Err(e) = first_frame.await {
                    self.scratch.remove(poster_tmp);
                    return Err(self.failed(ProxyType::Poster, e));
                }
                if !self.scratch.is_non_empty(poster_tmp) {
                    self.scratch.remove(poster_tmp);
                    return Err(MediaError::corrupt(self.original.path(), "ffmpeg found no frame for a poster"));
                }
                Ok(())
            }
        }
    }

    /// `web.mp4`, transcoded, checked whole and flushed, then renamed into place; its size.
    async fn web_video(&self) -> Result<u64, MediaError> {
        let web = file_name(ProxyType::WebVideo);
        let web_tmp = ProxyType::WebVideo.temporary_file_name().expect("a file proxy");
        let web_args = args(&["-nostdin", "-y", "-v", "error"])
            .into_iter()
            .chain(decoder_limit(self.max_pixels))
            .chain(args(&["-i"]))
            .chain([self.input.clone()])
            .chain(args(&[
                "-map",
                "0:v:0",
                "-map",
                "0:a:0?",
                "-vf",
                // At most 720 lines, of the picture upright: ffmpeg turns it (its display matrix) before this filter.
                "scale=-2:'min(720,ih)'",
                "-c:v",
                "libx264",
                "-preset",
                "veryfast",
                "-crf",
                "23",
                "-pix_fmt",
                "yuv420p",
                "-c:a",
                "aac",
                "-b:a",
                "128k",
                "-movflags",
                "+faststart",
                "-f",
                "mp4",
            ]))
            .chain([self.scratch.for_tool(web_tmp)])
            .collect();
        let transcoded = self
            .ffmpeg(web_args, tool_input(self.original)?, self.limits.transcode)
            .await
            .map_err(|e| self.failed(ProxyType::WebVideo, e));
        let checked = async {
            transcoded?;
            check_web_video(&self.scratch, web_tmp, self.original.path(), self.limits, self.cancel)
                .await?
                .map_err(|reason| self.not_made(ProxyType::WebVideo, reason))?;
            self.scratch.sync_file(web_tmp).await
        };
        let checked = checked.await;
        if let Err(e) = checked {
            self.scratch.remove(web_tmp);
            return Err(e);
        }
        let size = self.scratch.size(web_tmp)?;
        self.scratch.place(web_tmp, web)?;
        Ok(size)
    }
}

/// What ffprobe says of a web video we made: its streams with the packets their index lists and the packets
/// actually there.
#[derive(Deserialize)]
struct WebProbe {
    #[serde(default)]
    streams: Vec<WebStream>,
    format: Option<Format>,
}

#[derive(Deserialize)]
struct WebStream {
    codec_type: Option<String>,
    nb_frames: Option<String>,
    nb_read_packets: Option<String>,
}

/// Checks the web video ffmpeg wrote as `file` in the scratch `folder` (read through its handle): ffprobe reads every
/// packet (no decoding), and it must have a video stream, a duration above zero, and every packet its index lists.
/// The outer error is ffprobe's own trouble (cancelled, missing); the inner one what is wrong with the file.
async fn check_web_video(
    folder: &Scratch<'_>,
    file: &str,
    original: &Path,
    limits: ToolLimits,
    cancel: &CancellationToken,
) -> Result<Result<(), String>, MediaError> {
    let mut probe_args = args(&[
        "-v",
        "error",
        "-count_packets",
        "-show_entries",
        "format=duration:stream=codec_type,nb_frames,nb_read_packets",
        "-of",
        "json",
    ]);
    probe_args.push(folder.for_tool(file));
    let given = Given { stdin: None, folder: Some(folder) };
    let out = match run_tool("ffprobe", "ffmpeg", probe_args, given, original, limits.quick, cancel).await {
        Ok(out) => out,
        Err(MediaError::Tool { message, .. }) => {
            return Ok(Err(format!("ffprobe cannot read what ffmpeg wrote ({message})")));
        }
        Err(e) => return Err(e),
    };
    let probe: WebProbe = match serde_json::from_slice(&out) {
        Ok(p) => p,
        Err(e) => return Ok(Err(format!("ffprobe's answer on what ffmpeg wrote does not read ({e})"))),
    };
    if !probe.streams.iter().any(|s| s.codec_type.as_deref() == Some("video")) {
        return Ok(Err("what ffmpeg wrote has no video stream".into()));
    }
    let duration = probe.format.and_then(|f| f.duration).and_then(|d| d.parse::<f64>().ok());
    if !duration.is_some_and(|d| d > 0.0) {
        return Ok(Err("what ffmpeg wrote has no duration".into()));
    }
    for s in &probe.streams {
        if let (Some(listed), Some(there)) = (&s.nb_frames, &s.nb_read_packets)
            && listed != there
        {
            let kind = s.codec_type.as_deref().unwrap_or("a");
            return Ok(Err(format!(
                "what ffmpeg wrote was cut short: its {kind} stream lists {listed} packets and holds {there}"
            )));
        }
    }
    Ok(Ok(()))
}

/// The poster's longest side at most, in pixels.
const POSTER_LONG_SIDE: u32 = 1920;

/// ffmpeg's filter for the poster: both sides at most [`POSTER_LONG_SIDE`], the aspect kept, the sides even. ffmpeg
/// turns the frame upright (its display matrix) before this filter, so a portrait video's long side is its height
/// here: capping the width alone left a phone's 1440 × 2560 portrait poster at 2560.
fn poster_scale() -> String {
    format!(
        "scale='min({POSTER_LONG_SIDE},iw)':'min({POSTER_LONG_SIDE},ih)':force_original_aspect_ratio=decrease:\
         force_divisible_by=2"
    )
}

/// The input option that makes ffmpeg's and ffprobe's decoders refuse a picture of more than `max_pixels` before
/// decoding it (libavcodec's `max_pixels`, which takes at most `i32::MAX`). A video's frames are held to
/// `storage.max_image_megapixels` as a still is: a crafted video of a few hundred kilobytes can hold frames of
/// hundreds of megapixels (black, compressed to almost nothing), and ffmpeg takes about 4 bytes a pixel to decode
/// and scale them (500 MB for 16,384 × 8,192), more with every frame it decodes ahead. [`crate::tool`] turns the
/// decoder's refusal into the same error a still gets.
fn decoder_limit(max_pixels: u64) -> [OsString; 2] {
    ["-max_pixels".into(), max_pixels.min(i32::MAX as u64).to_string().into()]
}

/// A handle on the open original for a tool's standard input.
pub(crate) fn tool_input(original: &Original) -> Result<std::fs::File, MediaError> {
    original.handle_for_tool().map_err(|e| MediaError::io(original.path(), e))
}

fn args(list: &[&str]) -> Vec<OsString> {
    list.iter().map(OsString::from).collect()
}

#[cfg(test)]
mod tests;
