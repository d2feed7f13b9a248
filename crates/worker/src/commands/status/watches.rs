//! `status`'s section of watches (ADR 0014): each config's choice, the mode its watcher reports, who holds its
//! watch since when, the last change seen, the pending files and the note.

use std::collections::HashMap;

use almanac_domain::StorageConfigId;
use almanac_domain::ports::WatchState;
use serde_json::{Value, json};

/// Each config's watch with its root.
pub struct Watches {
    /// Every config's watch, in the store's order.
    pub states: Vec<WatchState>,
    /// The configs' roots.
    pub roots: HashMap<StorageConfigId, String>,
}

impl Watches {
    fn root(&self, config: StorageConfigId) -> &str {
        self.roots.get(&config).map_or("-", String::as_str)
    }

    /// One line per config.
    pub fn lines(&self) -> Vec<String> {
        self.states
            .iter()
            .map(|s| {
                let head = format!("config {}  {}  chosen {}", s.config, self.root(s.config), s.choice);
                match &s.held {
                    None => format!("{head}  mode off (no Worker watches it)"),
                    Some(h) => {
                        let r = &h.report;
                        let last = r.last_change_at.map_or("none".to_owned(), |t| t.format("%F %T UTC").to_string());
                        let note = r.note.as_deref().map(|n| format!("  note: {n}")).unwrap_or_default();
                        format!(
                            "{head}  mode {}  worker {} since {}  last change {last}  pending files {}{note}",
                            r.mode,
                            h.worker_id,
                            h.since.format("%F %T UTC"),
                            r.pending_files
                        )
                    }
                }
            })
            .collect()
    }

    /// As `status --json` prints them.
    pub fn as_json(&self) -> Value {
        self.states
            .iter()
            .map(|s| {
                let held = s.held.as_ref();
                json!({
                    "config": s.config.to_string(),
                    "root": self.root(s.config),
                    "choice": s.choice.as_str(),
                    "mode": held.map_or("off", |h| h.report.mode.as_str()),
                    "worker": held.map(|h| h.worker_id.to_string()),
                    "since": held.map(|h| h.since),
                    "last_change_at": held.and_then(|h| h.report.last_change_at),
                    "pending_files": held.map_or(0, |h| h.report.pending_files),
                    "note": held.and_then(|h| h.report.note.clone()),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use almanac_domain::WorkerId;
    use almanac_domain::ports::{HeldWatch, WatchChoice, WatchMode, WatchReport};
    use chrono::{TimeZone, Utc};

    #[test]
    fn a_watched_config_shows_its_mode_holder_last_change_pending_files_and_note_and_an_unwatched_one_off() {
        let (watched, unwatched) = (StorageConfigId::new(), StorageConfigId::new());
        let at = |m| Utc.with_ymd_and_hms(2026, 12, 2, 13, m, 0).unwrap();
        let report = WatchReport {
            mode: WatchMode::Polling,
            last_change_at: Some(at(5)),
            pending_files: 4,
            note: Some("the root is on NFS".into()),
        };
        let held =
            HeldWatch { worker_id: WorkerId::new("nas-1").unwrap(), report, since: at(1), lease_expires_at: at(2) };
        let watches = Watches {
            states: vec![
                WatchState { config: watched, choice: WatchChoice::Auto, held: Some(held) },
                WatchState { config: unwatched, choice: WatchChoice::Off, held: None },
            ],
            roots: HashMap::from([(watched, "/p/ann".to_owned())]),
        };
        let lines = watches.lines();
        assert_eq!(
            lines[0],
            format!(
                "config {watched}  /p/ann  chosen auto  mode polling  worker nas-1 since 2026-12-02 13:01:00 UTC  \
                 last change 2026-12-02 13:05:00 UTC  pending files 4  note: the root is on NFS"
            )
        );
        assert_eq!(lines[1], format!("config {unwatched}  -  chosen off  mode off (no Worker watches it)"));
        let json = watches.as_json();
        assert_eq!(json[0]["mode"], "polling");
        assert_eq!(json[0]["worker"], "nas-1");
        assert_eq!(json[0]["pending_files"], 4);
        assert_eq!(json[0]["note"], "the root is on NFS");
        assert_eq!(json[0]["last_change_at"], "2026-12-02T13:05:00Z");
        assert_eq!(json[1]["mode"], "off");
        assert_eq!(json[1]["choice"], "off");
        assert!(json[1]["worker"].is_null());
    }
}
