use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::ids::{StorageConfigId, UserId};
use crate::work::DomainError;

/// A person who owns storage configs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct User {
    /// Id.
    pub id: UserId,
    /// Unique name.
    pub username: String,
    /// A disabled user keeps their catalogue.
    pub disabled: bool,
}

/// One folder tree of originals, owned by one user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StorageConfig {
    /// Id.
    pub id: StorageConfigId,
    /// Owner.
    pub user_id: UserId,
    /// Absolute path of the originals; globally unique.
    pub root_path: PathBuf,
    /// Inactive configs get no new work.
    pub is_active: bool,
    /// Whether the root was a mount point when registered or last crawled in full (`None`: not known yet). A
    /// crawl refuses when a root that was one no longer is: the share is not mounted.
    pub root_is_mount_point: Option<bool>,
    /// The folders beneath the root (relative paths, as the file system gave their bytes) that were mount points
    /// at the last crawl of the whole root: another disk or share mounted inside the library. A crawl does not
    /// walk one that is no longer a mount point (a disk not mounted leaves an empty folder behind). Serialized as
    /// text (lossy UTF-8), as paths are shown.
    #[serde(serialize_with = "paths_as_text")]
    pub mounts_below: Vec<Vec<u8>>,
}

/// Paths beneath a root as text, for people and for JSON (lossy UTF-8).
fn paths_as_text<S: serde::Serializer>(paths: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(paths.iter().map(|p| String::from_utf8_lossy(p)))
}

/// Whether an asset is a still or a moving picture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaType {
    /// A still image.
    Image,
    /// A video (including a Live Photo's motion half).
    Video,
}

/// A derived file (or, for BlurHash, value) of an asset. Stored as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProxyType {
    /// About 300 px JPEG.
    Thumbnail,
    /// About 1920 px JPEG.
    Preview,
    /// A BlurHash string, stored inline.
    Blurhash,
    /// A video's still.
    Poster,
    /// A 720p H.264 video.
    WebVideo,
}

impl ProxyType {
    /// Every proxy type.
    pub const ALL: [ProxyType; 5] =
        [ProxyType::Thumbnail, ProxyType::Preview, ProxyType::Blurhash, ProxyType::Poster, ProxyType::WebVideo];

    /// The type as stored in the database.
    pub const fn as_str(self) -> &'static str {
        match self {
            ProxyType::Thumbnail => "thumbnail",
            ProxyType::Preview => "preview",
            ProxyType::Blurhash => "blurhash",
            ProxyType::Poster => "poster",
            ProxyType::WebVideo => "web_video",
        }
    }

    /// The file name of this proxy inside its asset's proxy folder; `None` for the inline BlurHash.
    pub const fn file_name(self) -> Option<&'static str> {
        match self {
            ProxyType::Thumbnail => Some("thumbnail.jpg"),
            ProxyType::Preview => Some("preview.jpg"),
            ProxyType::Blurhash => None,
            ProxyType::Poster => Some("poster.jpg"),
            ProxyType::WebVideo => Some("web.mp4"),
        }
    }
}

impl fmt::Display for ProxyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ProxyType {
    type Err = DomainError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|t| t.as_str() == s).ok_or_else(|| DomainError::OutOfRange {
            what: "proxy type",
            accepted: "thumbnail, preview, blurhash, poster or web_video",
            got: format!("{s:?}"),
        })
    }
}

/// A BLAKE3 content hash, as 64 lower-case hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ContentHash(String);

impl ContentHash {
    /// Parses 64 hex digits (either case; kept lower-case).
    pub fn from_hex(hex: &str) -> Result<Self, DomainError> {
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(DomainError::OutOfRange {
                what: "content hash",
                accepted: "64 hex digits",
                got: format!("{hex:?}"),
            });
        }
        Ok(Self(hex.to_ascii_lowercase()))
    }

    /// The hash from its 32 bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// The hex digits.
    pub fn as_hex(&self) -> &str {
        &self.0
    }

    /// The one place proxy locations are derived: `<config>/<hash[0..2]>/<hash>`, relative to the proxy root.
    /// It depends on (config, content hash) only, so a retry overwrites its own debris.
    pub fn proxy_dir(&self, config: StorageConfigId) -> PathBuf {
        Path::new(&config.to_string()).join(&self.0[..2]).join(&self.0)
    }

    /// Whether a folder name is one of the `<hash[0..2]>` folders of [`ContentHash::proxy_dir`]'s layout: two hex
    /// digits in lower case, as the hash is written.
    pub fn is_prefix_folder(name: &[u8]) -> bool {
        name.len() == 2 && name.iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file's mtime can be chrono's last instant (a crafted file on a file system with 64-bit times): its day in a
    /// zone east of UTC is past that, and is read in UTC rather than overflow.
    #[test]
    fn the_day_of_the_last_instant_east_of_utc_is_its_utc_day() {
        let last = chrono::DateTime::<chrono::Utc>::MAX_UTC;
        let berlin = crate::Zone::Fixed(chrono::FixedOffset::east_opt(3600).unwrap());
        let capture = CaptureTime::file_mtime(last).in_zone_when_unknown(berlin);
        assert_eq!(capture.offset_minutes, Some(60));
        assert_eq!(capture.local_month_day(), (12, 31));
        let new_year = "2024-01-01T03:00:00Z".parse().unwrap();
        let new_york = crate::Zone::Fixed(chrono::FixedOffset::west_opt(5 * 3600).unwrap());
        assert_eq!(CaptureTime::file_mtime(new_year).in_zone_when_unknown(new_york).local_month_day(), (12, 31));
    }

    #[test]
    fn proxy_types_round_trip_and_only_blurhash_is_inline() {
        for t in ProxyType::ALL {
            assert_eq!(t.as_str().parse::<ProxyType>(), Ok(t));
            assert_eq!(t.file_name().is_none(), t == ProxyType::Blurhash);
        }
        assert!("thumb".parse::<ProxyType>().is_err());
    }

    #[test]
    fn content_hash_accepts_only_64_hex_digits_and_lowercases() {
        let upper = "AB".repeat(32);
        assert_eq!(ContentHash::from_hex(&upper).map(|h| h.as_hex().to_owned()), Ok("ab".repeat(32)));
        assert!(ContentHash::from_hex(&"ab".repeat(31)).is_err());
        assert!(ContentHash::from_hex(&"zz".repeat(32)).is_err());
        assert_eq!(ContentHash::from_bytes([0xab; 32]), ContentHash::from_hex(&upper).unwrap());
    }

    #[test]
    fn display_forms_are_the_stored_forms() {
        assert_eq!(ProxyType::WebVideo.to_string(), "web_video");
        let hash = ContentHash::from_bytes([0xab; 32]);
        assert_eq!(hash.to_string(), "ab".repeat(32));
        let stored: Vec<&str> = CaptureSource::ALL.map(CaptureSource::as_str).to_vec();
        // The names the schema's CHECK constraint accepts, best first.
        assert_eq!(
            stored,
            [
                "exif_original",
                "exif_digitized",
                "xmp_embedded",
                "xmp_sidecar",
                "container",
                "file_name",
                "exif_modified",
                "file_mtime"
            ]
        );
        let ranks: Vec<u8> = CaptureSource::ALL.map(CaptureSource::rank).to_vec();
        assert!(ranks.windows(2).all(|w| w[0] < w[1]), "ALL is in rank order: {ranks:?}");
    }

    #[test]
    fn on_this_day_uses_the_camera_local_date() {
        use chrono::TimeZone;
        let at = chrono::Utc.with_ymd_and_hms(2020, 7, 3, 23, 30, 0).unwrap();
        let capture = |offset_minutes| CaptureTime { at, offset_minutes, source: CaptureSource::ExifOriginal };
        assert_eq!(capture(None).local_month_day(), (7, 3), "no offset: the UTC date");
        assert_eq!(capture(Some(120)).local_month_day(), (7, 4), "east of UTC it is already the next day");
        assert_eq!(capture(Some(-60)).local_month_day(), (7, 3));
        let new_year =
            CaptureTime { at: chrono::Utc.with_ymd_and_hms(2021, 1, 1, 0, 30, 0).unwrap(), ..capture(Some(-60)) };
        assert_eq!(new_year.local_month_day(), (12, 31), "west of UTC it is still the day before");
    }

    #[test]
    fn a_containers_utc_time_takes_its_offset_from_the_local_time_in_the_file_name() {
        use chrono::TimeZone;
        let utc = |d, h, m, s| chrono::Utc.with_ymd_and_hms(2023, 12, d, h, m, s).unwrap();
        let container = CaptureTime { at: utc(25, 1, 15, 0), offset_minutes: None, source: CaptureSource::Container };
        let named = |at| Some(CaptureTime { at, offset_minutes: None, source: CaptureSource::FileName });
        let offset = |name| container.with_offset_from_local(name).offset_minutes;
        // New York, the name written a second before the container.
        let dated = container.with_offset_from_local(named(utc(24, 20, 14, 59)));
        assert_eq!((dated.offset_minutes, dated.at, dated.local_month_day()), (Some(-300), container.at, (12, 24)));
        assert_eq!(offset(named(utc(25, 6, 45, 0))), Some(330), "India, half an hour");
        assert_eq!(offset(named(utc(25, 7, 0, 0))), Some(345), "Nepal, a quarter");
        assert_eq!(offset(named(utc(25, 15, 15, 0))), Some(14 * 60), "Kiribati, the farthest east");
        assert_eq!(offset(named(utc(24, 1, 17, 0))), None, "a day apart: not an offset");
        assert_eq!(offset(named(utc(24, 20, 20, 0))), None, "five minutes off a quarter: another moment");
        assert_eq!(offset(named(utc(25, 1, 15, 1))), None, "the same time: a camera writing its local time as UTC");
        assert_eq!(offset(named(utc(25, 0, 0, 0))), None, "midnight: a name with a date alone");
        assert_eq!(offset(None), None);
        let with_own = CaptureTime { offset_minutes: Some(60), ..container };
        assert_eq!(with_own.with_offset_from_local(named(utc(24, 20, 15, 0))), with_own, "an offset of its own");
        let exif = CaptureTime { source: CaptureSource::ExifOriginal, ..container };
        assert_eq!(exif.with_offset_from_local(named(utc(24, 20, 15, 0))), exif, "a camera's own clock");
        // The same reading says when the local clock was at UTC: within two minutes, with a time, no offset known.
        assert!(container.local_says_utc(named(utc(25, 1, 16, 59))), "London in winter, written moments apart");
        assert!(!container.local_says_utc(named(utc(25, 1, 17, 1))), "more than two minutes off");
        assert!(!container.local_says_utc(named(utc(24, 20, 15, 0))), "New York");
        assert!(!container.local_says_utc(named(utc(25, 0, 0, 0))), "midnight: a date alone");
        assert!(!with_own.local_says_utc(named(utc(25, 1, 15, 0))), "an offset of its own");
    }

    /// A time whose offset is unknown takes the zone's at that instant, unless the zone is at UTC then (the same
    /// day, and the offset left for a reading in a zone set right); an offset known is kept.
    #[test]
    fn a_time_without_an_offset_takes_the_zones_unless_it_is_utc() {
        use chrono::TimeZone;
        let at = chrono::Utc.with_ymd_and_hms(2023, 12, 25, 1, 15, 0).unwrap();
        let container = CaptureTime { at, offset_minutes: None, source: CaptureSource::Container };
        let fixed = |minutes: i32| Zone::Fixed(chrono::FixedOffset::east_opt(minutes * 60).unwrap());
        let in_new_york = container.in_zone_when_unknown(fixed(-300));
        assert_eq!((in_new_york.offset_minutes, in_new_york.at), (Some(-300), at));
        assert_eq!(in_new_york.local_month_day(), (12, 24));
        assert_eq!(container.in_zone_when_unknown(fixed(0)), container, "UTC says nothing more");
        let with_own = CaptureTime { offset_minutes: Some(60), ..container };
        assert_eq!(with_own.in_zone_when_unknown(fixed(-300)), with_own, "an offset known is kept");
        assert_eq!(fixed(330).offset_minutes_at(at), 330);
    }

    #[test]
    fn proxy_dir_derives_from_config_and_hash_only() {
        let config = StorageConfigId::new();
        let hash = ContentHash::from_bytes([0x0f; 32]);
        let dir = hash.proxy_dir(config);
        assert_eq!(dir, Path::new(&config.to_string()).join("0f").join("0f".repeat(32)));
        assert_eq!(dir, hash.clone().proxy_dir(config));
        assert!(ContentHash::is_prefix_folder(b"0f"), "the layout's own");
        for other in [&b"AB"[..], b"abc", b"g0", b"0", b"#recycle"] {
            assert!(!ContentHash::is_prefix_folder(other), "{other:?}");
        }
    }
}

/// Where an asset's capture time came from. Stored as text. The variants are declared in rank order: when
/// several sources give a time, the first in this order wins ([`CaptureSource::rank`], `docs/media.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaptureSource {
    /// EXIF DateTimeOriginal (with its sub-seconds and offset when present).
    ExifOriginal,
    /// EXIF DateTimeDigitized.
    ExifDigitized,
    /// XMP embedded in the file (`exif:DateTimeOriginal`, `photoshop:DateCreated`, `xmp:CreateDate`).
    XmpEmbedded,
    /// An XMP sidecar next to the original (`NAME.EXT.xmp` or `NAME.xmp`).
    XmpSidecar,
    /// The video container's creation time.
    Container,
    /// A date in the file name (`IMG_20190704_123456.jpg`, `Screenshot_2019-07-04-…`).
    FileName,
    /// EXIF DateTime: when the camera or an editor last wrote the file, which for an edited photo is not
    /// when it was taken; ranked below the file name for that reason.
    ExifModified,
    /// The file's mtime: nothing better was found.
    FileMtime,
}

impl CaptureSource {
    /// Every source, best first.
    pub const ALL: [CaptureSource; 8] = [
        CaptureSource::ExifOriginal,
        CaptureSource::ExifDigitized,
        CaptureSource::XmpEmbedded,
        CaptureSource::XmpSidecar,
        CaptureSource::Container,
        CaptureSource::FileName,
        CaptureSource::ExifModified,
        CaptureSource::FileMtime,
    ];

    /// As stored in the database.
    pub const fn as_str(self) -> &'static str {
        match self {
            CaptureSource::ExifOriginal => "exif_original",
            CaptureSource::ExifDigitized => "exif_digitized",
            CaptureSource::XmpEmbedded => "xmp_embedded",
            CaptureSource::XmpSidecar => "xmp_sidecar",
            CaptureSource::Container => "container",
            CaptureSource::FileName => "file_name",
            CaptureSource::ExifModified => "exif_modified",
            CaptureSource::FileMtime => "file_mtime",
        }
    }

    /// Lower is better.
    pub const fn rank(self) -> u8 {
        self as u8
    }
}

/// A zone local times are read in: the Worker's own, or a fixed offset from UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zone {
    /// The Worker's local time zone, daylight saving included (`TZ`, else `/etc/localtime`, as `date` shows).
    Local,
    /// A fixed offset from UTC (`UTC`, `+01:00`): no daylight saving.
    Fixed(chrono::FixedOffset),
}

impl Zone {
    /// The zone's offset from UTC at the instant `at`, in minutes.
    pub fn offset_minutes_at(self, at: chrono::DateTime<chrono::Utc>) -> i32 {
        use chrono::{Offset, TimeZone};
        let offset = match self {
            Zone::Local => chrono::Local.offset_from_utc_datetime(&at.naive_utc()).fix(),
            Zone::Fixed(offset) => offset,
        };
        offset.local_minus_utc() / 60
    }
}

/// When a shot was taken: an instant, the camera's UTC offset when known, and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CaptureTime {
    /// The instant.
    pub at: chrono::DateTime<chrono::Utc>,
    /// The UTC offset in minutes of the local time it was taken at, when known: the camera's, or the household
    /// zone's for a phone's video dated by its UTC time alone and for a file's mtime.
    pub offset_minutes: Option<i32>,
    /// Where it came from.
    pub source: CaptureSource,
}

impl CaptureTime {
    /// The file's mtime, when nothing better was found.
    pub fn file_mtime(at: chrono::DateTime<chrono::Utc>) -> CaptureTime {
        CaptureTime { at, offset_minutes: None, source: CaptureSource::FileMtime }
    }

    /// The best of several candidates: the one whose source ranks first ([`CaptureSource::rank`]); of two
    /// from the same source, the first given.
    pub fn best(candidates: impl IntoIterator<Item = CaptureTime>) -> Option<CaptureTime> {
        candidates.into_iter().fold(None, |best: Option<CaptureTime>, c| match best {
            Some(b) if b.source.rank() <= c.source.rank() => Some(b),
            _ => Some(c),
        })
    }

    /// This time, a container's UTC instant given without an offset, with the offset that `local`, the same moment
    /// as a local clock wrote it with no offset (read as UTC), says: phones name a video by the local time it
    /// started (`20231224_201500.mp4`) and write its `creation_time` in UTC (`2023-12-25T01:15:00Z`), so the two
    /// apart are the offset (−5 h), which puts the video on the day it was taken. Taken only when they are a whole
    /// quarter of an hour apart, give or take two minutes (the two may be written moments apart), within ±14
    /// hours, and not zero; and only from a local time that has one (exactly midnight is taken for a date alone,
    /// `VID-20231224-WA0001.mp4`). Anything else (a camera that writes its local time as UTC, whose name then
    /// agrees with it; no local time) leaves it as it was.
    pub fn with_offset_from_local(self, local: Option<CaptureTime>) -> CaptureTime {
        match self.offset_said_by(local) {
            Some(offset) if offset != 0 => CaptureTime { offset_minutes: i32::try_from(offset / 60).ok(), ..self },
            _ => self,
        }
    }

    /// Whether `local`, the same moment as a local clock wrote it, says this container time's offset is zero, as
    /// [`CaptureTime::with_offset_from_local`] reads the two: the local clock was at UTC (a phone naming its videos
    /// by local time, in London in winter).
    pub fn local_says_utc(self, local: Option<CaptureTime>) -> bool {
        self.offset_said_by(local) == Some(0)
    }

    /// The offset, in seconds, that `local` says this container time without one has: the two apart, when that is
    /// a whole quarter of an hour give or take two minutes and within ±14 hours, from a local time that has one
    /// (exactly midnight is a date alone); zero included.
    fn offset_said_by(self, local: Option<CaptureTime>) -> Option<i64> {
        const QUARTER: i64 = 15 * 60;
        let local = local.filter(|_| self.source == CaptureSource::Container && self.offset_minutes.is_none())?;
        if local.at.time() == chrono::NaiveTime::MIN {
            return None;
        }
        let apart = (local.at - self.at).num_seconds();
        let offset = (apart + apart.signum() * QUARTER / 2) / QUARTER * QUARTER;
        ((apart - offset).abs() <= 120 && offset.abs() <= 14 * 3600).then_some(offset)
    }

    /// This time, a true UTC instant whose offset is not known (a phone's video dated by its container alone:
    /// a Pixel names its videos by the UTC time, `PXL_20231225_011500123.mp4`, so the name says no offset), with
    /// the offset `zone` has at that instant: the household's, the Worker's own zone, puts the video on the day it
    /// was taken there rather than on the UTC day. An offset already known is kept. A zone at UTC then (a
    /// container's unless told its zone, London in winter) says nothing the UTC day does not: the offset stays
    /// unknown, so a later reading in a zone set right can still give it.
    pub fn in_zone_when_unknown(self, zone: Zone) -> CaptureTime {
        match (self.offset_minutes, zone.offset_minutes_at(self.at)) {
            (None, offset) if offset != 0 => CaptureTime { offset_minutes: Some(offset), ..self },
            _ => self,
        }
    }

    /// The local (month, day) of capture for the "on this day" index: at its offset when known, else in UTC. An
    /// instant whose local time is past chrono's last one (a crafted mtime) is read in UTC.
    pub fn local_month_day(&self) -> (u32, u32) {
        use chrono::Datelike;
        let offset = chrono::Duration::minutes(i64::from(self.offset_minutes.unwrap_or(0)));
        let local = self.at.checked_add_signed(offset).unwrap_or(self.at);
        (local.month(), local.day())
    }
}

/// What was read from a media file.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AssetMetadata {
    /// Stored pixel width.
    pub width: Option<u32>,
    /// Stored pixel height.
    pub height: Option<u32>,
    /// Clockwise rotation that makes the pixels upright: 0, 90, 180 or 270.
    pub orientation_degrees: u16,
    /// A video's duration.
    pub duration_ms: Option<u64>,
    /// GPS latitude in degrees.
    pub gps_latitude: Option<f64>,
    /// GPS longitude in degrees.
    pub gps_longitude: Option<f64>,
    /// GPS altitude in metres.
    pub gps_altitude_m: Option<f64>,
    /// Camera make.
    pub camera_make: Option<String>,
    /// Camera model.
    pub camera_model: Option<String>,
    /// Lens model.
    pub lens_model: Option<String>,
    /// The camera's own burst identifier.
    pub camera_burst_id: Option<String>,
    /// Apple's Live Photo content identifier.
    pub live_photo_content_id: Option<String>,
}
