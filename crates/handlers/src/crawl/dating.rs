//! A file's capture time: its own dates, its sidecar's, its name's and its mtime, ranked; a phone's video put on
//! the household's day.

use almanac_domain::{
    CaptureSource, CaptureTime,
    ports::{CatalogueStore, Sidecar},
};
use almanac_media::{Content, MediaFormat, ReadOriginal, VideoFacts};

use super::display;
use super::ingest::Run;
use super::problems::FileProblem;
use super::walk::WalkEntry;

impl<C: CatalogueStore> Run<'_, C> {
    /// The capture time of a known asset found with another sidecar, at another path, or back from deletion:
    /// its own dates read again (no proxies made), ranked with the sidecar's and the file name's. `None` for a
    /// video whose frames are over the pixel limit (lowered since it was catalogued): its content is the asset's,
    /// read when the limit allowed it, and it keeps its date rather than failing its move or revival.
    pub(super) async fn capture_again(
        &self,
        entry: &WalkEntry,
        read: ReadOriginal,
    ) -> Result<Option<CaptureTime>, FileProblem> {
        let own: Vec<CaptureTime> = match read.content {
            Content::Still(content) => {
                let format = read.format;
                tokio::task::spawn_blocking(move || {
                    let preview = matches!(format, MediaFormat::Raw(_))
                        .then(|| almanac_media::raw_preview(std::path::Path::new(""), &content).ok())
                        .flatten();
                    almanac_media::read_still_facts(&content, preview).dates
                })
                .await
                .map_err(|e| FileProblem::Failed(format!("reading metadata ended abnormally: {e}")))?
            }
            Content::Video => {
                let (limits, max_pixels) = (self.settings.tool_limits, self.settings.max_image_pixels);
                return match almanac_media::probe_video(&read.original, limits, max_pixels, &self.halt).await {
                    Ok(probed) => Ok(Some(self.video_capture(entry, &probed).await?)),
                    Err(almanac_media::MediaError::TooManyPixels { reason, .. }) => {
                        let path = display(&entry.rel);
                        tracing::info!(%path, %reason, "a known video's date is kept: its frames are over the limit");
                        Ok(None)
                    }
                    Err(e) => Err(FileProblem::from(e).of_known_content()),
                };
            }
        };
        Ok(Some(self.best_capture(entry, own).await?))
    }

    /// The best capture time of a file: its own dates (EXIF, embedded XMP, the container's), its sidecar's, a
    /// date in its name, and at last its mtime, ranked by [`CaptureSource::rank`]. A container's UTC time with no
    /// offset takes the offset the name's local time says ([`CaptureTime::with_offset_from_local`]). The mtime is
    /// a true instant, taken where the household lives: it takes the offset of the household's zone at that
    /// instant (`CrawlSettings::zone`), so a scan made at 21:00 in New York is on its day there, not the next UTC
    /// day. An mtime the catalogue cannot hold ([`almanac_media::UNKNOWN_MTIME`]) is no instant and takes none.
    /// [`FileProblem::Cancelled`] when the crawl stops while its sidecar is read: no date is chosen without it.
    pub(super) async fn best_capture(
        &self,
        entry: &WalkEntry,
        own: impl IntoIterator<Item = CaptureTime>,
    ) -> Result<CaptureTime, FileProblem> {
        let sidecar = match &entry.sidecar {
            Some(sidecar) => self.sidecar_date(sidecar).await?,
            None => None,
        };
        let from_name = name_date(entry);
        Ok(CaptureTime::best(own.into_iter().chain(sidecar).chain(from_name)).map_or_else(
            || {
                let mtime = CaptureTime::file_mtime(entry.mtime);
                if entry.mtime == almanac_media::UNKNOWN_MTIME {
                    mtime
                } else {
                    mtime.in_zone_when_unknown(self.settings.zone)
                }
            },
            |best| best.with_offset_from_local(from_name),
        ))
    }

    /// The date in a sidecar, read beneath the root like an original. A sidecar that cannot be read or parsed
    /// gives no date; the others still count. Given up on when the crawl stops ([`super::root::read_by_the_crawl`]).
    async fn sidecar_date(&self, sidecar: &Sidecar) -> Result<Option<CaptureTime>, FileProblem> {
        let (root, path) = (self.root.clone(), sidecar.path.clone());
        // Read and parsed on a blocking thread: parsing a large packet takes a while.
        let read = super::root::read_by_the_crawl(&self.halt, "reading a sidecar", move || {
            almanac_media::read_sidecar(&root, &path)
                .map(|bytes| almanac_media::xmp_date(&bytes, CaptureSource::XmpSidecar))
                .map_err(|e| e.to_string())
        })
        .await;
        let read = match read {
            Ok(read) => read,
            // A read that ended abnormally is a sidecar that could not be read; only a stop ends the file.
            Err(FileProblem::Failed(reason)) => Err(reason),
            Err(stopped) => return Err(stopped),
        };
        Ok(match read {
            Ok(date) => date,
            Err(reason) => {
                let path = display(&sidecar.path);
                tracing::warn!(sidecar = %path, %reason, "an XMP sidecar could not be read; its date is not used");
                None
            }
        })
    }

    /// A video's capture time from what ffprobe read ([`Self::best_capture`]). A phone's UTC `creation_time` whose
    /// offset neither the container nor the file name says takes the offset of the household's zone, the
    /// Worker's (`CrawlSettings::zone`), at that instant: the video is on the day it was taken there, not on the
    /// UTC day. A Pixel names its videos by the UTC time (`PXL_`), which says no offset; any other name whose time
    /// is the UTC time says the offset is zero (a phone naming by local time, in London in winter), and the video
    /// stays on the UTC day. A camera's container time (GoPro, DJI: their local clock written as UTC) is left as
    /// it reads.
    pub(super) async fn video_capture(
        &self,
        entry: &WalkEntry,
        probed: &VideoFacts,
    ) -> Result<CaptureTime, FileProblem> {
        let best = self.best_capture(entry, probed.created).await?;
        let local_is_utc = best.local_says_utc(name_date(entry)) && !file_name(entry).starts_with(b"PXL_");
        Ok(if probed.created_in_utc && best.source == CaptureSource::Container && !local_is_utc {
            best.in_zone_when_unknown(self.settings.zone)
        } else {
            best
        })
    }
}

/// The file's own name (the last part of its path).
fn file_name(entry: &WalkEntry) -> &[u8] {
    almanac_media::split_parent(&entry.rel).1
}

/// The date in the file's name, a local time read as UTC ([`almanac_media::date_in_file_name`]).
fn name_date(entry: &WalkEntry) -> Option<CaptureTime> {
    almanac_media::date_in_file_name(&String::from_utf8_lossy(file_name(entry)))
}
