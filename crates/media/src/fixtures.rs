//! Real media files generated on the fly, for tests, the demo and the benchmarks (feature `fixtures`), and the
//! conditions tests set around them.

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

/// The processes other than this one that hold a file or folder beneath `dir` open (their ids): a tool writing
/// proxies there, which is given its output through an open handle on the proxy folder, never by the folder's path
/// (so its command line does not name it).
pub fn processes_holding_open_beneath(dir: &Path) -> Vec<u32> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_owned());
    let me = std::process::id();
    let pids = std::fs::read_dir("/proc").into_iter().flatten().flatten();
    let pids = pids.filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()).filter(|pid| *pid != me);
    pids.filter(|pid| {
        let open = std::fs::read_dir(format!("/proc/{pid}/fd")).into_iter().flatten().flatten();
        open.filter_map(|fd| std::fs::read_link(fd.path()).ok()).any(|at| at.starts_with(&dir))
    })
    .collect()
}

/// The proxies of the video `original` made into the folder `out` (made if it is not there), with the default limits.
pub async fn video_proxies_into(
    original: &crate::Original,
    out: &Path,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<crate::VideoProxies, crate::MediaError> {
    let limits = crate::ToolLimits::default();
    crate::make_video_proxies(original, &proxy_folder(out), limits, crate::DEFAULT_MAX_PIXELS, cancel).await
}

/// The names in the folder `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<_> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// The scratch folder a killed Worker left in the proxy folder `folder` (its own, for itself alone: mode 0700), made
/// empty, for a test to leave debris in.
pub fn left_scratch_folder(folder: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let left = folder.join(almanac_domain::ports::PROXY_SCRATCH_FOLDER);
    std::fs::create_dir_all(&left).expect("make the scratch folder");
    std::fs::set_permissions(&left, std::fs::Permissions::from_mode(0o700)).expect("set its mode");
    left
}

/// The folder at `path` (made if it is not there), open for proxies to be written into, as the crawl opens each
/// file's folder beneath the proxy root ([`crate::make_proxy_folder`]).
pub fn proxy_folder(path: &Path) -> crate::ProxyFolder {
    let (parent, name) = (path.parent().expect("a folder in a folder"), path.file_name().expect("a named folder"));
    crate::make_proxy_folder(parent, Path::new(name)).expect("the proxy folder is made")
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

/// A TIFF, WebP (lossless) or GIF of `picture(width, height, seed, false)`, through the `image` crate.
pub fn encoded(width: u32, height: u32, seed: u32, format: image::ImageFormat) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    let picture = picture(width, height, seed, false);
    if format == image::ImageFormat::Gif {
        image::DynamicImage::ImageRgb8(picture).to_rgba8().write_to(&mut out, format).expect("encode")
    } else {
        picture.write_to(&mut out, format).expect("encode");
    }
    out.into_inner()
}

/// An XMP document with one date property (`prefix:name` in the namespace the prefix usually stands for),
/// written as an element, as Lightroom and digiKam write sidecars.
pub fn xmp(property: &str, value: &str) -> String {
    let (prefix, _) = property.split_once(':').expect("prefix:name");
    let ns = match prefix {
        "exif" => "http://ns.adobe.com/exif/1.0/",
        "photoshop" => "http://ns.adobe.com/photoshop/1.0/",
        _ => "http://ns.adobe.com/xap/1.0/",
    };
    format!(
        "<?xpacket begin=\"\u{feff}\" id=\"W5M0MpCehiHzreSzNTczkc9d\"?>\n<x:xmpmeta xmlns:x=\"adobe:ns:meta/\">\n \
         <rdf:RDF xmlns:rdf=\"http://www.w3.org/1999/02/22-rdf-syntax-ns#\">\n  \
         <rdf:Description rdf:about=\"\" xmlns:{prefix}=\"{ns}\">\n   <{property}>{value}</{property}>\n  \
         </rdf:Description>\n </rdf:RDF>\n</x:xmpmeta>\n<?xpacket end=\"w\"?>"
    )
}

/// Inserts an XMP APP1 segment (`http://ns.adobe.com/xap/1.0/`) right after the JPEG's start-of-image marker.
pub fn with_xmp(jpeg: &[u8], xmp: &str) -> Vec<u8> {
    let id = b"http://ns.adobe.com/xap/1.0/\0";
    let mut out = jpeg[..2].to_vec();
    out.extend_from_slice(&[0xFF, 0xE1]);
    out.extend_from_slice(&((id.len() + xmp.len() + 2) as u16).to_be_bytes());
    out.extend_from_slice(id);
    out.extend_from_slice(xmp.as_bytes());
    out.extend_from_slice(&jpeg[2..]);
    out
}

/// A TIFF-based RAW (as DNG, NEF, ARW and CR2 are): this EXIF block as the file's own IFDs, then some sensor
/// bytes, a small thumbnail and the large preview JPEG.
pub fn tiff_raw(block: &[u8], preview: &[u8]) -> Vec<u8> {
    let mut out = block.to_vec();
    out.extend((0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 & 0x7F));
    let thumb = turbojpeg::compress_image(&picture(16, 12, 9, false), 70, turbojpeg::Subsamp::Sub2x2).expect("encode");
    out.extend_from_slice(&thumb);
    out.extend_from_slice(preview);
    out
}

/// A Fujifilm RAF: its header, then the preview JPEG (which carries the EXIF) at the offset the header gives.
pub fn raf(preview: &[u8]) -> Vec<u8> {
    let mut out = b"FUJIFILMCCD-RAW 0201FF383501".to_vec();
    out.resize(84, 0);
    out.extend_from_slice(&148u32.to_be_bytes());
    out.extend_from_slice(&(preview.len() as u32).to_be_bytes());
    out.resize(148, 0);
    out.extend_from_slice(preview);
    out.extend_from_slice(&[0x11; 512]);
    out
}

/// A Canon CR3: an ISO base media file with IFD0 in a `CMT1` box, the Exif IFD in `CMT2`, and the preview
/// JPEG in a `PRVW` box.
pub fn cr3(ifd0: &[u8], exif_ifd: &[u8], preview: &[u8]) -> Vec<u8> {
    let bmff = |kind: &[u8; 4], body: &[u8]| {
        let mut b = ((body.len() + 8) as u32).to_be_bytes().to_vec();
        b.extend_from_slice(kind);
        b.extend_from_slice(body);
        b
    };
    let mut out = bmff(b"ftyp", b"crx \0\0\0\x01crx isom");
    let canon = [bmff(b"CMT1", ifd0), bmff(b"CMT2", exif_ifd)].concat();
    let mut uuid = vec![0x85, 0xc0, 0xb6, 0x87, 0x82, 0x0f, 0x11, 0xe0, 0x81, 0x11, 0xf4, 0xce, 0x46, 0x2b, 0x6a, 0x48];
    uuid.extend_from_slice(&canon);
    out.extend_from_slice(&bmff(b"moov", &bmff(b"uuid", &uuid)));
    let mut prvw = vec![0; 16];
    prvw.extend_from_slice(preview);
    out.extend_from_slice(&bmff(b"PRVW", &prvw));
    out.extend_from_slice(&bmff(b"mdat", &[0x22; 1024]));
    out
}

/// A PNG whose header claims `width` × `height` pixels (a decompression bomb's header; no pixel data follows
/// that would fill it).
pub fn png_claiming(width: u32, height: u32) -> Vec<u8> {
    let mut ihdr = width.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    out.extend_from_slice(&exif_block::png_chunk(b"IHDR", &ihdr));
    out.extend_from_slice(&exif_block::png_chunk(b"IDAT", &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01]));
    out.extend_from_slice(&exif_block::png_chunk(b"IEND", &[]));
    out
}

/// A real small JPEG whose frame header is rewritten to claim `width` × `height` pixels.
pub fn jpeg_claiming(width: u16, height: u16) -> Vec<u8> {
    let mut jpeg =
        turbojpeg::compress_image(&picture(64, 48, 1, false), 80, turbojpeg::Subsamp::Sub2x2).expect("encode").to_vec();
    let sof = jpeg.windows(2).position(|w| w == [0xFF, 0xC0]).expect("a baseline frame header");
    jpeg[sof + 5..sof + 7].copy_from_slice(&height.to_be_bytes());
    jpeg[sof + 7..sof + 9].copy_from_slice(&width.to_be_bytes());
    jpeg
}

/// Writes an AVIF still through ffmpeg's AV1 encoder.
pub fn avif(path: &Path, width: u32, height: u32, seed: u32) {
    std::fs::create_dir_all(path.parent().expect("a file in a folder")).expect("create the folder");
    let png = path.with_extension("fixture.png");
    std::fs::write(&png, self::png(width, height, seed)).expect("write png");
    let output = Command::new("ffmpeg")
        .args(["-nostdin", "-y", "-v", "error", "-i"])
        .arg(&png)
        .args(["-frames:v", "1", "-c:v", "libaom-av1", "-still-picture", "1", "-cpu-used", "8"])
        .arg(path)
        .output()
        .expect("run ffmpeg");
    let _ = std::fs::remove_file(&png);
    assert!(output.status.success(), "ffmpeg could not make an AVIF: {}", String::from_utf8_lossy(&output.stderr));
}

/// Writes a short test video in the container its extension names (MKV, WebM, AVI, MTS, 3GP, MPG, MP4, MOV),
/// with codecs that container takes, and a creation time when given.
pub fn video_in(path: &Path, seconds: f32, width: u32, height: u32, creation_time: Option<&str>) {
    std::fs::create_dir_all(path.parent().expect("a file in a folder")).expect("create the folder");
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    let (video, audio): (&[&str], &[&str]) = match ext.as_str() {
        "webm" => (&["-c:v", "libvpx", "-deadline", "realtime", "-b:v", "200k"], &["-c:a", "libopus"]),
        "mpg" | "mpeg" => (&["-c:v", "mpeg2video"], &["-c:a", "mp2"]),
        "mts" | "m2ts" => {
            (&["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-f", "mpegts"], &["-c:a", "aac"])
        }
        _ => (&["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"], &["-c:a", "aac"]),
    };
    let mut command = Command::new("ffmpeg");
    command
        .args(["-nostdin", "-y", "-v", "error", "-f", "lavfi", "-i"])
        .arg(format!("testsrc=duration={seconds}:size={width}x{height}:rate=25"))
        .args(["-f", "lavfi", "-i"])
        .arg(format!("sine=frequency=440:duration={seconds}"))
        .args(audio)
        .arg("-shortest");
    if let Some(t) = creation_time {
        command.args(["-metadata", &format!("creation_time={t}")]);
    }
    let status = command.args(video).arg(path).status().expect("run ffmpeg");
    assert!(status.success(), "ffmpeg could not make {}", path.display());
}

/// An AV1 video in MP4 (SVT-AV1, its fastest preset), no sound: ffmpeg decodes AV1 with dav1d, not libavcodec.
pub fn av1_video(path: &Path, seconds: f32, width: u32, height: u32) {
    std::fs::create_dir_all(path.parent().expect("a file in a folder")).expect("create the folder");
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-y", "-v", "error", "-f", "lavfi", "-i"])
        .arg(format!("testsrc=duration={seconds}:size={width}x{height}:rate=10"))
        .args(["-c:v", "libsvtav1", "-preset", "12", "-svtav1-params", "lp=1"])
        .arg(path)
        .status()
        .expect("run ffmpeg");
    assert!(status.success(), "ffmpeg could not make {}", path.display());
}

/// A QuickTime video (`.mov`) with the metadata `tags` as the QuickTime keys an iPhone writes them
/// (`com.apple.quicktime.creationdate`), beside `creation_time`.
pub fn quicktime_video(path: &Path, creation_time: &str, tags: &[(&str, &str)]) {
    let mut command = Command::new("ffmpeg");
    command
        .args(["-nostdin", "-y", "-v", "error", "-f", "lavfi", "-i", "testsrc=duration=0.5:size=64x48:rate=25"])
        .args(["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-movflags", "use_metadata_tags"])
        .args(["-metadata", &format!("creation_time={creation_time}")]);
    for (key, value) in tags {
        command.args(["-metadata", &format!("{key}={value}")]);
    }
    let status = command.arg(path).status().expect("run ffmpeg");
    assert!(status.success(), "ffmpeg could not make {}", path.display());
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

/// Writes a short H.264 video of `width` × `height` whose container says to show it turned by `rotate` degrees (the
/// `rotate` tag, kept as the track's display matrix), as a phone stores a portrait video: landscape pixels, shown
/// portrait. ffmpeg 5.1 keeps that tag only on a stream it copies (6.0 added `-display_rotation`), so the video is
/// encoded first, then copied with it. Ten frames a second, no sound: few frames to encode, even when large.
pub fn rotated_video(path: &Path, seconds: f32, width: u32, height: u32, rotate: u16) {
    let plain = path.with_extension("fixture.mp4");
    let encoded = Command::new("ffmpeg")
        .args(["-nostdin", "-y", "-v", "error", "-f", "lavfi", "-i"])
        .arg(format!("testsrc=duration={seconds}:size={width}x{height}:rate=10"))
        .args(["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"])
        .arg(&plain)
        .status()
        .expect("run ffmpeg");
    assert!(encoded.success(), "ffmpeg could not make {}", plain.display());
    let turned = Command::new("ffmpeg")
        .args(["-nostdin", "-y", "-v", "error", "-i"])
        .arg(&plain)
        .args(["-c", "copy", "-metadata:s:v:0", &format!("rotate={rotate}")])
        .arg(path)
        .status()
        .expect("run ffmpeg");
    let _ = std::fs::remove_file(&plain);
    assert!(turned.success(), "ffmpeg could not turn {}", path.display());
}

/// Writes a HEIC of `picture(width, height, seed, false)` through libheif's `heif-enc`.
pub fn heic(path: &Path, width: u32, height: u32, seed: u32) {
    let png = path.with_extension("fixture.png");
    std::fs::write(&png, self::png(width, height, seed)).expect("write png");
    let output = Command::new("heif-enc").arg("-o").arg(path).arg(&png).output().expect("run heif-enc");
    let _ = std::fs::remove_file(&png);
    assert!(output.status.success(), "heif-enc failed: {}", String::from_utf8_lossy(&output.stderr));
}

/// Writes a HEIF holding one top-level image for each of `sizes` (a burst, a bracket), through `heif-enc`; the
/// first is the primary, as heif-enc makes it, each of `picture(width, height, seed + its place, false)`.
pub fn heic_of_several(path: &Path, sizes: &[(u32, u32)], seed: u32) {
    let pngs: Vec<_> = sizes
        .iter()
        .enumerate()
        .map(|(i, (w, h))| {
            let png = path.with_extension(format!("fixture{i}.png"));
            std::fs::write(&png, self::png(*w, *h, seed + i as u32)).expect("write png");
            png
        })
        .collect();
    let output = Command::new("heif-enc").arg("-o").arg(path).args(&pngs).output().expect("run heif-enc");
    for png in &pngs {
        let _ = std::fs::remove_file(png);
    }
    assert!(output.status.success(), "heif-enc failed: {}", String::from_utf8_lossy(&output.stderr));
}

/// A progressive JPEG of `width`×`height` (libjpeg-turbo's lossless transform of a sequential one, with its
/// standard progression of ten scans at 4:2:0).
pub fn progressive_jpeg(width: usize, height: usize) -> Vec<u8> {
    let pixels: Vec<u8> = (0..width * height * 3).map(|i| (i * 7 % 251) as u8).collect();
    let image = turbojpeg::Image {
        pixels: pixels.as_slice(),
        width,
        pitch: 3 * width,
        height,
        format: turbojpeg::PixelFormat::RGB,
    };
    let sequential = turbojpeg::compress(image, 90, turbojpeg::Subsamp::Sub2x2).unwrap();
    let transform = turbojpeg::Transform { progressive: true, ..Default::default() };
    turbojpeg::Transformer::new().unwrap().transform_to_vec(&transform, &sequential).unwrap()
}

/// `jpeg` with its last scan written `times` more times before its end: a progression that goes on.
pub fn with_last_scan_again(jpeg: &[u8], times: usize) -> Vec<u8> {
    let last = jpeg.windows(2).rposition(|w| w == [0xFF, 0xDA]).expect("a scan");
    let end = jpeg.len() - 2;
    assert_eq!(&jpeg[end..], [0xFF, 0xD9]);
    let mut out = jpeg[..end].to_vec();
    for _ in 0..times {
        out.extend_from_slice(&jpeg[last..end]);
    }
    out.extend_from_slice(&[0xFF, 0xD9]);
    out
}

/// EXIF blocks built byte by byte, so that tests can damage them exactly the way real writers do.
pub mod exif_block;

mod heif_transforms;
pub use heif_transforms::{heic_transformed, imir, irot, with_heif_properties};

/// Drops `CAP_LEASE` from the calling thread's effective capabilities (they are per thread), as on a Worker not
/// given it: the thread may then take no lease on another user's file ([`crate::writers`]). Call it on a thread
/// of the test's own: other tests of the process keep theirs.
pub fn without_cap_lease() {
    use rustix::thread::{CapabilitySet, capabilities, set_capabilities};
    let mut sets = capabilities(None).expect("reading this thread's capabilities");
    sets.effective.remove(CapabilitySet::LEASE);
    set_capabilities(None, sets).expect("dropping CAP_LEASE from this thread");
}
