use std::ffi::OsString;
use std::path::Path;

use almanac_domain::{AssetMetadata, CaptureSource, CaptureTime, ProxyType};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::atomic::{sync_file, sync_folder};
use crate::still::file_name;
use crate::tool::{OPEN_ORIGINAL, run_tool};
use crate::{MediaError, Original, ToolLimits};

/// What ffprobe says about a video.
#[derive(Debug, Clone, PartialEq)]
pub struct VideoFacts {
    /// Metadata for the catalogue.
    pub metadata: AssetMetadata,
    /// The container's creation time, if any.
    pub created: Option<CaptureTime>,
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

/// Reads a video's dimensions, duration, rotation, creation time and Apple content identifier with ffprobe,
/// which reads the open original (never its path).
pub async fn probe_video(
    original: &Original,
    limits: ToolLimits,
    cancel: &CancellationToken,
) -> Result<VideoFacts, MediaError> {
    let path = original.path();
    let args = args(&["-v", "error", "-print_format", "json", "-show_format", "-show_streams", OPEN_ORIGINAL]);
    let out = run_tool("ffprobe", "ffmpeg", args, Some(tool_input(original)?), path, limits.quick, cancel).await?;
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
            .map(|(_, v)| v.clone())
    };
    let rotation = video
        .side_data_list
        .iter()
        .find_map(|d| d.get("rotation").and_then(serde_json::Value::as_i64))
        .or_else(|| tag("rotate").and_then(|r| r.parse().ok()))
        .unwrap_or(0);
    let created = tag("com.apple.quicktime.creationdate")
        .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
        .map(|t| CaptureTime {
            at: t.with_timezone(&Utc),
            offset_minutes: Some(t.offset().local_minus_utc() / 60),
            source: CaptureSource::Container,
        })
        .or_else(|| {
            tag("creation_time").and_then(|t| DateTime::parse_from_rfc3339(&t).ok()).map(|t| CaptureTime {
                at: t.with_timezone(&Utc),
                offset_minutes: None,
                source: CaptureSource::Container,
            })
        });
    // An unset clock (the Unix or QuickTime epoch) or a date in the future is no capture time: the file name
    // or the mtime then decide.
    let created = created.filter(|c| {
        use chrono::Datelike;
        c.at.year() >= 1980 && c.at <= Utc::now() + chrono::Duration::days(1)
    });
    let duration_ms = format
        .and_then(|f| f.duration.as_deref())
        .and_then(|d| d.parse::<f64>().ok())
        .filter(|d| d.is_finite() && *d >= 0.0)
        .map(|d| (d * 1000.0).round() as u64);
    let metadata = AssetMetadata {
        width: video.width.filter(|w| *w > 0),
        height: video.height.filter(|h| *h > 0),
        // ffprobe reports the display matrix counter-clockwise; the catalogue stores clockwise.
        orientation_degrees: (((-rotation) % 360 + 360) % 360) as u16,
        duration_ms,
        camera_make: tag("com.apple.quicktime.make").or_else(|| tag("make")),
        camera_model: tag("com.apple.quicktime.model").or_else(|| tag("model")),
        live_photo_content_id: tag("com.apple.quicktime.content.identifier"),
        ..AssetMetadata::default()
    };
    Ok(VideoFacts { metadata, created })
}

/// Writes `poster.jpg` (a frame near the start, upright, at most 1920 px) and `web.mp4` (H.264, at most 720
/// lines, AAC, fast start) into `dest_dir`, each through a temporary name, flushed to disk before it is
/// renamed into place. ffmpeg reads the open original, never its path.
pub async fn make_video_proxies(
    original: &Original,
    dest_dir: &Path,
    limits: ToolLimits,
    cancel: &CancellationToken,
) -> Result<VideoProxies, MediaError> {
    let path = original.path();
    let input = OsString::from(OPEN_ORIGINAL);
    std::fs::create_dir_all(dest_dir).map_err(|e| MediaError::io(dest_dir, e))?;
    let poster = dest_dir.join(file_name(ProxyType::Poster));
    let poster_tmp = dest_dir.join(ProxyType::Poster.temporary_file_name().expect("a file proxy"));
    let poster_args = args(&["-nostdin", "-y", "-v", "error", "-ss", "0.5", "-i"])
        .into_iter()
        .chain([input.clone()])
        .chain(args(&["-frames:v", "1", "-vf", "scale='min(1920,iw)':-2", "-q:v", "3", "-update", "1"]))
        .chain([poster_tmp.as_os_str().to_owned()])
        .collect();
    // Debris of an earlier attempt must never pass for this attempt's poster.
    let _ = std::fs::remove_file(&poster_tmp);
    // A clip shorter than half a second has no frame there (ffmpeg then succeeds and writes nothing, or
    // fails): that case is retried below from the start. A cancel or a time limit ends it here.
    let first_try = run_tool("ffmpeg", "ffmpeg", poster_args, Some(tool_input(original)?), path, limits.quick, cancel);
    if let Err(stopped @ (MediaError::Cancelled | MediaError::TimedOut { .. })) = first_try.await {
        let _ = std::fs::remove_file(&poster_tmp);
        return Err(stopped);
    }
    if !is_non_empty(&poster_tmp) {
        let _ = std::fs::remove_file(&poster_tmp);
        // Shorter than half a second: take the very first frame.
        let first_frame = args(&["-nostdin", "-y", "-v", "error", "-i"])
            .into_iter()
            .chain([input.clone()])
            .chain(args(&["-frames:v", "1", "-vf", "scale='min(1920,iw)':-2", "-q:v", "3", "-update", "1"]))
            .chain([poster_tmp.as_os_str().to_owned()])
            .collect();
        run_tool("ffmpeg", "ffmpeg", first_frame, Some(tool_input(original)?), path, limits.quick, cancel).await?;
        if !is_non_empty(&poster_tmp) {
            let _ = std::fs::remove_file(&poster_tmp);
            return Err(MediaError::corrupt(path, "ffmpeg found no frame for a poster"));
        }
    }
    sync_file(&poster_tmp)?;
    std::fs::rename(&poster_tmp, &poster).map_err(|e| MediaError::io(&poster, e))?;

    let web = dest_dir.join(file_name(ProxyType::WebVideo));
    let web_tmp = dest_dir.join(ProxyType::WebVideo.temporary_file_name().expect("a file proxy"));
    let web_args = args(&["-nostdin", "-y", "-v", "error", "-i"])
        .into_iter()
        .chain([input.clone()])
        .chain(args(&[
            "-map",
            "0:v:0",
            "-map",
            "0:a:0?",
            "-vf",
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
        .chain([web_tmp.as_os_str().to_owned()])
        .collect();
    let transcoded =
        run_tool("ffmpeg", "ffmpeg", web_args, Some(tool_input(original)?), path, limits.transcode, cancel).await;
    if let Err(e) = transcoded.and_then(|_| sync_file(&web_tmp)) {
        let _ = std::fs::remove_file(&web_tmp);
        return Err(e);
    }
    std::fs::rename(&web_tmp, &web).map_err(|e| MediaError::io(&web, e))?;
    sync_folder(dest_dir)?;
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).map_err(|e| MediaError::io(p, e));
    Ok(VideoProxies { poster_bytes: size(&poster)?, web_video_bytes: size(&web)? })
}

fn is_non_empty(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() > 0)
}

/// A handle on the open original for a tool's standard input.
pub(crate) fn tool_input(original: &Original) -> Result<std::fs::File, MediaError> {
    original.handle_for_tool().map_err(|e| MediaError::io(original.path(), e))
}

fn args(list: &[&str]) -> Vec<OsString> {
    list.iter().map(OsString::from).collect()
}
