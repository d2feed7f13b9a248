//! CMYK and YCCK JPEGs (print and scanner exports, Photoshop's "CMYK" saves): TurboJPEG decodes them only to CMYK
//! pixels, and turns no CMYK into RGB, so each failed with "Unsupported color conversion request". They are decoded
//! to CMYK and made RGB here, the naive conversion every viewer without colour management makes (no profile is
//! applied, as none is for RGB photos either).

/// Whether a JPEG's pixels are CMYK (stored as CMYK or YCCK): decoded by [`decode_as_rgb`].
pub(crate) fn is_cmyk(colorspace: turbojpeg::Colorspace) -> bool {
    matches!(colorspace, turbojpeg::Colorspace::CMYK | turbojpeg::Colorspace::YCCK)
}

/// The CMYK JPEG `bytes` decoded at `w` × `h`, as RGB. Adobe's programs, which write nearly all of them, store the
/// inks inverted (255 is no ink) and say so with an `Adobe` APP14 segment; without one the inks are as they are.
pub(crate) fn decode_as_rgb(
    decompressor: &mut turbojpeg::Decompressor,
    bytes: &[u8],
    w: u32,
    h: u32,
) -> Result<Vec<u8>, turbojpeg::Error> {
    let cmyk = crate::still::decode_pixels(decompressor, bytes, w, h, turbojpeg::PixelFormat::CMYK)?;
    let inverted = crate::jpeg_scans::markers(bytes).any(|(marker, s)| marker == 0xEE && s.get(2..7) == Some(b"Adobe"));
    let ink = |v: u8| u32::from(if inverted { v } else { 255 - v });
    Ok(cmyk
        .chunks_exact(4)
        .flat_map(|p| {
            let k = ink(p[3]);
            [ink(p[0]), ink(p[1]), ink(p[2])].map(|c| (c * k / 255) as u8)
        })
        .collect())
}
