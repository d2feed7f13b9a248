//! The `[watch]` settings: watching libraries (ADR 0014). Their defaults are the watchers' own
//! (`almanac_handlers::WatchSettings`).

use std::time::Duration;

use almanac_handlers::{InQuietHours, WatchSettings};
use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use super::Settings;

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Watch {
    /// A polled config's folders are stat'ed this often.
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// The changes seen are enqueued once none came for this long …
    #[serde(with = "humantime_serde")]
    pub debounce: Duration,
    /// … or this long after the first of them.
    #[serde(with = "humantime_serde")]
    pub max_delay: Duration,
    /// A Worker holds a config's watch this long unless it renews it (every third of it).
    #[serde(with = "humantime_serde")]
    pub lease: Duration,
    /// `ingest` (watched changes ingest inside the quiet hours) or `wait` (their crawls wait for the end).
    pub in_quiet_hours: String,
    /// Whether a file seen closed after writing is read at once (`false`: it waits for the settle time).
    pub trust_closed_files: bool,
}

impl Default for Watch {
    fn default() -> Self {
        let watch = WatchSettings::default();
        Self {
            poll_interval: watch.poll_interval,
            debounce: watch.debounce,
            max_delay: watch.max_delay,
            lease: watch.lease,
            in_quiet_hours: watch.in_quiet_hours.name().to_owned(),
            trust_closed_files: watch.trust_closed_files,
        }
    }
}

impl Settings {
    /// The watchers' settings, checked (the quiet hours are the scheduler's).
    pub fn watch_settings(&self) -> Result<WatchSettings> {
        let w = &self.watch;
        if w.poll_interval < Duration::from_secs(1) {
            bail!("watch.poll_interval: {:?} must be at least 1s", w.poll_interval);
        }
        if w.debounce.is_zero() || w.debounce > w.max_delay {
            bail!(
                "watch.debounce: {:?} must be above zero and at most watch.max_delay ({:?})",
                w.debounce,
                w.max_delay
            );
        }
        if w.max_delay > Duration::from_secs(3600) {
            bail!("watch.max_delay: {:?} must be at most 1h (changes wait that long at most)", w.max_delay);
        }
        if w.lease < Duration::from_secs(3) {
            bail!("watch.lease: {:?} must be at least 3s (it is renewed every third of it)", w.lease);
        }
        let Some(in_quiet_hours) = InQuietHours::parse(&w.in_quiet_hours) else {
            let names: Vec<&str> = InQuietHours::ALL.iter().map(|v| v.name()).collect();
            bail!(
                "watch.in_quiet_hours: {:?} is not one of {} (ingest: watched changes are read inside the quiet \
                 hours; wait: their crawls wait for the end of the window)",
                w.in_quiet_hours,
                names.join(", ")
            );
        };
        Ok(WatchSettings {
            poll_interval: w.poll_interval,
            debounce: w.debounce,
            max_delay: w.max_delay,
            lease: w.lease,
            in_quiet_hours,
            trust_closed_files: w.trust_closed_files,
            quiet_hours: self.schedule_settings()?.quiet_hours,
            settle_time: self.storage.settle_time,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(env: &[(&str, &str)]) -> Result<Settings> {
        Settings::load_from(None, env.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn the_watch_settings_default_to_the_watchers_own_and_are_read_from_the_environment() {
        let s = load(&[]).unwrap();
        assert_eq!(s.watch_settings().unwrap(), WatchSettings::default());
        let s = load(&[
            ("ALMANAC__WATCH__POLL_INTERVAL", "5m"),
            ("ALMANAC__WATCH__IN_QUIET_HOURS", "wait"),
            ("ALMANAC__WATCH__TRUST_CLOSED_FILES", "false"),
            ("ALMANAC__SCHEDULE__QUIET_HOURS", "01:00-06:00 UTC"),
        ])
        .unwrap();
        let w = s.watch_settings().unwrap();
        assert_eq!(w.poll_interval, Duration::from_secs(300));
        assert_eq!(w.in_quiet_hours, InQuietHours::Wait);
        assert!(!w.trust_closed_files);
        assert!(w.quiet_hours.is_some());
    }

    #[test]
    fn bad_watch_settings_name_the_setting() {
        for (key, value) in [
            ("ALMANAC__WATCH__POLL_INTERVAL", "0s"),
            ("ALMANAC__WATCH__DEBOUNCE", "20s"),
            ("ALMANAC__WATCH__MAX_DELAY", "2h"),
            ("ALMANAC__WATCH__LEASE", "1s"),
            ("ALMANAC__WATCH__IN_QUIET_HOURS", "sleep"),
        ] {
            let e = load(&[(key, value)]).unwrap_err().to_string();
            let setting = key.trim_start_matches("ALMANAC__").to_ascii_lowercase().replace("__", ".");
            assert!(e.starts_with(&setting), "{key}={value}: {e}");
        }
    }
}
