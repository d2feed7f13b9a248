use std::path::Path;

use almanac_domain::{ProxyType, ports::HEIC_SCRATCH_PREFIX};
use fast_image_resize::{FilterType, ResizeAlg, ResizeOptions, Resizer};
use image::{RgbImage, imageops};

use std::ffi::OsString;

use tokio_util::sync::CancellationToken;

use crate::decode_guard;
use crate::detect::MediaFormat;
use crate::error::Picture;
use crate::exif_facts::orientation_degrees;
use crate::jpeg_scans::{self, MOST_JPEG_SCANS};
use crate::proxy_folder::{ProxyFolder, Scratch};
use crate::tool::Given;
use crate::tool::{OPEN_ORIGINAL, run_tool};
use crate::video::tool_input;
use crate::{MediaError, Original, ToolLimits};

/// Long side of the preview, in pixels.
pub const PREVIEW_LONG_SIDE: u32 = 1920;
/// Long side of the thumbnail, in pixels.
pub const THUMBNAIL_LONG_SIDE: u32 = 300;
const PREVIEW_QUALITY: i32 = 85;
const THUMBNAIL_QUALITY: i32 = 75;
const BLURHASH_SIDE: u32 = 32;

/// What making a still's proxies produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StillProxies {
    /// The original's stored width, in pixels (before orientation).
    pub width: u32,
    /// The original's stored height.
    pub height: u32,
    /// Size of `preview.jpg`.
    pub preview_bytes: u64,
    /// Size of `thumbnail.jpg`.
    pub thumbnail_bytes: u64,
    /// The BlurHash (4×3 components).
    pub blurhash: String,
}

/// The default limit on a still's pixel count (setting `storage.max_image_megapixels`): above a 200 MP phone
/// sensor, far below a decompression bomb's 60,000 × 60,000.
pub const DEFAULT_MAX_PIXELS: u64 = 250_000_000;

/// Decodes a still once (downscaled during decode for JPEG; a RAW arrives as its embedded preview, a JPEG),
/// turns it upright per `orientation` (the original's, [`crate::ExifFacts::orientation`]), and writes
/// `preview.jpg` and `thumbnail.jpg` (the thumbnail made from the preview) into `folder`. Returns the
/// original's stored dimensions and the BlurHash. A header claiming more than `max_pixels` pixels is refused
/// before anything is decoded. At the Worker's low priority ([`crate::gently`]). Blocking: call it from a
/// blocking thread.
///
/// A HEIC or AVIF arrives as the JPEG [`heic_to_jpeg`] made of it, with its own `format` ([`MediaFormat::Heic`],
/// [`MediaFormat::Avif`]): libheif turned that JPEG upright as it decoded, so `orientation` is not applied to it
/// again, only used to give back the stored dimensions (the JPEG's, exchanged for a quarter turn).
pub fn make_still_proxies(
    path: &Path,
    content: &[u8],
    format: MediaFormat,
    orientation: u16,
    max_pixels: u64,
    folder: &ProxyFolder,
) -> Result<StillProxies, MediaError> {
    crate::gently(|| make_still_proxies_now(path, content, format, orientation, max_pixels, folder))
}

fn make_still_proxies_now(
    path: &Path,
    content: &[u8],
    format: MediaFormat,
    orientation: u16,
    max_pixels: u64,
    folder: &ProxyFolder,
) -> Result<StillProxies, MediaError> {
    let (decoded, width, height) = match format {
        MediaFormat::Jpeg => decode_jpeg_for(path, content, PREVIEW_LONG_SIDE, max_pixels)?,
        MediaFormat::Png => decode_with_image(path, content, image::ImageFormat::Png, max_pixels)?,
        MediaFormat::WebP => decode_with_image(path, content, image::ImageFormat::WebP, max_pixels)?,
        MediaFormat::Tiff => decode_with_image(path, content, image::ImageFormat::Tiff, max_pixels)?,
        MediaFormat::Gif => decode_with_image(path, content, image::ImageFormat::Gif, max_pixels)?,
        MediaFormat::Heic | MediaFormat::Avif => {
            let (upright, w, h) = decode_jpeg_for(path, content, PREVIEW_LONG_SIDE, max_pixels)?;
            // The stored sides, as every still's are recorded: exchanged back when the turn was a quarter turn.
            if orientation_degrees(orientation) % 180 == 90 { (upright, h, w) } else { (upright, w, h) }
        }
        MediaFormat::Raw(_) => {
            return Err(MediaError::corrupt(path, "a RAW file passes its embedded preview (raw_preview), as a JPEG"));
        }
        MediaFormat::QuickTime
        | MediaFormat::Mp4
        | MediaFormat::Matroska
        | MediaFormat::Avi
        | MediaFormat::MpegTs
        | MediaFormat::Mpeg => {
            return Err(MediaError::corrupt(path, "a video is not a still"));
        }
    };
    // Scaled first, then turned: the long side is the same either way, and turning the smaller image is cheaper.
    let preview = apply_orientation(fit_owned(decoded, PREVIEW_LONG_SIDE), left_to_turn(format, orientation));
    let preview_jpeg = encode_jpeg(path, &preview, PREVIEW_QUALITY)?;
    let thumbnail = fit(&preview, THUMBNAIL_LONG_SIDE);
    let thumbnail_jpeg = encode_jpeg(path, &thumbnail, THUMBNAIL_QUALITY)?;
    let blurhash = blurhash_of(path, &fit(&thumbnail, BLURHASH_SIDE))?;
    write_proxy_jpegs(path, folder, &[(ProxyType::Preview, &preview_jpeg), (ProxyType::Thumbnail, &thumbnail_jpeg)])?;
    Ok(StillProxies {
        width,
        height,
        preview_bytes: preview_jpeg.len() as u64,
        thumbnail_bytes: thumbnail_jpeg.len() as u64,
        blurhash,
    })
}

/// The turn still to give the pixels [`make_still_proxies`] decodes of a still of `format` whose orientation is
/// `orientation`: none for a HEIC or AVIF, whose JPEG libheif turned upright already (it applies `irot` and `imir`
/// as it decodes; turning it again by the same orientation turned iPhone portraits on their side), the whole
/// `orientation` for every other still.
fn left_to_turn(format: MediaFormat, orientation: u16) -> u16 {
    if matches!(format, MediaFormat::Heic | MediaFormat::Avif) { 1 } else { orientation }
}

/// Refuses dimensions that are empty or larger than the limit, before any pixel is decoded.
fn check_pixels(path: &Path, width: u32, height: u32, max_pixels: u64) -> Result<(), MediaError> {
    let pixels = u64::from(width) * u64::from(height);
    if pixels == 0 {
        return Err(MediaError::corrupt(path, format!("the image claims {width}x{height} pixels")));
    }
    if pixels > max_pixels {
        return Err(MediaError::too_many_pixels(path, Picture::Image, width, height, max_pixels));
    }
    Ok(())
}

/// PNG, WebP, TIFF and GIF (its first frame) through the `image` crate: the header's dimensions are checked
/// against the limit first, and the decoder's own allocation limit follows from it.
fn decode_with_image(
    path: &Path,
    content: &[u8],
    format: image::ImageFormat,
    max_pixels: u64,
) -> Result<(RgbImage, u32, u32), MediaError> {
    let content = decode_guard::bounded(path, content, format)?;
    let reader = || image::ImageReader::with_format(std::io::Cursor::new(content.as_ref()), format);
    let (w, h) = reader().into_dimensions().map_err(|e| MediaError::corrupt(path, e))?;
    check_pixels(path, w, h, max_pixels)?;
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(w);
    limits.max_image_height = Some(h);
    // Room for 16-bit RGBA, the widest pixels these decoders produce.
    limits.max_alloc = Some(max_pixels.saturating_mul(8));
    let mut decoder = reader();
    decoder.limits(limits);
    let image = decoder.decode().map_err(|e| MediaError::corrupt(path, e))?.to_rgb8();
    Ok((image, w, h))
}

/// Writes a still's JPEG proxies into `folder` (for the original `path`), each only if it is a whole JPEG
/// ([`check_jpeg`]) and then through [`ProxyFolder::write_proxies`] (written, flushed, read back, renamed): a JPEG
/// cut short never takes a proxy's name, and when one is refused none is written.
pub(crate) fn write_proxy_jpegs(
    path: &Path,
    folder: &ProxyFolder,
    jpegs: &[(ProxyType, &[u8])],
) -> Result<(), MediaError> {
    for (proxy, bytes) in jpegs {
        check_jpeg(bytes).map_err(|reason| MediaError::ProxyNotMade {
            path: path.to_owned(),
            proxy: *proxy,
            dir: folder.path().to_owned(),
            reason: format!("the JPEG made of it is not whole ({reason})"),
        })?;
    }
    folder.write_proxies(jpegs)
}

/// Whether `bytes` are a whole JPEG: the start and end markers are there, and it decodes to its end without
/// an error or a warning (libjpeg-turbo reports a premature end as a warning, which TurboJPEG returns as an
/// error). Decoded at 1/8 scale: every byte of the image is still read, few pixels are made. Says what is
/// wrong otherwise.
pub(crate) fn check_jpeg(bytes: &[u8]) -> Result<(), String> {
    const START: [u8; 2] = [0xFF, 0xD8];
    const END: [u8; 2] = [0xFF, 0xD9];
    if !bytes.starts_with(&START) {
        return Err(format!("its {} bytes do not start like a JPEG", bytes.len()));
    }
    if !bytes.ends_with(&END) {
        return Err(format!("it stops after {} bytes, before the JPEG's end marker: it was cut short", bytes.len()));
    }
    let mut decompressor = turbojpeg::Decompressor::new().map_err(|e| e.to_string())?;
    let header = decompressor.read_header(bytes).map_err(|e| format!("its header does not read: {e}"))?;
    let (w, h) = jpeg_scale(header.width as u32, header.height as u32, 1);
    decode_rgb(&mut decompressor, bytes, w, h).map(drop).map_err(|e| format!("it does not decode to its end: {e}"))
}

/// Decodes `bytes` into RGB pixels of `w`×`h`, a size [`jpeg_scale`] gave for this JPEG.
fn decode_rgb(
    decompressor: &mut turbojpeg::Decompressor,
    bytes: &[u8],
    w: u32,
    h: u32,
) -> Result<Vec<u8>, turbojpeg::Error> {
    decode_pixels(decompressor, bytes, w, h, turbojpeg::PixelFormat::RGB)
}

/// Decodes `bytes` into pixels of `format` of `w`×`h`, a size [`jpeg_scale`] gave for this JPEG.
pub(crate) fn decode_pixels(
    decompressor: &mut turbojpeg::Decompressor,
    bytes: &[u8],
    w: u32,
    h: u32,
    format: turbojpeg::PixelFormat,
) -> Result<Vec<u8>, turbojpeg::Error> {
    let mut pixels = vec![0u8; format.size() * w as usize * h as usize];
    let image = turbojpeg::Image {
        pixels: pixels.as_mut_slice(),
        width: w as usize,
        pitch: format.size() * w as usize,
        height: h as usize,
        format,
    };
    decompressor.decompress(bytes, image)?;
    Ok(pixels)
}

pub(crate) fn file_name(proxy: ProxyType) -> &'static str {
    proxy.file_name().expect("file proxies have file names")
}

/// The smallest DCT scaling (m/8) whose result still covers `long_side`, as libjpeg-turbo computes it.
pub(crate) fn jpeg_scale(width: u32, height: u32, long_side: u32) -> (u32, u32) {
    let scaled = |d: u32, m: u32| (d * m).div_ceil(8);
    (1..=8)
        .map(|m| (scaled(width, m), scaled(height, m)))
        .find(|(w, h)| (*w).max(*h) >= long_side)
        .unwrap_or((width, height))
}

/// Decodes a JPEG at the smallest DCT scale that still covers `long_side`. Returns the image and the
/// original's full dimensions.
fn decode_jpeg_for(
    path: &Path,
    content: &[u8],
    long_side: u32,
    max_pixels: u64,
) -> Result<(RgbImage, u32, u32), MediaError> {
    let mut decompressor = turbojpeg::Decompressor::new().map_err(|e| MediaError::corrupt(path, e))?;
    let header = decompressor.read_header(content).map_err(|e| MediaError::corrupt(path, e))?;
    let (full_w, full_h) = (header.width as u32, header.height as u32);
    check_pixels(path, full_w, full_h, max_pixels)?;
    if jpeg_scans::scans(content, MOST_JPEG_SCANS) > MOST_JPEG_SCANS {
        return Err(MediaError::corrupt(
            path,
            format!(
                "it is a JPEG drawn in more than {MOST_JPEG_SCANS} scans, far more than any camera or program writes; \
                 its decode could take minutes, so it was not decoded"
            ),
        ));
    }
    let (w, h) = jpeg_scale(full_w, full_h, long_side);
    let pixels = if crate::cmyk::is_cmyk(header.colorspace) {
        crate::cmyk::decode_as_rgb(&mut decompressor, content, w, h)
    } else {
        decode_rgb(&mut decompressor, content, w, h)
    };
    let pixels = pixels.map_err(|e| MediaError::corrupt(path, e))?;
    let image = RgbImage::from_raw(w, h, pixels).ok_or_else(|| MediaError::corrupt(path, "short pixel buffer"))?;
    Ok((image, full_w, full_h))
}

/// Turns stored pixels upright per EXIF orientation 1–8.
pub(crate) fn apply_orientation(image: RgbImage, orientation: u16) -> RgbImage {
    match orientation {
        2 => imageops::flip_horizontal(&image),
        3 => imageops::rotate180(&image),
        4 => imageops::flip_vertical(&image),
        5 => imageops::flip_horizontal(&imageops::rotate90(&image)),
        6 => imageops::rotate90(&image),
        7 => imageops::flip_horizontal(&imageops::rotate270(&image)),
        8 => imageops::rotate270(&image),
        _ => image,
    }
}

/// [`fit`], keeping the image itself (no copy) when it is small enough already.
fn fit_owned(image: RgbImage, long_side: u32) -> RgbImage {
    if image.width().max(image.height()) <= long_side { image } else { fit(&image, long_side) }
}

/// Scales down so the long side is at most `long_side`; smaller images are kept as they are.
fn fit(image: &RgbImage, long_side: u32) -> RgbImage {
    let (w, h) = image.dimensions();
    if w.max(h) <= long_side {
        return image.clone();
    }
    let (nw, nh) = if w >= h {
        (long_side, ((u64::from(h) * u64::from(long_side)) / u64::from(w)).max(1) as u32)
    } else {
        (((u64::from(w) * u64::from(long_side)) / u64::from(h)).max(1) as u32, long_side)
    };
    let mut out = RgbImage::new(nw, nh);
    let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::CatmullRom));
    Resizer::new().resize(image, &mut out, &options).expect("same pixel type, non-empty sizes");
    out
}

fn encode_jpeg(path: &Path, image: &RgbImage, quality: i32) -> Result<Vec<u8>, MediaError> {
    let bytes = turbojpeg::compress_image(image, quality, turbojpeg::Subsamp::Sub2x2).map_err(|e| {
        MediaError::Tool { tool: "libjpeg-turbo", path: path.to_owned(), message: e.to_string(), signal: None }
    })?;
    Ok(bytes.to_vec())
}

fn blurhash_of(path: &Path, tiny: &RgbImage) -> Result<String, MediaError> {
    let rgba: Vec<u8> = tiny.pixels().flat_map(|p| [p[0], p[1], p[2], 255]).collect();
    blurhash::encode(4, 3, tiny.width(), tiny.height(), &rgba).map_err(|e| MediaError::corrupt(path, format!("{e:?}")))
}

/// libheif's Rust bindings need libheif 1.17 or newer and Debian has 1.15, so HEIC goes through libheif's own
/// `heif-convert` tool, which reads the open original (never its path) and writes a temporary JPEG into `folder`'s
/// scratch folder (through its handle, never its path: [`ProxyFolder::scratch`]), removed afterwards. Like ffmpeg,
/// it runs in a process group of its own with a time limit and is killed with its tree on cancellation. Returns the
/// JPEG of the file's primary image, upright (libheif applies its `irot` and `imir` as it decodes), for
/// [`make_still_proxies`] with the file's own format.
///
/// `content` is the file's content, from which the size its images claim is read first: a file with an image
/// of more than `max_pixels` is refused before `heif-convert` runs, as any still is before it is decoded.
pub async fn heic_to_jpeg(
    original: &Original,
    content: &[u8],
    max_pixels: u64,
    folder: &ProxyFolder,
    limits: ToolLimits,
    cancel: &CancellationToken,
) -> Result<Vec<u8>, MediaError> {
    let path = original.path();
    if let Some((width, height)) = crate::heif_size::largest_image(content) {
        check_pixels(path, width, height, max_pixels)?;
    }
    // Into the scratch folder, which nobody else may write (a link at its output's name would be written through),
    // and which takes with it, when dropped, what it wrote: its JPEG, or one for each image of a file of several, and
    // the auxiliary images (depth, alpha) it may write beside them.
    let scratch = folder.scratch()?;
    let args = vec!["-q".into(), "95".into(), OsString::from(OPEN_ORIGINAL), scratch.for_tool(HEIC_SCRATCH)];
    let given = Given { stdin: Some(tool_input(original)?), folder: Some(&scratch) };
    match run_tool("heif-convert", "libheif-examples", args, given, path, limits.quick, cancel).await {
        Ok(_) => converted_primary(&scratch, original, limits, cancel).await,
        // As heif-convert said it: it writes into the proxy volume, so its failure may be the volume's (full) or
        // the machine's (killed for memory), not the file's.
        Err(e) => Err(e),
    }
}

/// The JPEG `heif-convert` wrote of the file's primary image. For a file of one image it is [`HEIC_SCRATCH`]; for a
/// file of several (a burst, a bracket, an image kept with its edit) it writes one for each, numbered in the file's
/// order (`.heic-decode-1.jpg`, …), and the primary is the one `heif-info` marks so, listing them in that same order.
async fn converted_primary(
    folder: &Scratch<'_>,
    original: &Original,
    limits: ToolLimits,
    cancel: &CancellationToken,
) -> Result<Vec<u8>, MediaError> {
    match folder.read(HEIC_SCRATCH).await {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        read => return read.map_err(|e| MediaError::io(folder.join(HEIC_SCRATCH), e)),
    }
    let path = original.path();
    let args = vec![OsString::from(OPEN_ORIGINAL)];
    let given = Given::input(tool_input(original)?);
    let info = run_tool("heif-info", "libheif-examples", args, given, path, limits.quick, cancel).await?;
    let n = primary_position(&String::from_utf8_lossy(&info)).ok_or_else(|| {
        MediaError::corrupt(path, "heif-convert wrote no image of it, and heif-info names none of its images primary")
    })?;
    let numbered = format!("{HEIC_SCRATCH_PREFIX}-{n}.jpg");
    folder.read(&numbered).await.map_err(|e| MediaError::io(folder.join(&numbered), e))
}

/// Where `heif-info` lists the primary image among the file's top-level images, counting from 1.
fn primary_position(info: &str) -> Option<usize> {
    info.lines().filter(|l| l.starts_with("image:")).position(|l| l.trim_end().ends_with(", primary")).map(|i| i + 1)
}

/// The temporary JPEG `heif-convert` writes (its auxiliary images share the prefix).
const HEIC_SCRATCH: &str = ".heic-decode.jpg";

#[cfg(test)]
mod tests {
    use super::*;

    /// heif-info's top-level images in order; the primary's place among them, wherever it is.
    #[test]
    fn the_primary_image_is_found_where_heif_info_lists_it() {
        let info = |first: &str, second: &str| {
            format!(
                "MIME type: image/heic\nmain brand: heic\n\nimage: 64x48 (id=2){first}\n  color profile: no\n\
                 metadata:\n  none\nimage: 80x60 (id=4){second}\n  alpha channel: no \n"
            )
        };
        assert_eq!(primary_position(&info(", primary", "")), Some(1));
        assert_eq!(primary_position(&info("", ", primary")), Some(2));
        assert_eq!(primary_position(&info("", "")), None);
    }

    #[test]
    fn a_jpeg_cut_short_or_damaged_is_not_whole() {
        let jpeg = crate::fixtures::jpeg(640, 480, 3, true, &crate::fixtures::FixtureExif::default());
        assert_eq!(check_jpeg(&jpeg), Ok(()));
        let cut = check_jpeg(&jpeg[..jpeg.len() / 2]).unwrap_err();
        assert!(cut.contains("cut short"), "{cut}");
        // The end marker put back on a JPEG cut short: the decoder finds the image data missing.
        let patched = [&jpeg[..jpeg.len() / 2], &[0xFF, 0xD9]].concat();
        let missing = check_jpeg(&patched).unwrap_err();
        assert!(missing.contains("does not decode to its end"), "{missing}");
        assert!(check_jpeg(b"\x89PNG").unwrap_err().contains("do not start like a JPEG"));
    }

    #[test]
    fn a_still_proxy_that_is_not_a_whole_jpeg_never_takes_its_name_nor_does_its_sibling() {
        let dir = tempfile::tempdir().unwrap();
        let folder = crate::fixtures::proxy_folder(dir.path());
        let preview = crate::fixtures::jpeg(640, 480, 3, true, &crate::fixtures::FixtureExif::default());
        let thumbnail = crate::fixtures::jpeg(300, 225, 3, true, &crate::fixtures::FixtureExif::default());
        let cut = &preview[..preview.len() - 100];
        let jpegs = [(ProxyType::Preview, cut), (ProxyType::Thumbnail, thumbnail.as_slice())];
        let err = write_proxy_jpegs(Path::new("IMG_1.jpg"), &folder, &jpegs).unwrap_err();
        assert!(matches!(err, MediaError::ProxyNotMade { proxy: ProxyType::Preview, .. }), "{err:?}");
        assert!(err.to_string().contains("IMG_1.jpg") && err.to_string().contains("cut short"), "{err}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing written, not even a temporary file");

        let whole = [(ProxyType::Preview, preview.as_slice()), (ProxyType::Thumbnail, thumbnail.as_slice())];
        write_proxy_jpegs(Path::new("IMG_1.jpg"), &folder, &whole).unwrap();
        assert_eq!(std::fs::read(dir.path().join("preview.jpg")).unwrap(), preview);
        assert_eq!(std::fs::read(dir.path().join("thumbnail.jpg")).unwrap(), thumbnail);
    }

    #[test]
    fn jpeg_scale_takes_the_smallest_factor_that_covers_the_long_side() {
        // 4000x3000 (12 MP): 4/8 gives 2000x1500, the first to cover 1920.
        assert_eq!(jpeg_scale(4000, 3000, 1920), (2000, 1500));
        assert_eq!(jpeg_scale(3000, 4000, 1920), (1500, 2000));
        // Exactly 1920 at 1/8 scale.
        assert_eq!(jpeg_scale(15360, 100, 1920), (1920, 13));
        // Smaller than the long side: decoded at full size.
        assert_eq!(jpeg_scale(800, 600, 1920), (800, 600));
        assert_eq!(jpeg_scale(1920, 1080, 1920), (1920, 1080));
        assert_eq!(jpeg_scale(1921, 1080, 1920), (1921, 1080));
    }

    #[test]
    fn orientation_turns_pixels_upright() {
        // A 2x1 image: red on the left, blue on the right.
        let mut img = RgbImage::new(2, 1);
        img.put_pixel(0, 0, image::Rgb([255, 0, 0]));
        img.put_pixel(1, 0, image::Rgb([0, 0, 255]));
        let red = image::Rgb([255, 0, 0]);
        let at = |o: u16| {
            let out = apply_orientation(img.clone(), o);
            let pos = out.enumerate_pixels().find(|(_, _, p)| **p == red).map(|(x, y, _)| (x, y)).unwrap();
            (out.dimensions(), pos)
        };
        assert_eq!(at(1), ((2, 1), (0, 0)));
        assert_eq!(at(2), ((2, 1), (1, 0)));
        assert_eq!(at(3), ((2, 1), (1, 0)));
        assert_eq!(at(4), ((2, 1), (0, 0)));
        assert_eq!(at(5), ((1, 2), (0, 0)));
        assert_eq!(at(6), ((1, 2), (0, 0)));
        assert_eq!(at(7), ((1, 2), (0, 1)));
        assert_eq!(at(8), ((1, 2), (0, 1)));
    }

    #[test]
    fn fit_keeps_aspect_and_never_upscales() {
        let img = RgbImage::new(4000, 1000);
        assert_eq!(fit(&img, 1920).dimensions(), (1920, 480));
        let tall = RgbImage::new(1000, 4000);
        assert_eq!(fit(&tall, 300).dimensions(), (75, 300));
        let small = RgbImage::new(100, 50);
        assert_eq!(fit(&small, 300).dimensions(), (100, 50));
        assert_eq!(fit(&RgbImage::new(10_000, 1), 300).dimensions(), (300, 1));
    }
}
