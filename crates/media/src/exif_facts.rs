use almanac_domain::{AssetMetadata, CaptureSource, CaptureTime};
use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use exif::{In, Tag, Value};

/// What a still's EXIF says, as far as the catalogue cares.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExifFacts {
    /// Capture-time candidates, best first (original, digitized, modified), each already an instant.
    pub dates: Vec<CaptureTime>,
    /// EXIF orientation, 1 to 8 (1 = upright).
    pub orientation: u16,
    /// Metadata for the catalogue (dimensions are filled from the decoder).
    pub metadata: AssetMetadata,
}

impl ExifFacts {
    /// The capture time: the best EXIF date, else `mtime`.
    pub fn capture_time(&self, mtime: DateTime<Utc>) -> CaptureTime {
        self.dates.first().copied().unwrap_or(CaptureTime {
            at: mtime,
            offset_minutes: None,
            source: CaptureSource::FileMtime,
        })
    }
}

/// Reads EXIF from a JPEG, HEIF, PNG or TIFF in memory. A file without EXIF (or with broken EXIF) gives
/// empty facts, never an error: the capture time then falls back to the file's mtime.
pub fn read_exif(content: &[u8]) -> ExifFacts {
    let Ok(exif) = exif::Reader::new().read_from_container(&mut std::io::Cursor::new(content)) else {
        return ExifFacts { orientation: 1, ..ExifFacts::default() };
    };
    let text = |tag: Tag| -> Option<String> {
        match &exif.get_field(tag, In::PRIMARY)?.value {
            Value::Ascii(parts) => {
                let s = String::from_utf8_lossy(parts.first()?)
                    .trim_matches(|c: char| c == '\0' || c.is_whitespace())
                    .to_owned();
                (!s.is_empty()).then_some(s)
            }
            _ => None,
        }
    };
    let raw = |tag: Tag| -> Option<Vec<u8>> {
        match &exif.get_field(tag, In::PRIMARY)?.value {
            Value::Ascii(parts) => parts.first().cloned(),
            _ => None,
        }
    };
    let date = |tag: Tag, subsec: Tag, offset: Tag, source: CaptureSource| -> Option<CaptureTime> {
        let mut dt = exif::DateTime::from_ascii(&raw(tag)?).ok()?;
        if let Some(s) = raw(subsec) {
            let _ = dt.parse_subsec(&s);
        }
        if let Some(o) = raw(offset) {
            let _ = dt.parse_offset(&o);
        }
        let local = NaiveDate::from_ymd_opt(i32::from(dt.year), u32::from(dt.month), u32::from(dt.day))?
            .and_hms_nano_opt(
                u32::from(dt.hour),
                u32::from(dt.minute),
                u32::from(dt.second),
                dt.nanosecond.unwrap_or(0),
            )?;
        let offset_minutes = dt.offset.map(i32::from);
        let at = Utc.from_utc_datetime(&(local - chrono::Duration::minutes(i64::from(offset_minutes.unwrap_or(0)))));
        Some(CaptureTime { at, offset_minutes, source })
    };
    let dates = [
        date(Tag::DateTimeOriginal, Tag::SubSecTimeOriginal, Tag::OffsetTimeOriginal, CaptureSource::ExifOriginal),
        date(Tag::DateTimeDigitized, Tag::SubSecTimeDigitized, Tag::OffsetTimeDigitized, CaptureSource::ExifDigitized),
        date(Tag::DateTime, Tag::SubSecTime, Tag::OffsetTime, CaptureSource::ExifModified),
    ]
    .into_iter()
    .flatten()
    .collect();
    let orientation = exif
        .get_field(Tag::Orientation, In::PRIMARY)
        .and_then(|f| f.value.get_uint(0))
        .filter(|o| (1..=8).contains(o))
        .map_or(1, |o| o as u16);
    let gps = |value: Tag, reference: Tag, negative: &str| -> Option<f64> {
        let Value::Rational(parts) = &exif.get_field(value, In::PRIMARY)?.value else { return None };
        let degrees = parts.iter().zip([1.0, 60.0, 3600.0]).map(|(r, d)| r.to_f64() / d).sum::<f64>();
        let sign = if text(reference).is_some_and(|r| r.eq_ignore_ascii_case(negative)) { -1.0 } else { 1.0 };
        degrees.is_finite().then_some(sign * degrees)
    };
    let altitude = match exif.get_field(Tag::GPSAltitude, In::PRIMARY).map(|f| &f.value) {
        Some(Value::Rational(r)) if !r.is_empty() => {
            let below = exif.get_field(Tag::GPSAltitudeRef, In::PRIMARY).and_then(|f| f.value.get_uint(0)) == Some(1);
            Some(if below { -r[0].to_f64() } else { r[0].to_f64() }).filter(|a| a.is_finite())
        }
        _ => None,
    };
    let metadata = AssetMetadata {
        orientation_degrees: orientation_degrees(orientation),
        gps_latitude: gps(Tag::GPSLatitude, Tag::GPSLatitudeRef, "S").filter(|v| (-90.0..=90.0).contains(v)),
        gps_longitude: gps(Tag::GPSLongitude, Tag::GPSLongitudeRef, "W").filter(|v| (-180.0..=180.0).contains(v)),
        gps_altitude_m: altitude,
        camera_make: text(Tag::Make),
        camera_model: text(Tag::Model),
        lens_model: text(Tag::LensModel),
        ..AssetMetadata::default()
    };
    let mut metadata = metadata;
    if let Some(Value::Undefined(note, _)) = exif.get_field(Tag::MakerNote, In::PRIMARY).map(|f| &f.value) {
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
        let mtime = Utc.with_ymd_and_hms(2020, 5, 17, 10, 0, 0).unwrap();
        let capture = facts.capture_time(mtime);
        assert_eq!((capture.at, capture.source, capture.offset_minutes), (mtime, CaptureSource::FileMtime, None));
    }
}
