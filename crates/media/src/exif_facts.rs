use almanac_domain::{AssetMetadata, CaptureSource, CaptureTime};
use chrono::{DateTime, Utc};
use exif::{Context, In, Tag, Value};

use crate::dates::{fraction_nanos, parse_date_text, parse_offset};

/// What a still's EXIF says, as far as the catalogue cares.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExifFacts {
    /// Capture-time candidates, best first (original, digitized, modified), each already an instant.
    pub dates: Vec<CaptureTime>,
    /// The orientation that turns the stored pixels upright, numbered as EXIF numbers them, 1 to 8 (1 = upright):
    /// EXIF's `Orientation`, except in a HEIF (HEIC, AVIF), where it is what the primary image's transformative
    /// properties (`irot`, `imir`) say and EXIF's is ignored, as the HEIF specification asks of readers that apply
    /// them (libheif applies them when it decodes).
    pub orientation: u16,
    /// Metadata for the catalogue (dimensions are filled from the decoder).
    pub metadata: AssetMetadata,
}

impl ExifFacts {
    /// The capture time: the best EXIF date, else `mtime`.
    pub fn capture_time(&self, mtime: DateTime<Utc>) -> CaptureTime {
        CaptureTime::best(self.dates.iter().copied()).unwrap_or(CaptureTime::file_mtime(mtime))
    }
}

/// Everything a still's own bytes say: its EXIF (for a RAW whose container keeps none, the EXIF of its
/// embedded `preview`, which the caller found with [`crate::raw_preview`]), plus the date of an XMP packet
/// embedded anywhere in it, as one more candidate in `dates`. A HEIF's orientation (`orientation` and
/// `metadata.orientation_degrees`) is its primary image's `irot` and `imir`, whatever its EXIF says: an iPhone's
/// portrait photo is stored landscape with both saying a quarter turn, and libheif shows it turned once.
pub fn read_still_facts(content: &[u8], preview: Option<&[u8]>) -> ExifFacts {
    let mut facts = read_exif(content);
    if (facts.dates.is_empty() || facts.metadata.camera_make.is_none())
        && let Some(preview) = preview
    {
        let from_preview = read_exif(preview);
        if facts.dates.is_empty() {
            facts.dates = from_preview.dates;
        }
        if facts.metadata.camera_make.is_none() {
            facts.metadata = from_preview.metadata;
            facts.orientation = from_preview.orientation;
        }
    }
    if crate::detect::is_heif(content) {
        facts.orientation = crate::heif_orientation::primary_orientation(content);
        facts.metadata.orientation_degrees = orientation_degrees(facts.orientation);
    }
    facts.dates.extend(crate::embedded_xmp_date(content));
    facts
}

/// Reads EXIF from a JPEG, HEIF/AVIF, PNG, WebP or TIFF-based file in memory, tolerantly: a block that
/// breaks the specification somewhere (a sub-IFD without its next-IFD pointer, an entry whose value lies past
/// the end, a MakerNote pointing outside, a wrong type or count, duplicate tags, a date in the wrong IFD) keeps
/// every field that is still valid. A file without EXIF gives empty facts, never an error: the capture time
/// then comes from elsewhere.
pub fn read_exif(content: &[u8]) -> ExifFacts {
    let mut facts = match parse_tolerantly(content) {
        Some(exif) => facts_of(&exif),
        None => ExifFacts { orientation: 1, ..ExifFacts::default() },
    };
    // Canon's CR3 keeps IFD0 in a `CMT1` box and the Exif IFD in `CMT2`, each a TIFF block of its own.
    if facts.dates.is_empty() {
        let block = |name: &[u8]| {
            let at = memchr::memmem::find(&content[..content.len().min(1 << 20)], name)? + name.len();
            read_raw_tolerantly(content.get(at..content.len().min(at + (1 << 16)))?)
        };
        if let Some(ifd0) = block(b"CMT1") {
            let base = facts_of(&ifd0);
            if facts.metadata.camera_make.is_none() {
                facts.metadata = base.metadata;
                facts.orientation = base.orientation;
            }
        }
        if let Some(exif_ifd) = block(b"CMT2") {
            facts.dates = facts_of(&exif_ifd).dates;
        }
    }
    facts
}

/// The EXIF block of a file, with what could be read of a damaged one. When the container cannot be walked
/// (a damaged segment before the EXIF, an unknown box layout), the block is looked for by its signature.
fn parse_tolerantly(content: &[u8]) -> Option<exif::Exif> {
    let in_container = tolerant_reader().read_from_container(&mut std::io::Cursor::new(content));
    match in_container.or_else(keep_partial) {
        Ok(exif) => Some(exif),
        Err(_) => read_raw_tolerantly(find_exif_block(content)?),
    }
}

/// A TIFF-structured EXIF block read tolerantly.
fn read_raw_tolerantly(tiff: &[u8]) -> Option<exif::Exif> {
    tolerant_reader().read_raw(tiff.to_vec()).or_else(keep_partial).ok()
}

fn tolerant_reader() -> exif::Reader {
    let mut reader = exif::Reader::new();
    reader.continue_on_error(true);
    reader
}

/// What a damaged block still holds: every field read before and after each error.
fn keep_partial(e: exif::Error) -> Result<exif::Exif, exif::Error> {
    e.distill_partial_result(|errors| {
        tracing::debug!(errors = ?errors, "EXIF partly damaged; the valid fields are kept");
    })
}

/// A TIFF header right after an `Exif\0\0` identifier in the first part of the file (where every container
/// keeps it).
fn find_exif_block(content: &[u8]) -> Option<&[u8]> {
    const SEARCH: usize = 1 << 20;
    let head = &content[..content.len().min(SEARCH)];
    // An EXIF block in any container is far below this (a JPEG segment holds at most 64 KiB).
    const MAX_BLOCK: usize = 1 << 20;
    let is_tiff = |b: &[u8]| b.starts_with(b"II*\0") || b.starts_with(b"MM\0*");
    let mut from = 0;
    while let Some(at) = memchr::memmem::find(&head[from..], b"Exif\0\0") {
        let start = from + at + 6;
        let block = &content[start..content.len().min(start + MAX_BLOCK)];
        if is_tiff(block) {
            return Some(block);
        }
        from = start;
    }
    // A TIFF at the very start was already read as one by the container reader: no second pass.
    None
}

/// A field in the primary image, wherever a writer put it: in its own IFD first, else (a common mistake) in the
/// other of IFD0 and the Exif IFD. GPS fields are only ever read from the GPS IFD (their numbers mean other
/// things elsewhere). Of duplicates, the first valid one is kept.
fn field(exif: &exif::Exif, tag: Tag) -> Option<&exif::Field> {
    let find = |context: Context| {
        exif.fields().find(|f| f.ifd_num == In::PRIMARY && f.tag.context() == context && f.tag.number() == tag.number())
    };
    find(tag.context()).or_else(|| match tag.context() {
        Context::Tiff => find(Context::Exif),
        Context::Exif => find(Context::Tiff),
        _ => None,
    })
}

/// A text field's bytes, whatever type the writer gave it (ASCII, or UNDEFINED/BYTE holding text).
fn bytes_of(value: &Value) -> Option<&[u8]> {
    match value {
        Value::Ascii(parts) => parts.iter().map(Vec::as_slice).find(|p| !p.iter().all(|b| *b == 0 || *b == b' ')),
        Value::Undefined(bytes, _) | Value::Byte(bytes) => Some(bytes.as_slice()),
        _ => None,
    }
}

fn facts_of(exif: &exif::Exif) -> ExifFacts {
    let text = |tag: Tag| -> Option<String> { crate::text::metadata_text(bytes_of(&field(exif, tag)?.value)?) };
    let date = |tag: Tag, subsec: Tag, offset: Tag, source: CaptureSource| -> Option<CaptureTime> {
        let mut stamp = parse_date_text(&text(tag)?)?;
        // Sub-seconds from their own tag, unless the date text already carried a fraction.
        let whole_second = chrono::Timelike::nanosecond(&stamp.local) == 0;
        if let Some(nanos) = text(subsec).filter(|_| whole_second).and_then(|f| fraction_nanos(&f)) {
            stamp.local += chrono::Duration::nanoseconds(i64::from(nanos));
        }
        if stamp.offset_minutes.is_none() {
            stamp.offset_minutes = text(offset).and_then(|o| parse_offset(&o));
        }
        Some(stamp.capture(source))
    };
    let dates = [
        date(Tag::DateTimeOriginal, Tag::SubSecTimeOriginal, Tag::OffsetTimeOriginal, CaptureSource::ExifOriginal),
        date(Tag::DateTimeDigitized, Tag::SubSecTimeDigitized, Tag::OffsetTimeDigitized, CaptureSource::ExifDigitized),
        date(Tag::DateTime, Tag::SubSecTime, Tag::OffsetTime, CaptureSource::ExifModified),
    ]
    .into_iter()
    .flatten()
    .collect();
    let orientation = field(exif, Tag::Orientation)
        .and_then(|f| f.value.get_uint(0))
        .filter(|o| (1..=8).contains(o))
        .map_or(1, |o| o as u16);
    let gps_field = |tag: Tag| field(exif, tag);
    let gps_text =
        |tag: Tag| gps_field(tag).and_then(|f| bytes_of(&f.value)).map(|b| String::from_utf8_lossy(b).into_owned());
    let gps = |value: Tag, reference: Tag, negative: &str| -> Option<f64> {
        let Value::Rational(parts) = &gps_field(value)?.value else { return None };
        if parts.is_empty() || parts.iter().any(|r| r.denom == 0) {
            return None;
        }
        let degrees = parts.iter().zip([1.0, 60.0, 3600.0]).map(|(r, d)| r.to_f64() / d).sum::<f64>();
        let sign = if gps_text(reference).is_some_and(|r| r.trim_matches('\0').eq_ignore_ascii_case(negative)) {
            -1.0
        } else {
            1.0
        };
        degrees.is_finite().then_some(sign * degrees)
    };
    let altitude = match gps_field(Tag::GPSAltitude).map(|f| &f.value) {
        Some(Value::Rational(r)) if !r.is_empty() && r[0].denom != 0 => {
            let below = gps_field(Tag::GPSAltitudeRef).and_then(|f| f.value.get_uint(0)) == Some(1);
            Some(if below { -r[0].to_f64() } else { r[0].to_f64() }).filter(|a| a.is_finite())
        }
        _ => None,
    };
    let mut metadata = AssetMetadata {
        orientation_degrees: orientation_degrees(orientation),
        gps_latitude: gps(Tag::GPSLatitude, Tag::GPSLatitudeRef, "S").filter(|v| (-90.0..=90.0).contains(v)),
        gps_longitude: gps(Tag::GPSLongitude, Tag::GPSLongitudeRef, "W").filter(|v| (-180.0..=180.0).contains(v)),
        gps_altitude_m: altitude,
        camera_make: text(Tag::Make),
        camera_model: text(Tag::Model),
        lens_model: text(Tag::LensModel),
        ..AssetMetadata::default()
    };
    if let Some(Value::Undefined(note, _)) = field(exif, Tag::MakerNote).map(|f| &f.value) {
        let apple = crate::read_apple_note(note);
        metadata.camera_burst_id = apple.burst_id;
        metadata.live_photo_content_id = apple.content_identifier;
    }
    ExifFacts { dates, orientation, metadata }
}

/// The clockwise rotation that EXIF orientation 1–8 implies (mirroring aside).
pub(crate) fn orientation_degrees(orientation: u16) -> u16 {
    match orientation {
        3 | 4 => 180,
        5 | 6 => 90,
        7 | 8 => 270,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orientation_maps_to_clockwise_degrees() {
        let degrees: Vec<u16> = (0..=9).map(orientation_degrees).collect();
        assert_eq!(degrees, [0, 0, 0, 180, 180, 90, 90, 270, 270, 0]);
    }

    #[test]
    fn no_exif_means_upright_and_the_file_time() {
        let facts = read_exif(b"not an image");
        assert_eq!(facts.orientation, 1);
        use chrono::TimeZone;
        let mtime = Utc.with_ymd_and_hms(2020, 5, 17, 10, 0, 0).unwrap();
        let capture = facts.capture_time(mtime);
        assert_eq!((capture.at, capture.source, capture.offset_minutes), (mtime, CaptureSource::FileMtime, None));
    }
}
