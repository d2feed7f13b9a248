use std::path::Path;

use almanac_domain::MediaType;

/// A media format the Worker ingests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MediaFormat {
    /// JPEG still.
    Jpeg,
    /// PNG still.
    Png,
    /// HEIC/HEIF still.
    Heic,
    /// QuickTime movie (including a Live Photo's motion half).
    QuickTime,
    /// MPEG-4 video.
    Mp4,
}

impl MediaFormat {
    /// Still or video.
    pub const fn media_type(self) -> MediaType {
        match self {
            MediaFormat::Jpeg | MediaFormat::Png | MediaFormat::Heic => MediaType::Image,
            MediaFormat::QuickTime | MediaFormat::Mp4 => MediaType::Video,
        }
    }
}

/// Bytes needed from the start of a file for [`detect_format`].
pub const MAGIC_LEN: usize = 16;

/// Decides a file's format by its extension, then confirms it by its first bytes: a file whose content does
/// not match a supported format is not media (e.g. a `.jpg` that is really a text file).
pub fn detect_format(path: &Path, head: &[u8]) -> Option<MediaFormat> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    let by_name = match ext.as_str() {
        "jpg" | "jpeg" | "jpe" => MediaFormat::Jpeg,
        "png" => MediaFormat::Png,
        "heic" | "heif" | "hif" => MediaFormat::Heic,
        "mov" | "qt" => MediaFormat::QuickTime,
        "mp4" | "m4v" => MediaFormat::Mp4,
        _ => return None,
    };
    let by_content = if head.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some(MediaFormat::Jpeg)
    } else if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(MediaFormat::Png)
    } else if head.len() >= 12 && &head[4..8] == b"ftyp" {
        match &head[8..12] {
            b"heic" | b"heix" | b"hevc" | b"hevx" | b"mif1" | b"msf1" | b"heim" | b"heis" => Some(MediaFormat::Heic),
            b"qt  " => Some(MediaFormat::QuickTime),
            _ => Some(MediaFormat::Mp4),
        }
    } else if head.len() >= 8 && matches!(&head[4..8], b"moov" | b"wide" | b"mdat" | b"free") {
        Some(MediaFormat::QuickTime)
    } else {
        None
    };
    match (by_name, by_content?) {
        (a, b) if a == b => Some(a),
        // Containers are often misnamed between .mov and .mp4; both are videos.
        (MediaFormat::QuickTime | MediaFormat::Mp4, content @ (MediaFormat::QuickTime | MediaFormat::Mp4)) => {
            Some(content)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ftyp(brand: &[u8; 4]) -> Vec<u8> {
        let mut v = vec![0, 0, 0, 24];
        v.extend_from_slice(b"ftyp");
        v.extend_from_slice(brand);
        v.extend_from_slice(&[0; 4]);
        v
    }

    #[test]
    fn extension_and_content_must_agree() {
        let jpeg = [0xFF, 0xD8, 0xFF, 0xE1, 0, 0];
        assert_eq!(detect_format(Path::new("a/IMG_1.JPG"), &jpeg), Some(MediaFormat::Jpeg));
        assert_eq!(detect_format(Path::new("a.jpeg"), b"hello, I am text"), None);
        assert_eq!(detect_format(Path::new("a.png"), &jpeg), None);
        assert_eq!(detect_format(Path::new("a.txt"), &jpeg), None);
        assert_eq!(detect_format(Path::new("noext"), &jpeg), None);
        assert_eq!(detect_format(Path::new("a.png"), b"\x89PNG\r\n\x1a\n...."), Some(MediaFormat::Png));
        assert_eq!(detect_format(Path::new("a.HEIC"), &ftyp(b"heic")), Some(MediaFormat::Heic));
        assert_eq!(detect_format(Path::new("a.heic"), &ftyp(b"mif1")), Some(MediaFormat::Heic));
        assert_eq!(detect_format(Path::new("a.mov"), &ftyp(b"qt  ")), Some(MediaFormat::QuickTime));
        assert_eq!(detect_format(Path::new("a.mov"), &ftyp(b"isom")), Some(MediaFormat::Mp4));
        assert_eq!(detect_format(Path::new("a.mp4"), &ftyp(b"qt  ")), Some(MediaFormat::QuickTime));
        assert_eq!(detect_format(Path::new("a.mp4"), &ftyp(b"heic")), None);
        assert_eq!(detect_format(Path::new("a.mov"), b"\0\0\0\x08wide\0\0"), Some(MediaFormat::QuickTime));
        assert_eq!(detect_format(Path::new("a.jpg"), &[]), None);
    }

    #[test]
    fn formats_know_their_media_type() {
        assert_eq!(MediaFormat::Heic.media_type(), MediaType::Image);
        assert_eq!(MediaFormat::Png.media_type(), MediaType::Image);
        assert_eq!(MediaFormat::Mp4.media_type(), MediaType::Video);
        assert_eq!(MediaFormat::QuickTime.media_type(), MediaType::Video);
    }
}
