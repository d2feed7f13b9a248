//! Reading an action's arguments as the operator types them (the CLI's options, the page's paths): each error
//! says what is accepted.

use std::time::Duration;

use almanac_domain::ports::WatchChoice;
use almanac_domain::{Status, StorageConfigId, WorkItemId, WorkKind};

use super::OpError;

/// A kind as the CLI and the page name it: its stored name with `-` for `_` (`burst-detection`).
pub fn kind_name(kind: WorkKind) -> String {
    kind.as_str().replace('_', "-")
}

/// Every kind as the CLI names them, for help and errors: `crawl, burst-detection, … or work-item-retention`.
pub fn kind_names(last_joiner: &str) -> String {
    let names: Vec<String> = WorkKind::ALL.into_iter().map(kind_name).collect();
    match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} {last_joiner} {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// How long a `--config` given by another spelling than its registered root waits for the file system to resolve
/// it: a share whose server stopped answering would hold the command for ever.
pub const RESOLVE_WITHIN: Duration = Duration::from_secs(5);

/// A `--config` value as the store may know it without the file system: an id, or a root as registered (without a
/// trailing `/`).
pub fn config_as_given(given: &str) -> &str {
    given.trim_end_matches('/')
}

/// A `--config` root path resolved the way `config add` stored it (a relative name is not a path: as given). A
/// file system that does not answer within [`RESOLVE_WITHIN`] is an error saying what to give instead.
pub fn config_key(given: &str) -> Result<String, OpError> {
    if !given.starts_with('/') {
        return Ok(config_as_given(given).to_owned());
    }
    let path = given.to_owned();
    match super::roots::answered_in_time(RESOLVE_WITHIN, move || std::fs::canonicalize(path)) {
        Some(Ok(path)) => Ok(path.display().to_string()),
        Some(Err(_)) => Ok(config_as_given(given).to_owned()),
        None => Err(OpError::Io {
            what: format!(
                "looking up {given} on the file system did not answer within {}s (is the share it is on answering?): \
                 name the config by its id or by its root exactly as registered (almanac-worker config list)",
                RESOLVE_WITHIN.as_secs()
            ),
            source: std::io::Error::from(std::io::ErrorKind::TimedOut),
        }),
    }
}

/// A status by name.
pub fn parse_status(s: &str) -> Result<Status, OpError> {
    s.parse().map_err(|_| {
        let names: Vec<&str> = Status::ALL.into_iter().map(Status::as_str).collect();
        let (last, rest) = names.split_last().expect("statuses");
        OpError::BadInput(format!("{s:?} is not a status: use {} or {last}", rest.join(", ")))
    })
}

/// A kind by name (`-` or `_` between words).
pub fn parse_kind(s: &str) -> Result<WorkKind, OpError> {
    s.replace('-', "_").parse().map_err(|_| OpError::BadInput(format!("{s:?} is not a kind: use {}", kind_names("or"))))
}

/// A work item's id.
pub fn parse_item_id(s: &str) -> Result<WorkItemId, OpError> {
    s.parse().map_err(|_| OpError::BadInput(format!("{s:?} is not a work item id (a UUID, as `list` shows them)")))
}

/// A storage config's id (the page names configs by id only).
pub fn parse_config_id(s: &str) -> Result<StorageConfigId, OpError> {
    s.parse().map_err(|_| {
        OpError::BadInput(format!("{s:?} is not a storage config id (a UUID, as `config list` shows them)"))
    })
}

/// How to watch a config, by name (`auto`, `events`, `polling` or `off`).
pub fn parse_watch_choice(s: &str) -> Result<WatchChoice, OpError> {
    s.parse().map_err(OpError::BadInput)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_every_kind_and_status_as_the_operator_types_them() {
        let kind = parse_kind("frobnicate").unwrap_err().to_string();
        assert!(kind.starts_with("\"frobnicate\" is not a kind: use crawl, burst-detection, "), "{kind}");
        assert!(kind.ends_with(" or work-item-retention"), "{kind}");
        for kind_named in WorkKind::ALL.map(kind_name) {
            assert!(kind.contains(&kind_named), "{kind} lacks {kind_named}");
        }
        let status = parse_status("broken").unwrap_err().to_string();
        assert_eq!(status, "\"broken\" is not a status: use queued, running, succeeded, failed or cancelled");
        for kind in WorkKind::ALL {
            assert_eq!(parse_kind(&kind_name(kind)).unwrap(), kind);
            assert_eq!(parse_kind(kind.as_str()).unwrap(), kind);
        }
    }

    #[test]
    fn a_watch_choice_is_read_by_name_and_an_unknown_one_names_the_choices() {
        for choice in WatchChoice::ALL {
            assert_eq!(parse_watch_choice(choice.as_str()).unwrap(), choice);
        }
        let e = parse_watch_choice("inotify").unwrap_err();
        assert!(matches!(&e, OpError::BadInput(m) if m.contains("auto, events, polling, off")), "{e}");
    }

    #[test]
    fn a_config_given_by_path_is_resolved_and_one_given_by_id_is_taken_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(real.join("photos/ann")).unwrap();
        let ann = real.join("photos/ann").display().to_string();
        let key = |given: &str| config_key(given).unwrap();
        assert_eq!(key(&format!("{}/photos/./ann/", real.display())), ann);
        assert_eq!(key(&format!("{ann}/")), ann);
        assert_eq!(key(&format!("{}/gone/", real.display())), format!("{}/gone", real.display()));
        // A relative name is not a path, though it names a folder here.
        assert_eq!(key("."), ".");
        assert_eq!(key("0198a7d2-6c4e-7a7b-9f1e-3c2d1b0a9f8e"), "0198a7d2-6c4e-7a7b-9f1e-3c2d1b0a9f8e");
        assert_eq!(config_as_given(&format!("{ann}/")), ann);
    }
}
