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

/// EXIF blocks built byte by byte, so that tests can damage them exactly the way real writers do.
pub mod exif_block {
    /// A value, encoded in the block's byte order.
    #[derive(Debug, Clone)]
    pub enum V {
        Ascii(String),
        Short(u16),
        Long(u32),
        Rationals(Vec<(u32, u32)>),
        Undefined(Vec<u8>),
    }

    /// One IFD entry, with optional damage.
    #[derive(Debug, Clone)]
    pub struct E {
        pub tag: u16,
        pub value: V,
        /// Write this type instead of the value's own.
        pub typ: Option<u16>,
        /// Write this count instead of the value's own.
        pub count: Option<u32>,
        /// Point the value here instead of at its data (values longer than 4 bytes).
        pub offset: Option<u32>,
    }

    impl E {
        pub fn new(tag: u16, value: V) -> Self {
            E { tag, value, typ: None, count: None, offset: None }
        }
        pub fn ascii(tag: u16, s: &str) -> Self {
            E::new(tag, V::Ascii(s.to_owned()))
        }
    }

    pub const MAKE: u16 = 0x010F;
    pub const MODEL: u16 = 0x0110;
    pub const ORIENTATION: u16 = 0x0112;
    pub const DATE_TIME: u16 = 0x0132;
    pub const EXIF_POINTER: u16 = 0x8769;
    pub const GPS_POINTER: u16 = 0x8825;
    pub const DATE_TIME_ORIGINAL: u16 = 0x9003;
    pub const OFFSET_TIME_ORIGINAL: u16 = 0x9011;
    pub const SUBSEC_TIME_ORIGINAL: u16 = 0x9291;
    pub const MAKER_NOTE: u16 = 0x927C;
    pub const LENS_MODEL: u16 = 0xA434;
    pub const GPS_LATITUDE_REF: u16 = 0x0001;
    pub const GPS_LATITUDE: u16 = 0x0002;

    /// A TIFF-structured EXIF block: IFD0, and the Exif and GPS IFDs it points to when not empty.
    #[derive(Debug, Clone, Default)]
    pub struct Block {
        pub little_endian: bool,
        pub ifd0: Vec<E>,
        pub exif: Vec<E>,
        pub gps: Vec<E>,
        /// Leave out the Exif IFD's next-IFD pointer (it is written last, so the block simply ends), as several
        /// popular writers do.
        pub exif_without_next_pointer: bool,
        /// Make IFD0's entry count claim this many more entries than there are.
        pub ifd0_extra_count: u16,
    }

    impl Block {
        /// The usual camera block: make, model, orientation; date, offset, sub-seconds; latitude.
        pub fn camera(little_endian: bool) -> Self {
            Block {
                little_endian,
                ifd0: vec![
                    E::ascii(MAKE, "Almanac"),
                    E::ascii(MODEL, "Broken Writer 3000"),
                    E::new(ORIENTATION, V::Short(6)),
                    E::ascii(DATE_TIME, "2023:01:02 03:04:05"),
                ],
                exif: vec![
                    E::ascii(DATE_TIME_ORIGINAL, "2019:07:04 18:30:05"),
                    E::ascii(OFFSET_TIME_ORIGINAL, "+02:00"),
                    E::ascii(SUBSEC_TIME_ORIGINAL, "25"),
                    E::ascii(LENS_MODEL, "50mm f/1.8"),
                ],
                gps: vec![
                    E::ascii(GPS_LATITUDE_REF, "S"),
                    E::new(GPS_LATITUDE, V::Rationals(vec![(33, 1), (52, 1), (0, 1)])),
                ],
                ..Block::default()
            }
        }

        fn u16(&self, v: u16) -> [u8; 2] {
            if self.little_endian { v.to_le_bytes() } else { v.to_be_bytes() }
        }
        fn u32(&self, v: u32) -> [u8; 4] {
            if self.little_endian { v.to_le_bytes() } else { v.to_be_bytes() }
        }

        fn encode_value(&self, v: &V) -> (u16, u32, Vec<u8>) {
            match v {
                V::Ascii(s) => (2, s.len() as u32 + 1, [s.as_bytes(), b"\0"].concat()),
                V::Short(x) => (3, 1, self.u16(*x).to_vec()),
                V::Long(x) => (4, 1, self.u32(*x).to_vec()),
                V::Rationals(r) => {
                    (5, r.len() as u32, r.iter().flat_map(|(n, d)| [self.u32(*n), self.u32(*d)].concat()).collect())
                }
                V::Undefined(b) => (7, b.len() as u32, b.clone()),
            }
        }

        /// The block's bytes (starting with the TIFF header).
        pub fn bytes(&self) -> Vec<u8> {
            let ifd_len = |n: usize| 2 + 12 * n + 4;
            let with_pointers = {
                let mut v = self.ifd0.clone();
                if !self.exif.is_empty() {
                    v.push(E::new(EXIF_POINTER, V::Long(0)));
                }
                if !self.gps.is_empty() {
                    v.push(E::new(GPS_POINTER, V::Long(0)));
                }
                v
            };
            // Layout: header, every value longer than 4 bytes, IFD0, GPS IFD, Exif IFD (last).
            let mut out = Vec::new();
            out.extend_from_slice(if self.little_endian { b"II" } else { b"MM" });
            out.extend_from_slice(&self.u16(42));
            out.extend_from_slice(&[0; 4]);
            let mut data_offsets = Vec::new();
            for ifd in [&with_pointers, &self.gps, &self.exif] {
                let mut offsets = Vec::new();
                for e in ifd {
                    let (_, _, data) = self.encode_value(&e.value);
                    if data.len() > 4 {
                        if out.len() % 2 == 1 {
                            out.push(0);
                        }
                        offsets.push(Some(out.len() as u32));
                        out.extend_from_slice(&data);
                    } else {
                        offsets.push(None);
                    }
                }
                data_offsets.push(offsets);
            }
            if out.len() % 2 == 1 {
                out.push(0);
            }
            let ifd0_at = out.len();
            let gps_at = ifd0_at + ifd_len(with_pointers.len());
            let exif_at = gps_at + if self.gps.is_empty() { 0 } else { ifd_len(self.gps.len()) };
            let header_offset = self.u32(ifd0_at as u32);
            out[4..8].copy_from_slice(&header_offset);
            type Laid<'a> = (&'a Vec<E>, &'a Vec<Option<u32>>, bool);
            let ifds: [Laid<'_>; 3] = [
                (&with_pointers, &data_offsets[0], false),
                (&self.gps, &data_offsets[1], false),
                (&self.exif, &data_offsets[2], self.exif_without_next_pointer),
            ];
            for (n, (ifd, offsets, no_next)) in ifds.into_iter().enumerate() {
                if n > 0 && ifd.is_empty() {
                    continue;
                }
                let extra = if n == 0 { self.ifd0_extra_count } else { 0 };
                out.extend_from_slice(&self.u16(ifd.len() as u16 + extra));
                for (e, data_at) in ifd.iter().zip(offsets) {
                    let (typ, count, data) = self.encode_value(&e.value);
                    out.extend_from_slice(&self.u16(e.tag));
                    out.extend_from_slice(&self.u16(e.typ.unwrap_or(typ)));
                    out.extend_from_slice(&self.u32(e.count.unwrap_or(count)));
                    let inline = match e.tag {
                        EXIF_POINTER if n == 0 => self.u32(exif_at as u32).to_vec(),
                        GPS_POINTER if n == 0 => self.u32(gps_at as u32).to_vec(),
                        _ => match (e.offset, data_at) {
                            (Some(forced), _) => self.u32(forced).to_vec(),
                            (None, Some(at)) => self.u32(*at).to_vec(),
                            (None, None) => {
                                let mut d = data.clone();
                                d.resize(4, 0);
                                d
                            }
                        },
                    };
                    out.extend_from_slice(&inline);
                }
                if !no_next {
                    out.extend_from_slice(&[0; 4]);
                }
            }
            out
        }
    }

    /// A JPEG of a small picture with this EXIF block in an APP1 segment, after a JFIF APP0 when asked.
    pub fn jpeg(block: &[u8], jfif_first: bool) -> Vec<u8> {
        let plain = turbojpeg::compress_image(&super::picture(32, 24, 3, false), 90, turbojpeg::Subsamp::Sub2x2)
            .expect("encode")
            .to_vec();
        // The encoder writes its own JFIF APP0 right after SOI; take it out, to put it back where asked.
        let body = if plain[2..4] == [0xFF, 0xE0] {
            let len = usize::from(u16::from_be_bytes([plain[4], plain[5]]));
            plain[4 + len..].to_vec()
        } else {
            plain[2..].to_vec()
        };
        let mut out = vec![0xFF, 0xD8];
        if jfif_first {
            out.extend_from_slice(&[0xFF, 0xE0, 0, 16]);
            out.extend_from_slice(b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0");
        }
        out.extend_from_slice(&app1(block));
        out.extend_from_slice(&body);
        out
    }

    /// An APP1 EXIF segment.
    pub fn app1(block: &[u8]) -> Vec<u8> {
        let mut out = vec![0xFF, 0xE1];
        out.extend_from_slice(&((block.len() + 8) as u16).to_be_bytes());
        out.extend_from_slice(b"Exif\0\0");
        out.extend_from_slice(block);
        out
    }

    /// A PNG of a small picture with this EXIF block in an `eXIf` chunk after `IHDR`.
    pub fn png(block: &[u8]) -> Vec<u8> {
        let plain = super::png(32, 24, 3);
        let ihdr_end = 8 + 4 + 4 + 13 + 4;
        let mut out = plain[..ihdr_end].to_vec();
        out.extend_from_slice(&png_chunk(b"eXIf", block));
        out.extend_from_slice(&plain[ihdr_end..]);
        out
    }

    /// A PNG chunk with its CRC.
    pub fn png_chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
        let mut out = (data.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        out.extend_from_slice(&crc32(&[kind.as_slice(), data].concat()).to_be_bytes());
        out
    }

    /// A WebP (lossless) of a small picture with this EXIF block in an `EXIF` chunk (extended format).
    pub fn webp(block: &[u8]) -> Vec<u8> {
        let image = super::picture(32, 24, 3, false);
        let mut lossless = std::io::Cursor::new(Vec::new());
        image.write_to(&mut lossless, image::ImageFormat::WebP).expect("encode webp");
        let lossless = lossless.into_inner();
        let image_chunk = &lossless[12..];
        let mut vp8x = vec![0x08, 0, 0, 0];
        vp8x.extend_from_slice(&31u32.to_le_bytes()[..3]);
        vp8x.extend_from_slice(&23u32.to_le_bytes()[..3]);
        let mut body = b"WEBP".to_vec();
        body.extend_from_slice(&riff_chunk(b"VP8X", &vp8x));
        body.extend_from_slice(image_chunk);
        body.extend_from_slice(&riff_chunk(b"EXIF", block));
        let mut out = b"RIFF".to_vec();
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&body);
        out
    }

    fn riff_chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
        let mut out = kind.to_vec();
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out.extend_from_slice(data);
        if data.len() % 2 == 1 {
            out.push(0);
        }
        out
    }

    /// CRC-32 (ISO 3309), as PNG chunks carry it.
    pub fn crc32(data: &[u8]) -> u32 {
        let mut crc = 0xFFFF_FFFFu32;
        for byte in data {
            crc ^= u32::from(*byte);
            for _ in 0..8 {
                crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
            }
        }
        !crc
    }
}
