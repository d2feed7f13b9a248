//! How many pixels full-size decoders may hold at once: a process-wide budget, so that several large PNG, WebP,
//! TIFF or GIF files decoded side by side (one per concurrent file, in every running crawl) cannot add up past
//! the memory of a small NAS. JPEGs of one scan (and the JPEG heif-convert makes of a HEIC or AVIF) decode scaled
//! and are not charged; a JPEG drawn in several scans (progressive, or one scan a component), a RAW's preview
//! among them, is held whole while it decodes, and is. First come, first served: small images do not starve a
//! large one. A video is charged too, while ffmpeg decodes it for its proxies ([`video_decode_pixels`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::{MediaError, MediaFormat};

/// Permits count whole megapixels.
const PIXELS_PER_PERMIT: u64 = 1_000_000;

/// The pixels full-size decoders may hold at once. Cloning shares the budget.
#[derive(Debug, Clone)]
pub struct PixelBudget {
    permits: Arc<Semaphore>,
    megapixels: u32,
    /// Reservations waiting for pixels to be given back.
    waiting: Arc<AtomicUsize>,
}

/// Pixels reserved from a [`PixelBudget`], given back when dropped.
#[derive(Debug)]
pub struct PixelReservation {
    _permit: Option<OwnedSemaphorePermit>,
}

impl PixelBudget {
    /// A budget of `pixels` (at least one megapixel). With the largest image allowed as the budget, such an
    /// image decodes alone, and smaller ones share.
    pub fn new(pixels: u64) -> Self {
        let megapixels = u32::try_from(pixels.div_ceil(PIXELS_PER_PERMIT)).unwrap_or(u32::MAX).max(1);
        let megapixels = megapixels.min(Semaphore::MAX_PERMITS as u32);
        Self { permits: Arc::new(Semaphore::new(megapixels as usize)), megapixels, waiting: Arc::default() }
    }

    /// How many reservations wait for pixels now (what an operator's metric, or a test, can watch).
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// The whole budget, in megapixels.
    pub fn megapixels(&self) -> u32 {
        self.megapixels
    }

    /// Waits until `pixels` fit in the budget (a request larger than the whole budget waits for all of it, so
    /// it runs alone), or until `cancel`. Zero pixels reserve nothing.
    pub async fn reserve(&self, pixels: u64, cancel: &CancellationToken) -> Result<PixelReservation, MediaError> {
        if pixels == 0 {
            return Ok(PixelReservation { _permit: None });
        }
        let wanted = u32::try_from(pixels.div_ceil(PIXELS_PER_PERMIT)).unwrap_or(u32::MAX).min(self.megapixels);
        let _waiting = Waiting::enter(&self.waiting);
        tokio::select! {
            biased;
            () = cancel.cancelled() => Err(MediaError::Cancelled),
            permit = self.permits.clone().acquire_many_owned(wanted) => {
                Ok(PixelReservation { _permit: Some(permit.expect("the budget's semaphore is never closed")) })
            }
        }
    }
}

/// A reservation counted as waiting until it is granted, cancelled or dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What ffmpeg holds, beside its frames, while it decodes a video and encodes its web copy (libx264 and the
/// libraries loaded), in the budget's units.
const VIDEO_BASE_PIXELS: u64 = 20_000_000;

/// How many of a video's frames ffmpeg's decoding and encoding hold at once, in the budget's units.
const VIDEO_FRAMES_HELD: u64 = 3;

/// The pixels a video is charged while ffmpeg makes its proxies, from its frames' size: a base and a few frames,
/// in the units a still is charged in (a pixel of a full-size decoder, about 7 bytes at its peak). Measured
/// (ffmpeg 5.1, 2 cores, the web copy's transcode, the heavier of the two proxies): 185 MB for 1920x1080 H.264,
/// 255 MB for 3840x2160 H.264, 315 MB for 3840x2160 HEVC; this charges 26 and 45 megapixels, about 180 and
/// 315 MB. So the default budget (250 megapixels) holds more 4K videos than a crawl makes at once, and a budget
/// lowered for a small machine (`storage.max_image_megapixels`) holds back videos as it does stills. Frames of
/// unknown size are charged the base alone.
pub fn video_decode_pixels(width: Option<u32>, height: Option<u32>) -> u64 {
    let frame = u64::from(width.unwrap_or(0)) * u64::from(height.unwrap_or(0));
    VIDEO_BASE_PIXELS.saturating_add(frame.saturating_mul(VIDEO_FRAMES_HELD))
}

/// The pixels a still's decoder holds at full size: what its header claims for PNG, WebP, TIFF and GIF (read
/// from the header only), for a JPEG or a RAW's JPEG preview drawn in several scans ([`buffered_jpeg_pixels`]),
/// and for HEIC and AVIF its largest image (`heif-convert` decodes them whole); zero for a JPEG of one scan
/// (decoded scaled, a few rows at a time) and for anything whose header cannot be read (the decoder then refuses
/// it).
pub fn full_decode_pixels(content: &[u8], format: MediaFormat) -> u64 {
    let format = match format {
        MediaFormat::Jpeg => return buffered_jpeg_pixels(content),
        // A RAW passes on its preview, a JPEG decoded as one.
        MediaFormat::Raw(_) => {
            return crate::raw::raw_preview(std::path::Path::new(""), content).map_or(0, buffered_jpeg_pixels);
        }
        // Decoded whole by heif-convert, in a process of its own but in the same machine's memory.
        MediaFormat::Heic | MediaFormat::Avif => {
            return crate::heif_size::largest_image(content).map_or(0, |(w, h)| u64::from(w) * u64::from(h));
        }
        MediaFormat::Png => image::ImageFormat::Png,
        MediaFormat::WebP => image::ImageFormat::WebP,
        MediaFormat::Tiff => image::ImageFormat::Tiff,
        MediaFormat::Gif => image::ImageFormat::Gif,
        _ => return 0,
    };
    // As the decoder will see it: a PNG's header read without its colour profile inflated, a GIF whose frame lies
    // outside its screen refused (so charged nothing).
    let Ok(content) = crate::decode_guard::bounded(std::path::Path::new(""), content, format) else { return 0 };
    image::ImageReader::with_format(std::io::Cursor::new(content.as_ref()), format)
        .into_dimensions()
        .map_or(0, |(w, h)| u64::from(w) * u64::from(h))
}

/// The pixels of a JPEG that libjpeg-turbo must hold whole while it decodes, as its frame header claims them; zero
/// for one it decodes a few rows at a time, or a header that cannot be read. A JPEG drawn in several scans is held
/// whole, as coefficients (two bytes each, of every component), even to decode it scaled: about 3 bytes a pixel at
/// 4:2:0 and 6 at 4:4:4 (a 36 MP progressive panorama took 100 MB more, its sequential twin nothing). libjpeg
/// decides it as its `has_multiple_scans` does (`jdinput.c`): a progressive frame, or a sequential one whose first
/// scan does not carry every component (a baseline JPEG of one scan per component, which cameras do not write but
/// a crafted file can). So it is charged as a full-size decoder is.
fn buffered_jpeg_pixels(content: &[u8]) -> u64 {
    if !content.starts_with(&[0xFF, 0xD8]) {
        return 0;
    }
    // The frame header's pixels and components, once read.
    let mut frame: Option<(u64, u8)> = None;
    for (marker, segment) in crate::jpeg_scans::markers(content) {
        match marker {
            0xD9 => return 0,
            // The first scan: sequential, it is held whole when it does not carry every component (its count
            // after the segment's length).
            0xDA => {
                return match (frame, segment.get(2)) {
                    (Some((pixels, components)), Some(&in_scan)) if in_scan < components => pixels,
                    _ => 0,
                };
            }
            // A frame header: progressive (SOF2, 6, 10, 14) or not; height, width and the number of components
            // after its length and precision.
            0xC0..=0xCF if !matches!(marker, 0xC4 | 0xC8 | 0xCC) && frame.is_none() => {
                let progressive = matches!(marker, 0xC2 | 0xC6 | 0xCA | 0xCE);
                let Some(header) = segment.get(3..8) else { return 0 };
                let (height, width) =
                    (u16::from_be_bytes([header[0], header[1]]), u16::from_be_bytes([header[2], header[3]]));
                let pixels = u64::from(width) * u64::from(height);
                if progressive {
                    return pixels;
                }
                frame = Some((pixels, header[4]));
            }
            _ => {}
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    #[tokio::test]
    async fn a_reservation_waits_until_the_pixels_fit_and_a_huge_one_runs_alone() {
        let budget = PixelBudget::new(10_000_000);
        let cancel = CancellationToken::new();
        let first = budget.reserve(8_000_000, &cancel).await.unwrap();
        let mut second = Box::pin(budget.reserve(8_000_000, &cancel));
        assert!((&mut second).now_or_never().is_none(), "8 + 8 megapixels do not fit in 10");
        // First come, first served: a small image does not overtake (and so cannot starve) a waiting large one.
        let mut small = Box::pin(budget.reserve(2_000_000, &cancel));
        assert!((&mut small).now_or_never().is_none(), "2 would fit, but the 8 asked first");
        drop(first);
        let second = second.now_or_never().expect("fits once the first is given back").unwrap();
        let small = small.now_or_never().expect("8 + 2 fit in 10").unwrap();
        drop(small);
        // Larger than the whole budget: waits for all of it.
        let mut huge = Box::pin(budget.reserve(500_000_000, &cancel));
        assert!((&mut huge).now_or_never().is_none());
        drop(second);
        let huge = huge.now_or_never().expect("the whole budget is free").unwrap();
        assert!(budget.reserve(1, &cancel).now_or_never().is_none(), "nothing else decodes beside it");
        assert!(budget.reserve(0, &cancel).now_or_never().is_some(), "zero pixels reserve nothing");
        drop(huge);
    }

    #[tokio::test]
    async fn a_waiting_reservation_ends_at_cancellation() {
        let budget = PixelBudget::new(1);
        assert_eq!(budget.megapixels(), 1, "at least one megapixel");
        let cancel = CancellationToken::new();
        let _held = budget.reserve(1, &cancel).await.unwrap();
        let waiting = budget.reserve(1, &cancel);
        cancel.cancel();
        assert!(matches!(waiting.await, Err(MediaError::Cancelled)));
    }

    #[tokio::test]
    async fn a_waiting_reservation_is_counted_until_granted_or_given_up() {
        let budget = PixelBudget::new(10_000_000);
        let cancel = CancellationToken::new();
        let held = budget.reserve(10_000_000, &cancel).await.unwrap();
        assert_eq!(budget.waiting(), 0, "a reservation granted at once never waits");
        let mut first = Box::pin(budget.reserve(1, &cancel));
        let mut second = Box::pin(budget.reserve(1, &cancel));
        assert!((&mut first).now_or_never().is_none());
        assert!((&mut second).now_or_never().is_none());
        assert_eq!(budget.waiting(), 2);
        drop(second);
        assert_eq!(budget.waiting(), 1, "given up");
        drop(held);
        let _granted = first.now_or_never().expect("the pixels are back").unwrap();
        assert_eq!(budget.waiting(), 0);
    }

    #[test]
    fn a_video_is_charged_a_base_and_a_few_of_its_frames() {
        assert_eq!(video_decode_pixels(Some(1920), Some(1080)), 20_000_000 + 3 * 1920 * 1080);
        assert!(video_decode_pixels(Some(3840), Some(2160)) > 44_000_000);
        assert_eq!(video_decode_pixels(None, Some(1080)), 20_000_000, "frames of unknown size");
        assert_eq!(video_decode_pixels(Some(u32::MAX), Some(u32::MAX)), u64::MAX, "no overflow");
    }

    #[test]
    fn only_full_size_decoders_are_charged() {
        let mut png = std::io::Cursor::new(Vec::new());
        image::RgbImage::new(40, 30).write_to(&mut png, image::ImageFormat::Png).unwrap();
        let png = png.into_inner();
        assert_eq!(full_decode_pixels(&png, MediaFormat::Png), 1200);
        assert_eq!(full_decode_pixels(&png, MediaFormat::Jpeg), 0, "JPEGs decode scaled");
        assert_eq!(full_decode_pixels(b"not a png", MediaFormat::Png), 0, "the decoder refuses it itself");
    }

    /// A progressive JPEG is charged its pixels, as its frame header claims them; the same JPEG sequential is not,
    /// nor bytes that are not a JPEG.
    #[test]
    fn a_progressive_jpeg_is_charged_its_pixels_and_a_sequential_one_nothing() {
        let sequential = crate::fixtures::jpeg(
            640,
            480,
            3,
            true,
            &crate::fixtures::FixtureExif::camera("2019:07:04 18:30:05", "+02:00"),
        );
        assert_eq!(full_decode_pixels(&sequential, MediaFormat::Jpeg), 0);
        // The same frame header marked progressive (SOF2): what a progressive encoder writes there.
        let sof = sequential.windows(2).position(|w| w == [0xFF, 0xC0]).expect("a baseline frame header");
        let mut progressive = sequential.clone();
        progressive[sof + 1] = 0xC2;
        assert_eq!(full_decode_pixels(&progressive, MediaFormat::Jpeg), 640 * 480);
        assert_eq!(full_decode_pixels(&progressive[..sof + 6], MediaFormat::Jpeg), 0, "a header cut short");
        // A byte of junk before the frame header, which libjpeg passes over: the header is read all the same.
        let junk = [&progressive[..sof], &[0x00][..], &progressive[sof..]].concat();
        assert_eq!(full_decode_pixels(&junk, MediaFormat::Jpeg), 640 * 480, "junk hides no frame header");
        assert_eq!(full_decode_pixels(b"not a jpeg", MediaFormat::Jpeg), 0);
    }

    /// A sequential JPEG whose first scan carries one component of its three (one scan a component) is held whole
    /// by libjpeg as a progressive one is, and charged so; a scan cut short before its count is not read.
    #[test]
    fn a_sequential_jpeg_of_one_scan_a_component_is_charged_its_pixels() {
        let exif = crate::fixtures::FixtureExif::default();
        let interleaved = crate::fixtures::jpeg(640, 480, 3, true, &exif);
        let sos = interleaved.windows(2).position(|w| w == [0xFF, 0xDA]).expect("a scan");
        assert_eq!(interleaved[sos + 4], 3, "the fixture's scan carries its three components");
        let mut one_a_scan = interleaved.clone();
        one_a_scan[sos + 4] = 1;
        assert_eq!(full_decode_pixels(&one_a_scan, MediaFormat::Jpeg), 640 * 480);
        assert_eq!(full_decode_pixels(&one_a_scan[..sos + 4], MediaFormat::Jpeg), 0, "a scan header cut short");
    }

    /// A RAW is charged what its preview, the JPEG it passes on, is: a progressive preview its pixels, a sequential
    /// one nothing.
    #[test]
    fn a_raw_is_charged_as_its_preview_is() {
        let block = crate::fixtures::exif_block::Block::camera(true).bytes();
        let nef = MediaFormat::Raw(crate::detect::RawFormat::Nef);
        let progressive = crate::fixtures::tiff_raw(&block, &crate::fixtures::progressive_jpeg(320, 240));
        assert_eq!(full_decode_pixels(&progressive, nef), 320 * 240);
        let exif = crate::fixtures::FixtureExif::default();
        let sequential = crate::fixtures::tiff_raw(&block, &crate::fixtures::jpeg(320, 240, 4, true, &exif));
        assert_eq!(full_decode_pixels(&sequential, nef), 0);
    }
}
