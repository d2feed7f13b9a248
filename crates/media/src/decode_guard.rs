//! What a PNG or GIF may make the decoders in the Worker's own process allocate beyond its pixels, bounded before
//! they see it. Unlike `heif-convert` and ffmpeg, the `image` crate decodes in the Worker, so a file that makes it
//! allocate gigabytes takes the Worker down with it (a small NAS's kernel kills it mid-crawl), and the next crawl
//! reads the same file again.
//!
//! - A PNG's ancillary chunks of compressed text and colour profile (`iCCP`, `zTXt`, `iTXt`, and plain `tEXt`)
//!   are left out before decoding: the `png` crate inflates an `iCCP` whole as it reads the header, bounded only
//!   by the decoder's allocation limit (gigabytes for a large photo's pixels), and 2 MB of deflated zeros inflate
//!   to 2 GiB. No proxy uses them: a colour profile is not applied, and dates are read from the original's bytes.
//! - A GIF whose first frame is larger than its logical screen is refused: the `image` crate checks the screen
//!   against the limits and then allocates the frame at the frame's own size (180 KB of LZW made a 20,000 ×
//!   20,000 frame behind a 1 × 1 screen, 1.6 GB).

use std::borrow::Cow;

/// The PNG chunks left out before decoding.
const PNG_CHUNKS_LEFT_OUT: [&[u8; 4]; 4] = [b"iCCP", b"zTXt", b"iTXt", b"tEXt"];

/// `content` without the PNG chunks no proxy needs ([`PNG_CHUNKS_LEFT_OUT`]), when it is a PNG whose chunks can be
/// walked to their end; otherwise `content` as it is (the decoder then says what is wrong with it).
pub(crate) fn png_without_text_and_profile(content: &[u8]) -> Cow<'_, [u8]> {
    const SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];
    if !content.starts_with(&SIGNATURE) {
        return Cow::Borrowed(content);
    }
    let mut kept = Vec::with_capacity(content.len());
    kept.extend_from_slice(&SIGNATURE);
    let mut at = SIGNATURE.len();
    let mut left_out = false;
    while at < content.len() {
        let Some(header) = content.get(at..at + 8) else { return Cow::Borrowed(content) };
        let length = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        // Length, type, data and CRC.
        let Some(end) = length.checked_add(12).and_then(|n| n.checked_add(at)).filter(|e| *e <= content.len()) else {
            return Cow::Borrowed(content);
        };
        if PNG_CHUNKS_LEFT_OUT.iter().any(|kind| header[4..8] == kind[..]) {
            left_out = true;
        } else {
            kept.extend_from_slice(&content[at..end]);
        }
        at = end;
    }
    if left_out { Cow::Owned(kept) } else { Cow::Borrowed(content) }
}

/// Why a GIF is refused before it is decoded: its first frame lies outside its logical screen (the `image` crate
/// would allocate that frame whatever the screen's size). `None` for a GIF whose first frame fits, or one whose
/// blocks cannot be read (the decoder then says what is wrong).
pub(crate) fn gif_frame_outside_its_screen(content: &[u8]) -> Option<String> {
    let u16_at = |at: usize| content.get(at..at + 2).map(|b| u32::from(u16::from_le_bytes([b[0], b[1]])));
    if !(content.starts_with(b"GIF87a") || content.starts_with(b"GIF89a")) {
        return None;
    }
    let (screen_width, screen_height, packed) = (u16_at(6)?, u16_at(8)?, *content.get(10)?);
    let mut at = 13;
    if packed & 0x80 != 0 {
        at += 3 << ((packed & 0x07) + 1);
    }
    loop {
        match *content.get(at)? {
            // An extension: its label, then sub-blocks up to an empty one.
            0x21 => {
                at += 2;
                loop {
                    let size = usize::from(*content.get(at)?);
                    at += 1 + size;
                    if size == 0 {
                        break;
                    }
                }
            }
            0x2C => {
                let (left, top, width, height) = (u16_at(at + 1)?, u16_at(at + 3)?, u16_at(at + 5)?, u16_at(at + 7)?);
                let fits = left + width <= screen_width && top + height <= screen_height;
                return (!fits).then(|| {
                    format!(
                        "its first frame ({width}x{height} at {left},{top}) lies outside its {screen_width}x\
                         {screen_height} screen"
                    )
                });
            }
            _ => return None,
        }
    }
}

/// `content` as the `image` crate may decode it as `format`: a PNG without the chunks no proxy needs
/// ([`png_without_text_and_profile`]); a GIF refused, naming `path`, when its first frame lies outside its screen
/// ([`gif_frame_outside_its_screen`]); anything else as it is.
pub(crate) fn bounded<'a>(
    path: &std::path::Path,
    content: &'a [u8],
    format: image::ImageFormat,
) -> Result<Cow<'a, [u8]>, crate::MediaError> {
    match format {
        image::ImageFormat::Png => Ok(png_without_text_and_profile(content)),
        image::ImageFormat::Gif => match gif_frame_outside_its_screen(content) {
            Some(why) => Err(crate::MediaError::corrupt(path, format!("{why}; it is not decoded"))),
            None => Ok(Cow::Borrowed(content)),
        },
        _ => Ok(Cow::Borrowed(content)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png_chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
        let mut chunk = (data.len() as u32).to_be_bytes().to_vec();
        chunk.extend_from_slice(kind);
        chunk.extend_from_slice(data);
        chunk.extend_from_slice(&[0; 4]);
        chunk
    }

    /// A real PNG with a colour profile and text: those chunks go, the image decodes as before; a PNG without them,
    /// or one cut short, is left as it is.
    #[test]
    fn a_pngs_text_and_profile_are_left_out_and_its_pixels_kept() {
        let image = image::RgbImage::from_fn(8, 4, |x, y| image::Rgb([x as u8 * 30, y as u8 * 60, 7]));
        let mut plain = Vec::new();
        image.write_to(&mut std::io::Cursor::new(&mut plain), image::ImageFormat::Png).unwrap();
        assert!(matches!(png_without_text_and_profile(&plain), Cow::Borrowed(_)), "nothing to leave out");
        // After IHDR (8 bytes of signature, then 25 of IHDR).
        let extra = [png_chunk(b"iCCP", &[0; 64]), png_chunk(b"zTXt", b"Comment\0\0x"), png_chunk(b"tEXt", b"a\0b")];
        let with = [&plain[..33], &extra.concat(), &plain[33..]].concat();
        let left = png_without_text_and_profile(&with);
        assert_eq!(left.as_ref(), plain.as_slice(), "exactly those chunks left out");
        let decoded = image::load_from_memory_with_format(&left, image::ImageFormat::Png).unwrap().to_rgb8();
        assert_eq!(decoded, image);
        let cut = &with[..with.len() - 5];
        assert_eq!(png_without_text_and_profile(cut).as_ref(), cut, "cut short: as it is");
        assert_eq!(png_without_text_and_profile(b"not a png").as_ref(), b"not a png");
    }

    fn gif(screen: (u16, u16), global_table: bool, frame: (u16, u16, u16, u16)) -> Vec<u8> {
        let mut gif = b"GIF89a".to_vec();
        gif.extend_from_slice(&screen.0.to_le_bytes());
        gif.extend_from_slice(&screen.1.to_le_bytes());
        gif.extend_from_slice(&[if global_table { 0x80 } else { 0 }, 0, 0]);
        if global_table {
            gif.extend_from_slice(&[0; 6]);
        }
        // A graphic control extension and a comment of two sub-blocks before the frame.
        gif.extend_from_slice(&[0x21, 0xF9, 4, 0, 0, 0, 0, 0, 0x21, 0xFE, 2, b'h', b'i', 1, b'!', 0]);
        gif.push(0x2C);
        for v in [frame.0, frame.1, frame.2, frame.3] {
            gif.extend_from_slice(&v.to_le_bytes());
        }
        gif.extend_from_slice(&[0, 2, 2, 0x4C, 0x01, 0, 0x3B]);
        gif
    }

    #[test]
    fn a_gif_whose_first_frame_lies_outside_its_screen_is_refused() {
        assert_eq!(gif_frame_outside_its_screen(&gif((10, 10), true, (0, 0, 10, 10))), None);
        assert_eq!(gif_frame_outside_its_screen(&gif((10, 10), false, (2, 3, 8, 7))), None, "fits exactly");
        let bomb = gif_frame_outside_its_screen(&gif((1, 1), false, (0, 0, 20_000, 20_000))).unwrap();
        assert!(bomb.contains("20000x20000") && bomb.contains("1x1 screen"), "{bomb}");
        assert!(gif_frame_outside_its_screen(&gif((10, 10), true, (5, 0, 6, 10))).is_some(), "one column out");
        assert_eq!(gif_frame_outside_its_screen(&gif((10, 10), true, (0, 0, 10, 10))[..20]), None, "cut short");
        // A real GIF the image crate wrote.
        let frame = image::RgbaImage::from_pixel(6, 5, image::Rgba([1, 2, 3, 255]));
        let mut real = Vec::new();
        image::codecs::gif::GifEncoder::new(&mut real).encode_frame(image::Frame::new(frame)).unwrap();
        assert_eq!(gif_frame_outside_its_screen(&real), None);
    }
}
