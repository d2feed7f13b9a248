//! The one table of the formats the Worker ingests: their extensions, their signatures, and their media type.
//! The crawl's walk picks candidate files by [`is_media_name`] and the crawl confirms each by
//! [`detect_format`]; both read this table (`docs/media.md` says what each format goes through).

use std::path::Path;

use almanac_domain::MediaType;

/// A camera RAW format. Its pixels come from the largest JPEG preview the camera embedded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RawFormat {
    /// Adobe DNG (TIFF-based).
    Dng,
    /// Canon CR2 (TIFF-based).
    Cr2,
    /// Canon CR3 (ISO base media file).
    Cr3,
    /// Nikon NEF (TIFF-based).
    Nef,
    /// Sony ARW (TIFF-based).
    Arw,
    /// Olympus ORF (TIFF-like, its own magic number).
    Orf,
    /// Fujifilm RAF (its own header, an embedded JPEG).
    Raf,
    /// Panasonic RW2 (TIFF-like, its own magic number).
    Rw2,
}

/// A media format the Worker ingests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MediaFormat {
    /// JPEG still.
    Jpeg,
    /// PNG still.
    Png,
    /// HEIC/HEIF still.
    Heic,
    /// AVIF still (HEIF with AV1).
    Avif,
    /// WebP still.
    WebP,
    /// TIFF still.
    Tiff,
    /// GIF (its first frame).
    Gif,
    /// A camera RAW.
    Raw(RawFormat),
    /// QuickTime movie (including a Live Photo's motion half).
    QuickTime,
    /// MPEG-4 video (also M4V and 3GP).
    Mp4,
    /// Matroska video (also WebM).
    Matroska,
    /// AVI video.
    Avi,
    /// MPEG transport stream (AVCHD's MTS and M2TS).
    MpegTs,
    /// MPEG program stream (MPG).
    Mpeg,
}

/// Every extension the Worker reads, lower case, and its format.
pub const EXTENSIONS: &[(&str, MediaFormat)] = &[
    ("jpg", MediaFormat::Jpeg),
    ("jpeg", MediaFormat::Jpeg),
    ("jpe", MediaFormat::Jpeg),
    ("png", MediaFormat::Png),
    ("heic", MediaFormat::Heic),
    ("heif", MediaFormat::Heic),
    ("hif", MediaFormat::Heic),
    ("avif", MediaFormat::Avif),
    ("webp", MediaFormat::WebP),
    ("tif", MediaFormat::Tiff),
    ("tiff", MediaFormat::Tiff),
    ("gif", MediaFormat::Gif),
    ("dng", MediaFormat::Raw(RawFormat::Dng)),
    ("cr2", MediaFormat::Raw(RawFormat::Cr2)),
    ("cr3", MediaFormat::Raw(RawFormat::Cr3)),
    ("nef", MediaFormat::Raw(RawFormat::Nef)),
    ("arw", MediaFormat::Raw(RawFormat::Arw)),
    ("orf", MediaFormat::Raw(RawFormat::Orf)),
    ("raf", MediaFormat::Raw(RawFormat::Raf)),
    ("rw2", MediaFormat::Raw(RawFormat::Rw2)),
    ("mov", MediaFormat::QuickTime),
    ("qt", MediaFormat::QuickTime),
    ("mp4", MediaFormat::Mp4),
    ("m4v", MediaFormat::Mp4),
    ("3gp", MediaFormat::Mp4),
    ("3g2", MediaFormat::Mp4),
    ("mkv", MediaFormat::Matroska),
    ("webm", MediaFormat::Matroska),
    ("avi", MediaFormat::Avi),
    ("mts", MediaFormat::MpegTs),
    ("m2ts", MediaFormat::MpegTs),
    ("mpg", MediaFormat::Mpeg),
    ("mpeg", MediaFormat::Mpeg),
];

impl MediaFormat {
    /// Still or video.
    pub const fn media_type(self) -> MediaType {
        match self {
            MediaFormat::Jpeg
            | MediaFormat::Png
            | MediaFormat::Heic
            | MediaFormat::Avif
            | MediaFormat::WebP
            | MediaFormat::Tiff
            | MediaFormat::Gif
            | MediaFormat::Raw(_) => MediaType::Image,
            MediaFormat::QuickTime
            | MediaFormat::Mp4
            | MediaFormat::Matroska
            | MediaFormat::Avi
            | MediaFormat::MpegTs
            | MediaFormat::Mpeg => MediaType::Video,
        }
    }

    /// The format an extension names (any case), if the Worker reads it.
    pub fn by_extension(ext: &str) -> Option<MediaFormat> {
        EXTENSIONS.iter().find(|(e, _)| e.eq_ignore_ascii_case(ext)).map(|(_, f)| *f)
    }

    /// Whether a file's first bytes are this format's (or a format it is commonly confused with under this
    /// extension, see [`detect_format`]).
    fn signature_matches(self, head: &[u8]) -> bool {
        let at = |offset: usize, bytes: &[u8]| head.get(offset..offset + bytes.len()) == Some(bytes);
        let tiff = at(0, b"II*\0") || at(0, b"MM\0*");
        let riff = |kind: &[u8]| at(0, b"RIFF") && at(8, kind);
        match self {
            MediaFormat::Jpeg => at(0, &[0xFF, 0xD8, 0xFF]),
            MediaFormat::Png => at(0, b"\x89PNG\r\n\x1a\n"),
            MediaFormat::Heic | MediaFormat::Avif => is_heif(head),
            MediaFormat::WebP => riff(b"WEBP"),
            MediaFormat::Tiff => tiff,
            MediaFormat::Gif => at(0, b"GIF87a") || at(0, b"GIF89a"),
            MediaFormat::Raw(RawFormat::Dng | RawFormat::Cr2 | RawFormat::Nef | RawFormat::Arw) => tiff,
            MediaFormat::Raw(RawFormat::Orf) => at(0, b"IIRO") || at(0, b"IIRS") || at(0, b"MMOR"),
            MediaFormat::Raw(RawFormat::Rw2) => at(0, b"IIU\0"),
            MediaFormat::Raw(RawFormat::Raf) => at(0, b"FUJIFILMCCD-RAW"),
            MediaFormat::Raw(RawFormat::Cr3) => ftyp_brand(head) == Some(*b"crx "),
            // Containers are often misnamed between .mov and .mp4: both are read by their content.
            MediaFormat::QuickTime | MediaFormat::Mp4 => {
                matches!(ftyp_brand(head), Some(b) if !HEIF_BRANDS.contains(&b) && &b != b"crx ")
                    || matches!(head.get(4..8), Some(b"moov" | b"wide" | b"mdat" | b"free" | b"skip"))
            }
            MediaFormat::Matroska => at(0, &[0x1A, 0x45, 0xDF, 0xA3]),
            MediaFormat::Avi => riff(b"AVI "),
            // A transport stream's sync byte in two packets running: 188 bytes apart from the start (TS), or
            // 192 bytes apart after a 4-byte timestamp (M2TS, AVCHD's MTS). One byte alone is a letter `G`.
            MediaFormat::MpegTs => {
                (head.first() == Some(&0x47) && head.get(188) == Some(&0x47))
                    || (head.get(4) == Some(&0x47) && head.get(196) == Some(&0x47))
            }
            MediaFormat::Mpeg => at(0, &[0, 0, 1, 0xBA]) || at(0, &[0, 0, 1, 0xB3]),
        }
    }
}

/// ISO base media brands of HEIF images (HEIC and AVIF alike: libheif reads both).
const HEIF_BRANDS: [[u8; 4]; 12] = [
    *b"heic", *b"heix", *b"hevc", *b"hevx", *b"mif1", *b"mif2", *b"miaf", *b"msf1", *b"heim", *b"heis", *b"avif",
    *b"avis",
];

fn ftyp_brand(head: &[u8]) -> Option<[u8; 4]> {
    (head.get(4..8) == Some(b"ftyp")).then(|| head.get(8..12)?.try_into().ok()).flatten()
}

/// Whether a file starting with `head` is a HEIF (HEIC or AVIF) by its signature, whatever its name.
pub(crate) fn is_heif(head: &[u8]) -> bool {
    matches!(ftyp_brand(head), Some(brand) if HEIF_BRANDS.contains(&brand))
}

/// Bytes needed from the start of a file for [`detect_format`] (a transport stream's second packet).
pub const MAGIC_LEN: usize = 200;

/// Still formats recognisable by their content alone, for a still under another still's extension.
const STILLS_BY_CONTENT: [MediaFormat; 6] =
    [MediaFormat::Jpeg, MediaFormat::Png, MediaFormat::Heic, MediaFormat::WebP, MediaFormat::Gif, MediaFormat::Tiff];

/// Whether a file name has an extension the Worker reads (the walk's first filter; the content decides).
pub fn is_media_name(name: &std::ffi::OsStr) -> bool {
    format_by_name(std::os::unix::ffi::OsStrExt::as_bytes(name)).is_some()
}

/// The format a file name's extension names: what follows its last dot, when something precedes that dot (as
/// `Path::extension` reads it), on the bytes, since the walk asks this of every file in the library.
fn format_by_name(name: &[u8]) -> Option<MediaFormat> {
    match name.iter().rposition(|b| *b == b'.') {
        Some(dot) if dot > 0 => std::str::from_utf8(&name[dot + 1..]).ok().and_then(MediaFormat::by_extension),
        _ => None,
    }
}

/// Decides a file's format by its extension, then confirms it by its first bytes: a file whose content does
/// not match is not media (a `.jpg` that is really a text file). A `.mov` holding an MP4 (or the reverse) is
/// read as what it holds; a `.heic` holding AVIF (or the reverse) too, since one tool reads both; and a still
/// named as another still (a `.jpg` that is really a PNG or a HEIC, as downloads and transfers leave them) is
/// read as what it holds.
pub fn detect_format(path: &Path, head: &[u8]) -> Option<MediaFormat> {
    let by_name = format_by_name(std::os::unix::ffi::OsStrExt::as_bytes(path.file_name()?))?;
    if !by_name.signature_matches(head) {
        // Not for a RAW name: a RAW is TIFF-shaped, and decoding one as a plain TIFF would make a wrong picture.
        return match by_name {
            MediaFormat::Raw(_) => None,
            _ if by_name.media_type() == MediaType::Image => {
                STILLS_BY_CONTENT.into_iter().find(|f| f.signature_matches(head))
            }
            _ => None,
        };
    }
    Some(match by_name {
        MediaFormat::QuickTime | MediaFormat::Mp4 => {
            if ftyp_brand(head) == Some(*b"qt  ") || ftyp_brand(head).is_none() {
                MediaFormat::QuickTime
            } else {
                MediaFormat::Mp4
            }
        }
        other => other,
    })
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
        assert_eq!(detect_format(Path::new("a.png"), &jpeg), Some(MediaFormat::Jpeg), "a still named as another");
        assert_eq!(detect_format(Path::new("a.jpg"), &ftyp(b"heic")), Some(MediaFormat::Heic));
        assert_eq!(detect_format(Path::new("a.mp4"), &jpeg), None, "a video name never holds a still");
        assert_eq!(detect_format(Path::new("a.txt"), &jpeg), None);
        assert_eq!(detect_format(Path::new("noext"), &jpeg), None);
        assert_eq!(detect_format(Path::new("a.png"), b"\x89PNG\r\n\x1a\n...."), Some(MediaFormat::Png));
        assert_eq!(detect_format(Path::new("a.HEIC"), &ftyp(b"heic")), Some(MediaFormat::Heic));
        assert_eq!(detect_format(Path::new("a.heic"), &ftyp(b"mif1")), Some(MediaFormat::Heic));
        assert_eq!(detect_format(Path::new("a.avif"), &ftyp(b"avif")), Some(MediaFormat::Avif));
        assert_eq!(detect_format(Path::new("a.mov"), &ftyp(b"qt  ")), Some(MediaFormat::QuickTime));
        assert_eq!(detect_format(Path::new("a.qt"), &ftyp(b"qt  ")), Some(MediaFormat::QuickTime));
        assert_eq!(detect_format(Path::new("a.mov"), &ftyp(b"isom")), Some(MediaFormat::Mp4));
        assert_eq!(detect_format(Path::new("a.mp4"), &ftyp(b"qt  ")), Some(MediaFormat::QuickTime));
        assert_eq!(detect_format(Path::new("a.3gp"), &ftyp(b"3gp4")), Some(MediaFormat::Mp4));
        assert_eq!(detect_format(Path::new("a.mp4"), &ftyp(b"heic")), None);
        assert_eq!(detect_format(Path::new("a.mov"), &ftyp(b"crx ")), None);
        assert_eq!(detect_format(Path::new("a.CR3"), &ftyp(b"crx ")), Some(MediaFormat::Raw(RawFormat::Cr3)));
        assert_eq!(detect_format(Path::new("a.mov"), b"\0\0\0\x08wide\0\0"), Some(MediaFormat::QuickTime));
        assert_eq!(detect_format(Path::new("a.jpg"), &[]), None);
    }

    #[test]
    fn every_format_by_its_signature() {
        let cases: [(&str, &[u8], MediaFormat); 15] = [
            ("a.webp", b"RIFF\0\0\0\0WEBPVP8 ", MediaFormat::WebP),
            ("a.tif", b"II*\0\x08\0\0\0", MediaFormat::Tiff),
            ("a.tiff", b"MM\0*\0\0\0\x08", MediaFormat::Tiff),
            ("a.gif", b"GIF89a\x01\0", MediaFormat::Gif),
            ("a.dng", b"II*\0\x08\0\0\0", MediaFormat::Raw(RawFormat::Dng)),
            ("a.cr2", b"II*\0\x10\0\0\0CR\x02\0", MediaFormat::Raw(RawFormat::Cr2)),
            ("a.nef", b"MM\0*\0\0\0\x08", MediaFormat::Raw(RawFormat::Nef)),
            ("a.arw", b"II*\0\x08\0\0\0", MediaFormat::Raw(RawFormat::Arw)),
            ("a.orf", b"IIRO\x08\0\0\0", MediaFormat::Raw(RawFormat::Orf)),
            ("a.rw2", b"IIU\0\x08\0\0\0", MediaFormat::Raw(RawFormat::Rw2)),
            ("a.raf", b"FUJIFILMCCD-RAW 0201", MediaFormat::Raw(RawFormat::Raf)),
            ("a.mkv", b"\x1a\x45\xdf\xa3\x01\0", MediaFormat::Matroska),
            ("a.webm", b"\x1a\x45\xdf\xa3\x01\0", MediaFormat::Matroska),
            ("a.avi", b"RIFF\0\0\0\0AVI LIST", MediaFormat::Avi),
            ("a.mpg", b"\0\0\x01\xba\x44\0", MediaFormat::Mpeg),
        ];
        for (name, head, format) in cases {
            assert_eq!(detect_format(Path::new(name), head), Some(format), "{name}");
            assert!(is_media_name(std::ffi::OsStr::new(name)), "{name}");
        }
        let mut m2ts = vec![0u8; 400];
        m2ts[4] = 0x47;
        m2ts[196] = 0x47;
        assert_eq!(detect_format(Path::new("a.MTS"), &m2ts), Some(MediaFormat::MpegTs));
        let mut ts = vec![0u8; 400];
        ts[0] = 0x47;
        ts[188] = 0x47;
        assert_eq!(detect_format(Path::new("a.m2ts"), &ts), Some(MediaFormat::MpegTs));
        let typescript = b"let G = 1;\nimport { readFile } from 'node:fs/promises';\n\
            export async function load(path: string): Promise<string> {\n  return readFile(path, 'utf8');\n}\n\
            export const VERSION = '1.0.0';\nexport default load;\n";
        assert_eq!((typescript[4], typescript.len() > 200), (b'G', true));
        assert_eq!(detect_format(Path::new("module.mts"), typescript), None, "TypeScript's .mts is not a video");
        assert_eq!(detect_format(Path::new("a.MTS"), &m2ts[..100]), None, "one packet is not enough");
        // The same bytes under another format's extension are refused.
        assert_eq!(detect_format(Path::new("a.webp"), b"RIFF\0\0\0\0AVI LIST"), None, "a video is not a still");
        assert_eq!(detect_format(Path::new("a.avi"), b"RIFF\0\0\0\0WEBPVP8 "), None);
        assert_eq!(detect_format(Path::new("a.orf"), b"II*\0\x08\0\0\0"), None);
        assert_eq!(detect_format(Path::new("a.gif"), b"GIF90a"), None);
        assert!(!is_media_name(std::ffi::OsStr::new("a.xmp")));
        assert!(!is_media_name(std::ffi::OsStr::new("a.txt")));
    }

    #[test]
    fn a_media_name_is_told_by_the_extension_a_path_would_have() {
        let names = [
            ("a.jpg", true),
            ("A.JPG", true),
            ("a.tar.heic", true),
            ("..jpg", true),
            ("IMG_1.jpg.txt", false),
            (".jpg", false),
            ("jpg", false),
            ("a.", false),
            ("a.jpeg.", false),
            ("", false),
        ];
        for (name, media) in names {
            let by_path = Path::new(name).extension().and_then(|e| e.to_str()).and_then(MediaFormat::by_extension);
            assert_eq!((is_media_name(std::ffi::OsStr::new(name)), by_path.is_some()), (media, media), "{name:?}");
        }
        // An extension that is not UTF-8 is none of ours.
        assert!(!is_media_name(std::os::unix::ffi::OsStrExt::from_bytes(b"a.jp\xff")));
    }

    #[test]
    fn formats_know_their_media_type() {
        for (ext, format) in EXTENSIONS {
            let video = ["mov", "qt", "mp4", "m4v", "3gp", "3g2", "mkv", "webm", "avi", "mts", "m2ts", "mpg", "mpeg"];
            let expected = if video.contains(ext) { MediaType::Video } else { MediaType::Image };
            assert_eq!(format.media_type(), expected, "{ext}");
        }
    }
}
