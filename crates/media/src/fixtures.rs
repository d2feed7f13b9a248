//! Real media files generated on the fly, for tests, the demo and the benchmarks (feature `fixtures`).

#![allow(missing_docs)]

use std::path::Path;
use std::process::Command;

use exif::{Field, In, Rational, Tag, Value};
use image::RgbImage;

/// EXIF to put in a generated JPEG.
#[derive(Debug, Clone, Default)]
pub struct FixtureExif {
    /// "YYYY:MM:DD HH:MM:SS"
    pub date_original: Option<String>,
    pub subsec_original: Option<String>,
    /// "+02:00"
    pub offset_original: Option<String>,
    pub date_modified: Option<String>,
    pub orientation: Option<u16>,
    pub make: Option<String>,
    pub model: Option<String>,
    pub lens: Option<String>,
    /// (latitude, longitude), signed degrees.
    pub gps: Option<(f64, f64)>,
    /// Apple's burst identifier, in an Apple MakerNote.
    pub apple_burst_id: Option<String>,
    /// Apple's Live Photo content identifier, in an Apple MakerNote.
    pub apple_content_id: Option<String>,
}

impl FixtureExif {
    /// A camera's usual EXIF: make, model, and an original date with offset.
    pub fn camera(date: &str, offset: &str) -> Self {
        Self {
            date_original: Some(date.to_owned()),
            offset_original: Some(offset.to_owned()),
            make: Some("Almanac".into()),
            model: Some("Test Camera".into()),
            ..Self::default()
        }
    }
}

/// An RGB picture with some structure: a gradient, a marker block in the top-left corner (red) so that tests
/// can check orientation, and, with `detail`, high-frequency texture so that JPEG sizes are realistic.
pub fn picture(width: u32, height: u32, seed: u32, detail: bool) -> RgbImage {
    RgbImage::from_fn(width, height, |x, y| {
        if x < width / 4 && y < height / 4 {
            return image::Rgb([230, 20, 20]);
        }
        let mut r = (x * 255 / width.max(1)) as u8;
        let mut g = (y * 255 / height.max(1)) as u8;
        let mut b = (seed.wrapping_mul(37) % 256) as u8;
        if detail {
            let n = (x.wrapping_mul(73_856_093) ^ y.wrapping_mul(19_349_663) ^ seed.wrapping_mul(83_492_791)) % 64;
            r = r.wrapping_add(n as u8);
            g = g.wrapping_sub(n as u8 / 2);
            b = b.wrapping_add(n as u8 / 3);
        }
        image::Rgb([r, g, b])
    })
}

/// A JPEG of `picture(width, height, seed, detail)` with the given EXIF.
pub fn jpeg(width: u32, height: u32, seed: u32, detail: bool, exif: &FixtureExif) -> Vec<u8> {
    let image = picture(width, height, seed, detail);
    let plain = turbojpeg::compress_image(&image, 90, turbojpeg::Subsamp::Sub2x2).expect("encode").to_vec();
    with_exif(&plain, exif)
}

/// Inserts an APP1 EXIF segment right after the JPEG's start-of-image marker.
pub fn with_exif(jpeg: &[u8], exif: &FixtureExif) -> Vec<u8> {
    let ascii = |tag: Tag, s: &Option<String>| {
        s.as_ref().map(|s| Field { tag, ifd_num: In::PRIMARY, value: Value::Ascii(vec![s.clone().into_bytes()]) })
    };
    let dms = |deg: f64| {
        let d = deg.abs();
        let whole = d.floor();
        let minutes = ((d - whole) * 60.0).floor();
        let seconds = ((d - whole) * 60.0 - minutes) * 60.0;
        Value::Rational(vec![
            Rational { num: whole as u32, denom: 1 },
            Rational { num: minutes as u32, denom: 1 },
            Rational { num: (seconds * 10_000.0).round() as u32, denom: 10_000 },
        ])
    };
    let mut fields: Vec<Field> = [
        ascii(Tag::DateTimeOriginal, &exif.date_original),
        ascii(Tag::SubSecTimeOriginal, &exif.subsec_original),
        ascii(Tag::OffsetTimeOriginal, &exif.offset_original),
        ascii(Tag::DateTime, &exif.date_modified),
        ascii(Tag::Make, &exif.make),
        ascii(Tag::Model, &exif.model),
        ascii(Tag::LensModel, &exif.lens),
    ]
    .into_iter()
    .flatten()
    .collect();
    if let Some(o) = exif.orientation {
        fields.push(Field { tag: Tag::Orientation, ifd_num: In::PRIMARY, value: Value::Short(vec![o]) });
    }
    if let Some((lat, lon)) = exif.gps {
        let r = |neg: bool, a: &str, b: &str| Value::Ascii(vec![if neg { a } else { b }.as_bytes().to_vec()]);
        fields.push(Field { tag: Tag::GPSLatitudeRef, ifd_num: In::PRIMARY, value: r(lat < 0.0, "S", "N") });
        fields.push(Field { tag: Tag::GPSLatitude, ifd_num: In::PRIMARY, value: dms(lat) });
        fields.push(Field { tag: Tag::GPSLongitudeRef, ifd_num: In::PRIMARY, value: r(lon < 0.0, "W", "E") });
        fields.push(Field { tag: Tag::GPSLongitude, ifd_num: In::PRIMARY, value: dms(lon) });
    }
    if exif.apple_burst_id.is_some() || exif.apple_content_id.is_some() {
        let note = crate::apple_note(exif.apple_burst_id.as_deref(), exif.apple_content_id.as_deref());
        fields.push(Field { tag: Tag::MakerNote, ifd_num: In::PRIMARY, value: Value::Undefined(note, 0) });
    }
    if fields.is_empty() {
        return jpeg.to_vec();
    }
    let mut writer = exif::experimental::Writer::new();
    for f in &fields {
        writer.push_field(f);
    }
    let mut tiff = std::io::Cursor::new(Vec::new());
    writer.write(&mut tiff, false).expect("write EXIF");
    let tiff = tiff.into_inner();
    let mut out = Vec::with_capacity(jpeg.len() + tiff.len() + 10);
    out.extend_from_slice(&jpeg[..2]);
    out.extend_from_slice(&[0xFF, 0xE1]);
    out.extend_from_slice(&((tiff.len() + 8) as u16).to_be_bytes());
    out.extend_from_slice(b"Exif\0\0");
    out.extend_from_slice(&tiff);
    out.extend_from_slice(&jpeg[2..]);
    out
}

/// A PNG of `picture(width, height, seed, false)`.
pub fn png(width: u32, height: u32, seed: u32) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    picture(width, height, seed, false).write_to(&mut out, image::ImageFormat::Png).expect("encode png");
    out.into_inner()
}

/// Whether ffmpeg is installed (video fixtures and video proxies need it).
pub fn have_ffmpeg() -> bool {
    Command::new("ffmpeg").arg("-version").output().is_ok_and(|o| o.status.success())
}

/// Writes a short H.264 test video with a tone, and a creation time, through ffmpeg.
pub fn video(path: &Path, seconds: f32, width: u32, height: u32, creation_time: &str) {
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-y", "-v", "error", "-f", "lavfi", "-i"])
        .arg(format!("testsrc=duration={seconds}:size={width}x{height}:rate=25"))
        .args(["-f", "lavfi", "-i"])
        .arg(format!("sine=frequency=440:duration={seconds}"))
        .args(["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest"])
        .args(["-metadata", &format!("creation_time={creation_time}")])
        .arg(path)
        .status()
        .expect("run ffmpeg");
    assert!(status.success(), "ffmpeg could not make {}", path.display());
}

/// Writes a HEIC of `picture(width, height, seed, false)` through libheif's `heif-enc`.
pub fn heic(path: &Path, width: u32, height: u32, seed: u32) {
    let png = path.with_extension("fixture.png");
    std::fs::write(&png, self::png(width, height, seed)).expect("write png");
    let output = Command::new("heif-enc").arg("-o").arg(path).arg(&png).output().expect("run heif-enc");
    let _ = std::fs::remove_file(&png);
    assert!(output.status.success(), "heif-enc failed: {}", String::from_utf8_lossy(&output.stderr));
}
