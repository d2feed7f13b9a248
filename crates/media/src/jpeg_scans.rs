//! How many scans a JPEG has, counted before it is decoded. A progressive JPEG is drawn in scans, each over the
//! whole image, and nothing in the format bounds their number: a crafted file of a few hundred kilobytes can hold
//! thousands of scans that each cost the decoder a pass over every block of a large image, minutes of CPU on a
//! thread nothing can stop (libjpeg-turbo's own guard, `TJFLAG_LIMITSCANS`, stops at 500). Cameras write one scan,
//! progressive encoders about ten, mozjpeg a few dozen at most, so a JPEG with more than [`MOST_JPEG_SCANS`] is
//! refused before its decode starts. Its walk of a JPEG's markers ([`markers`]) is the crate's one.

/// The most scans a JPEG may have to be decoded: libjpeg-turbo's own limit. docs/media.md gives it (checked by a
/// test).
pub(crate) const MOST_JPEG_SCANS: usize = 500;

/// The number of scans (start-of-scan markers) of the JPEG `content`, counting up to `most + 1` at most: a linear
/// pass over its markers and entropy-coded data ([`markers`]), which decodes nothing. A file cut short counts what
/// it holds.
pub(crate) fn scans(content: &[u8], most: usize) -> usize {
    markers(content).filter(|(marker, _)| *marker == 0xDA).take(most.saturating_add(1)).count()
}

/// The markers of the JPEG `content` after its start, in order, each with what follows it (a segment's length and
/// body), up to its end of image or the content's end: the one walk of a JPEG's markers (the pixel budget reads the
/// frame header with it too). A marker is looked for as libjpeg looks for it (`next_marker`): whatever lies between
/// a segment's end and the next 0xFF (bytes of junk, a stuffed zero) is passed over, as the decoder passes it over
/// with a warning and goes on, so junk cannot hide what follows it. After a start of scan, its entropy-coded data is
/// passed over.
pub(crate) fn markers(content: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    let mut at = Some(2);
    std::iter::from_fn(move || {
        let marker_at = next_marker(content, at?)?;
        let marker = content[marker_at + 1];
        let after = marker_at + 2;
        at = match marker {
            // Markers without a length; the end of the image.
            0x01 | 0xD0..=0xD8 => Some(after),
            0xD9 => None,
            _ => content.get(after..after + 2).map(|len| {
                let end = after + usize::from(u16::from_be_bytes([len[0], len[1]]));
                if marker == 0xDA { after_entropy_coded_data(content, end) } else { end }
            }),
        };
        Some((marker, &content[after..]))
    })
}

/// Where the next marker at or after `at` begins (its 0xFF, the last of any fill bytes), passing over junk and
/// stuffed zeros as libjpeg does; `None` when the content ends first.
fn next_marker(content: &[u8], mut at: usize) -> Option<usize> {
    loop {
        at += memchr::memchr(0xFF, content.get(at..)?)?;
        while content.get(at + 1) == Some(&0xFF) {
            at += 1;
        }
        match content.get(at + 1)? {
            0x00 => at += 2,
            _ => return Some(at),
        }
    }
}

/// Where the marker after the entropy-coded data starting at `at` begins: the first 0xFF followed by neither a
/// stuffed zero, a restart marker nor another 0xFF.
fn after_entropy_coded_data(content: &[u8], mut at: usize) -> usize {
    while let Some(found) = content.get(at..).and_then(|rest| memchr::memchr(0xFF, rest)) {
        at += found;
        match content.get(at + 1) {
            Some(0x00 | 0xD0..=0xD7) => at += 2,
            Some(0xFF) => at += 1,
            _ => return at,
        }
    }
    content.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{progressive_jpeg, with_last_scan_again};

    #[test]
    fn a_jpegs_scans_are_counted_and_the_count_stops_past_the_most() {
        let progressive = progressive_jpeg(64, 48);
        let ten = scans(&progressive, MOST_JPEG_SCANS);
        assert!((2..=12).contains(&ten), "a standard progression: {ten} scans");
        let many = with_last_scan_again(&progressive, 600);
        assert_eq!(scans(&many, MOST_JPEG_SCANS), MOST_JPEG_SCANS + 1, "counted up to one past the most");
        assert_eq!(scans(&many, 10_000), ten + 600);
        let cut = scans(&many[..many.len() / 2], 10_000);
        assert!(cut > ten && cut < ten + 600, "a file cut short counts what it holds: {cut}");
    }

    /// Bytes of junk before a marker (after a segment, between scans) do not end the count: libjpeg passes over
    /// them with a warning and decodes the scans after them.
    #[test]
    fn junk_between_segments_does_not_hide_the_scans_after_it() {
        let progressive = progressive_jpeg(64, 48);
        let ten = scans(&progressive, MOST_JPEG_SCANS);
        let first_scan = progressive.windows(2).position(|w| w == [0xFF, 0xDA]).unwrap();
        for junk in [&[0x00][..], &[0x12, 0x34], &[0xFF, 0x00, 0x55], &[0xFF, 0xFF]] {
            let mut hidden = progressive[..first_scan].to_vec();
            hidden.extend_from_slice(junk);
            hidden.extend_from_slice(&progressive[first_scan..]);
            assert_eq!(scans(&hidden, MOST_JPEG_SCANS), ten, "junk {junk:02X?} before the first scan");
            let many = with_last_scan_again(&hidden, 600);
            assert_eq!(scans(&many, MOST_JPEG_SCANS), MOST_JPEG_SCANS + 1, "junk {junk:02X?}");
        }
    }

    #[test]
    fn a_sequential_jpeg_has_one_scan_whatever_its_data_holds() {
        // Data full of 0xFF: each is stuffed (0xFF 0x00) in the entropy-coded data, and restart markers stand in it.
        let pixels = vec![255u8; 32 * 32 * 3];
        let image = turbojpeg::Image {
            pixels: pixels.as_slice(),
            width: 32,
            pitch: 96,
            height: 32,
            format: turbojpeg::PixelFormat::RGB,
        };
        let jpeg = turbojpeg::compress(image, 100, turbojpeg::Subsamp::None).unwrap();
        assert_eq!(scans(&jpeg, MOST_JPEG_SCANS), 1);
        assert_eq!(scans(b"\xFF\xD8", MOST_JPEG_SCANS), 0);
        assert_eq!(scans(b"", MOST_JPEG_SCANS), 0);
    }

    /// A photo drawn in more scans than the most is refused before its decode, saying why, and nothing is written;
    /// the same photo in its ten scans makes its proxies.
    #[test]
    fn a_photo_of_too_many_scans_is_refused_before_it_is_decoded() {
        let dir = tempfile::tempdir().unwrap();
        let make = |content: &[u8]| {
            let path = dir.path().join("a.jpg");
            crate::still::make_still_proxies(
                &path,
                content,
                crate::MediaFormat::Jpeg,
                1,
                u64::MAX,
                &crate::fixtures::proxy_folder(dir.path()),
            )
        };
        let progressive = progressive_jpeg(640, 480);
        make(&progressive).expect("a standard progressive JPEG makes its proxies");
        std::fs::remove_file(dir.path().join("preview.jpg")).unwrap();
        match make(&with_last_scan_again(&progressive, MOST_JPEG_SCANS)) {
            Err(crate::MediaError::Corrupt { reason, .. }) => {
                assert!(reason.contains(&format!("more than {MOST_JPEG_SCANS} scans")), "{reason}");
            }
            other => panic!("a JPEG of too many scans: {other:?}"),
        }
        assert!(!dir.path().join("preview.jpg").exists(), "nothing written for it");
    }

    /// docs/media.md gives the most scans as it is.
    #[test]
    fn the_docs_give_the_most_scans_as_it_is() {
        let docs = include_str!("../../../docs/media.md").split_whitespace().collect::<Vec<_>>().join(" ");
        let said = format!("more than {MOST_JPEG_SCANS} scans");
        assert!(docs.contains(&said), "docs/media.md should say a JPEG with {said} is refused");
    }
}
