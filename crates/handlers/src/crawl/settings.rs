//! The crawl's settings.

use std::path::PathBuf;
use std::time::Duration;

use almanac_domain::Zone;
use almanac_media::ToolLimits;

use super::MassDeletionGuard;

/// The crawl's settings.
#[derive(Debug, Clone)]
pub struct CrawlSettings {
    /// Where proxies are written: `<proxy_root>/<config>/<hash[0..2]>/<hash>/`.
    pub proxy_root: PathBuf,
    /// Files processed at once inside one crawl.
    pub max_concurrent_files: usize,
    /// Time limits for ffmpeg and friends.
    pub tool_limits: ToolLimits,
    /// When a crawl refuses to soft-delete what it did not find.
    pub mass_deletion: MassDeletionGuard,
    /// Stills whose header claims more pixels than this are refused before decoding (a decompression bomb).
    pub max_image_pixels: u64,
    /// A file is read only once its size and mtime have stayed the same this long: one modified more recently
    /// is still being written (a phone syncing, a copy in progress), and is left for a crawl this much later.
    pub settle_time: Duration,
    /// The household's zone: a phone's video dated by its UTC container time alone, and a file dated by its
    /// mtime, are put on the day they were taken there. The Worker's own zone (`TZ`, else `/etc/localtime`).
    pub zone: Zone,
    /// How long each look before the crawl reads anything (at the root, the proxy root, the proxy folder) may take
    /// before the crawl gives its slot up (a share whose server stopped answering), and a quarter of how long the share
    /// may answer none of the crawl's calls into it (its listings, its reads) while one waits:
    /// `storage.root_answer_limit`.
    pub root_answer_limit: Duration,
}

impl CrawlSettings {
    /// Files processed at once inside one crawl, unless configured.
    pub const DEFAULT_MAX_CONCURRENT_FILES: usize = 4;

    /// How long a file's size and mtime must have stayed the same before it is read, unless configured: longer
    /// than the pauses of a copy or an upload over Wi-Fi, and than NFS's shortest attribute cache (3 s), yet
    /// short beside any crawl.
    pub const DEFAULT_SETTLE_TIME: Duration = Duration::from_secs(10);

    /// The shortest limit a crawl gives a share to answer (the least `storage.root_answer_limit` may be set to): a
    /// shorter one, zero above all, would take every share for one that stopped answering.
    pub const LEAST_ROOT_ANSWER_LIMIT: Duration = Duration::from_secs(1);

    /// `root_answer_limit`, at least [`Self::LEAST_ROOT_ANSWER_LIMIT`] (these settings are built by other programs
    /// than the Worker, which checks its own).
    pub fn answer_limit(&self) -> Duration {
        self.root_answer_limit.max(Self::LEAST_ROOT_ANSWER_LIMIT)
    }

    /// The defaults, writing proxies under `proxy_root`: four files at once, the tools' default time limits,
    /// the default mass-deletion guard, stills of up to 250 megapixels, the default settle time, the Worker's own
    /// zone, and [`almanac_media::ROOT_ANSWERS_WITHIN`] for each look before reading.
    pub fn new(proxy_root: PathBuf) -> Self {
        Self {
            proxy_root,
            max_concurrent_files: Self::DEFAULT_MAX_CONCURRENT_FILES,
            tool_limits: ToolLimits::default(),
            mass_deletion: MassDeletionGuard::default(),
            max_image_pixels: almanac_media::DEFAULT_MAX_PIXELS,
            settle_time: Self::DEFAULT_SETTLE_TIME,
            zone: Zone::Local,
            root_answer_limit: almanac_media::ROOT_ANSWERS_WITHIN,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crawl_gives_a_share_at_least_a_second_whatever_it_is_given() {
        let mut settings = CrawlSettings::new(PathBuf::from("/proxies"));
        assert_eq!(settings.answer_limit(), almanac_media::ROOT_ANSWERS_WITHIN);
        settings.root_answer_limit = Duration::ZERO;
        assert_eq!(settings.answer_limit(), Duration::from_secs(1));
        settings.root_answer_limit = Duration::from_millis(1500);
        assert_eq!(settings.answer_limit(), Duration::from_millis(1500));
    }
}
