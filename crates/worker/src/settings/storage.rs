//! The storage settings: their defaults, their checks, and what the Worker's tools are given from them.

use std::path::Component;
use std::time::Duration;

use anyhow::{Result, bail};

use super::{Settings, Storage};

impl Default for Storage {
    fn default() -> Self {
        let guard = almanac_handlers::MassDeletionGuard::default();
        Self {
            proxy_root: std::path::PathBuf::from("/var/lib/almanac/proxies"),
            mass_deletion_min_assets: guard.min_assets,
            mass_deletion_max_percent: guard.max_percent,
            max_image_megapixels: almanac_media::DEFAULT_MAX_PIXELS / 1_000_000,
            settle_time: almanac_handlers::CrawlSettings::DEFAULT_SETTLE_TIME,
            transcode_limit: almanac_media::ToolLimits::default().transcode,
            root_answer_limit: almanac_media::ROOT_ANSWERS_WITHIN,
        }
    }
}

impl Settings {
    /// The storage settings checked: the proxy root's path, the mass-deletion guard, the image and time limits.
    pub(super) fn storage_checked(&self) -> Result<()> {
        if !self.storage.proxy_root.is_absolute() {
            bail!("storage.proxy_root: {} must be an absolute path", self.storage.proxy_root.display());
        }
        if self.storage.proxy_root.parent().is_none() {
            bail!("storage.proxy_root: / cannot be the proxy root: it would contain every library");
        }
        if self.storage.proxy_root.components().any(|c| matches!(c, Component::CurDir | Component::ParentDir)) {
            bail!(
                "storage.proxy_root: {} must not contain `.` or `..`: give the folder's plain absolute path",
                self.storage.proxy_root.display()
            );
        }
        if !(1..=100).contains(&self.storage.mass_deletion_max_percent) {
            bail!(
                "storage.mass_deletion_max_percent: {} must be from 1 to 100",
                self.storage.mass_deletion_max_percent
            );
        }
        if !(1..=10_000).contains(&self.storage.max_image_megapixels) {
            bail!(
                "storage.max_image_megapixels: {} must be from 1 to 10000 (the default, {}, is above any camera's \
                 sensor)",
                self.storage.max_image_megapixels,
                almanac_media::DEFAULT_MAX_PIXELS / 1_000_000
            );
        }
        if self.storage.settle_time > Duration::from_secs(3600) {
            bail!(
                "storage.settle_time: {:?} must be at most 1h (a file still being written is left for a crawl that \
                 much later; 0s reads files however recently they changed)",
                self.storage.settle_time
            );
        }
        if !(Duration::from_secs(60)..=Duration::from_secs(86_400)).contains(&self.storage.transcode_limit) {
            bail!(
                "storage.transcode_limit: {:?} must be from 1min to 24h (the longest a video's web transcode may take)",
                self.storage.transcode_limit
            );
        }
        let least = almanac_handlers::CrawlSettings::LEAST_ROOT_ANSWER_LIMIT;
        if !(least..=Duration::from_secs(3600)).contains(&self.storage.root_answer_limit) {
            bail!(
                "storage.root_answer_limit: {:?} must be from 1s to 1h (how long a crawl waits for its library's share \
                 to answer before it gives its slot up)",
                self.storage.root_answer_limit
            );
        }
        Ok(())
    }

    /// The external tools' time limits: the transcode's as set, the rest as the media crate ships them.
    pub fn tool_limits(&self) -> almanac_media::ToolLimits {
        almanac_media::ToolLimits { transcode: self.storage.transcode_limit, ..almanac_media::ToolLimits::default() }
    }
}
