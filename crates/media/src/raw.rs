//! Camera RAW files: the pixels come from the largest JPEG preview the camera embedded (every RAW format the
//! Worker reads carries one: DNG, CR2, NEF, ARW and RW2 in their IFDs, ORF in its maker note, RAF after its
//! header, CR3 in a `PRVW` box). Demosaicing the sensor data is left to the editors; for a flashback the
//! camera's own rendering is the picture.
//!
//! The previews are found the same way in every format: each JPEG start-of-image marker is tried with the JPEG
//! decoder's header reader (a lossless-JPEG raw strip, which libjpeg-turbo cannot decode, or random bytes
//! that look like a marker, are passed over), and the one with the most pixels wins.

use std::path::Path;

use crate::MediaError;

/// At most this many JPEGs that look decodable are tried with the decoder's header reader.
const MAX_CANDIDATES: usize = 64;
/// At most this many start-of-image markers are looked at (a tiled DNG has one per lossless tile; a file
/// stuffed with fake markers stays cheap).
const MAX_MARKERS: usize = 100_000;

/// Whether the JPEG starting here has a baseline or progressive frame (SOF0–SOF2), walking its marker segments
/// (at most 32). Lossless frames (SOF3, a RAW's sensor data or tiles) and arithmetic-coded ones are not
/// previews.
fn is_baseline_or_progressive(jpeg: &[u8]) -> bool {
    let mut at = 2;
    for _ in 0..32 {
        let (Some(&0xFF), Some(&marker)) = (jpeg.get(at), jpeg.get(at + 1)) else { return false };
        match marker {
            0xC0..=0xC2 => return true,
            0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF | 0xD9 | 0xDA => return false,
            _ => {}
        }
        let Some(len) = jpeg.get(at + 2..at + 4).map(|b| usize::from(u16::from_be_bytes([b[0], b[1]]))) else {
            return false;
        };
        at += 2 + len;
    }
    false
}

/// The largest embedded JPEG preview of a RAW file: the bytes from its start-of-image marker to the end of
/// the file (the decoder stops at its end-of-image marker).
pub fn raw_preview<'a>(path: &Path, content: &'a [u8]) -> Result<&'a [u8], MediaError> {
    let mut best: Option<(u64, usize)> = None;
    let candidates = memchr::memmem::find_iter(content, &[0xFF, 0xD8, 0xFF])
        .take(MAX_MARKERS)
        .filter(|at| is_baseline_or_progressive(&content[*at..]))
        .take(MAX_CANDIDATES);
    for at in candidates {
        // A fresh decoder for each candidate: one that failed on a false marker does not recover.
        let mut decompressor = turbojpeg::Decompressor::new().map_err(|e| MediaError::corrupt(path, e))?;
        let Ok(header) = decompressor.read_header(&content[at..]) else { continue };
        let pixels = header.width as u64 * header.height as u64;
        if pixels > 0 && best.is_none_or(|(p, _)| pixels > p) {
            best = Some((pixels, at));
        }
    }
    best.map(|(_, at)| &content[at..])
        .ok_or_else(|| MediaError::corrupt(path, "this RAW file carries no JPEG preview the Worker can read"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jpeg(w: usize, h: usize) -> Vec<u8> {
        let image = image::RgbImage::from_pixel(w as u32, h as u32, image::Rgb([10, 200, 30]));
        turbojpeg::compress_image(&image, 80, turbojpeg::Subsamp::Sub2x2).unwrap().to_vec()
    }

    #[test]
    fn the_largest_preview_wins_and_fake_markers_are_passed_over() {
        let mut raw = b"II*\0\x08\0\0\0".to_vec();
        raw.extend_from_slice(&[0xFF, 0xD8, 0xFF, 0x00, 0x12]);
        let small = jpeg(16, 12);
        let large = jpeg(64, 48);
        raw.extend_from_slice(&small);
        raw.extend_from_slice(&[0x55; 100]);
        let large_at = raw.len();
        raw.extend_from_slice(&large);
        raw.extend_from_slice(&[0xAA; 100]);
        let preview = raw_preview(Path::new("a.nef"), &raw).unwrap();
        assert_eq!(preview.as_ptr(), raw[large_at..].as_ptr());
    }

    #[test]
    fn lossless_tiles_before_the_preview_do_not_hide_it() {
        // A tiled DNG: hundreds of lossless-JPEG tiles (SOF3) before the preview.
        let tile = [0xFF, 0xD8, 0xFF, 0xC3, 0x00, 0x0B, 8, 0, 16, 0, 16, 1, 1, 0x11, 0];
        let mut raw = b"II*\0\x08\0\0\0".to_vec();
        for _ in 0..500 {
            raw.extend_from_slice(&tile);
            raw.extend_from_slice(&[0x33; 40]);
        }
        let preview_at = raw.len();
        raw.extend_from_slice(&jpeg(64, 48));
        assert_eq!(raw_preview(Path::new("a.dng"), &raw).unwrap().as_ptr(), raw[preview_at..].as_ptr());
        assert!(!is_baseline_or_progressive(&tile));
        assert!(is_baseline_or_progressive(&jpeg(8, 8)));
    }

    #[test]
    fn no_preview_is_a_clear_error() {
        let err = raw_preview(Path::new("a.cr2"), b"II*\0\x08\0\0\0 nothing here").unwrap_err();
        assert!(err.to_string().contains("no JPEG preview"), "{err}");
        let stuffed = [0xFF, 0xD8, 0xFF].repeat(10_000);
        assert!(raw_preview(Path::new("a.cr2"), &stuffed).is_err());
    }
}
