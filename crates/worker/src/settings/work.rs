//! The settings that shape the Worker's work beside the queue's: the scheduler's (the quiet hours read) and the
//! priority of reading originals and of the tools. Their defaults are their owners' (`almanac_handlers`,
//! `almanac_media`).

use almanac_media::IoPriority;
use anyhow::{Context, Result, bail};

use super::Settings;

impl Settings {
    /// The scheduler's settings, the quiet hours read, the crawl intervals checked.
    pub fn schedule_settings(&self) -> Result<almanac_handlers::ScheduleSettings> {
        for (key, interval) in [
            ("crawl_interval", self.schedule.crawl_interval),
            ("watched_crawl_interval", self.schedule.watched_crawl_interval),
        ] {
            if interval < std::time::Duration::from_secs(60) {
                bail!("schedule.{key}: {interval:?} must be at least one minute");
            }
        }
        let longest = almanac_handlers::PurgeSettings::MAX_PURGE_AFTER;
        if self.schedule.purge_after > longest {
            bail!(
                "schedule.purge_after: {:?} must be at most {}days (a century: never, in practice)",
                self.schedule.purge_after,
                longest.as_secs() / 86_400
            );
        }
        let quiet = self.schedule.quiet_hours.as_deref().unwrap_or_default();
        let quiet_hours =
            almanac_handlers::QuietHours::parse(quiet).map_err(|e| anyhow::anyhow!("schedule.quiet_hours: {e}"))?;
        Ok(almanac_handlers::ScheduleSettings {
            crawl_interval: self.schedule.crawl_interval,
            watched_crawl_interval: self.schedule.watched_crawl_interval,
            tick: self.schedule.tick,
            quiet_hours,
        })
    }

    /// The priority of reading originals and of the tools (`worker.nice`, `worker.io_priority`).
    pub fn priority(&self) -> Result<almanac_media::Priority> {
        if !(0..=19).contains(&self.worker.nice) {
            bail!("worker.nice: {} must be from 0 (unchanged) to 19 (the lowest)", self.worker.nice);
        }
        let io = IoPriority::parse(&self.worker.io_priority).with_context(|| {
            let names: Vec<&str> = IoPriority::ALL.iter().map(|p| p.name()).collect();
            format!("worker.io_priority: {:?} is not one of {}", self.worker.io_priority, names.join(", "))
        })?;
        Ok(almanac_media::Priority { nice: self.worker.nice, io })
    }
}
