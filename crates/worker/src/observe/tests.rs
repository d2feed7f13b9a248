//! The observe layer: counting, keeping, escaping and the table behind them.

use super::*;
use tracing::{debug, info, warn};

/// Events emitted under a subscriber of `log`, rendered by a recorder of their own.
fn render(level: &str, emit: impl FnOnce()) -> String {
    let recorder = recorder();
    let handle = recorder.handle();
    let log = Log { level: level.to_owned(), ..Log::default() };
    let subscriber = subscriber(&log, std::io::sink, &Recent::default(), false).unwrap();
    metrics::with_local_recorder(&recorder, || {
        describe();
        tracing::subscriber::with_default(subscriber, emit);
    });
    handle.render()
}

/// What a subscriber of `format` writes for an event of a span, both carrying control characters.
fn printed(format: LogFormat) -> String {
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let captured = Captured::default();
    let writer = {
        let captured = captured.clone();
        move || captured.clone()
    };
    let log = Log { format, level: "info".to_owned() };
    tracing::subscriber::with_default(subscriber(&log, writer, &Recent::default(), false).unwrap(), || {
        let name = "a\nFAKE line";
        let span = tracing::info_span!("attempt", root = %"/srv/\x1b]0;title\x07ann");
        let _entered = span.enter();
        warn!(
            event = "file_failed",
            path = %name,
            quoted = name,
            colour = %"\x1b[31mred",
            rest = %"\u{9b}31m\u{7f}\r\t",
            "could not read {name}"
        );
    });
    String::from_utf8(captured.0.lock().unwrap().clone()).unwrap()
}

#[test]
fn the_human_format_escapes_control_characters_in_every_field_and_the_message() {
    let text = printed(LogFormat::Human);
    let line = text.strip_suffix('\n').expect("the line ends with its own newline");
    assert!(!line.chars().any(char::is_control), "one line, no control character left in it: {text:?}");
    for escaped in [
        r"could not read a\nFAKE line",
        r"path=a\nFAKE line",
        r#"quoted="a\nFAKE line""#,
        r"colour=\u{1b}[31mred",
        r"rest=\u{9b}31m\u{7f}\r\t",
        r"root=/srv/\u{1b}]0;title\u{7}ann",
        r#"event="file_failed""#,
    ] {
        assert!(line.contains(escaped), "{escaped} is not in {line}");
    }
}

#[test]
fn the_json_format_keeps_the_values_as_they_were_in_one_line_of_json() {
    let text = printed(LogFormat::Json);
    assert_eq!(text.lines().count(), 1, "{text}");
    let line: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(line["fields"]["message"], "could not read a\nFAKE line");
    assert_eq!(line["fields"]["path"], "a\nFAKE line");
    assert_eq!(line["fields"]["colour"], "\x1b[31mred");
    assert_eq!(line["span"]["root"], "/srv/\x1b]0;title\x07ann");
}

fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn events_are_counted_whatever_the_log_level() {
    for level in ["trace", "info", "warn", "error", "off"] {
        let text = render(level, || {
            debug!(event = "claimed", "claimed");
            info!(event = "claimed", "claimed");
            warn!(event = "heartbeat_failed", "heartbeat failed");
            info!("an event without a name is not counted");
        });
        assert_eq!(value(&text, r#"almanac_events_total{event="claimed"}"#), Some(2.0), "{level}: {text}");
        assert_eq!(value(&text, r#"almanac_events_total{event="heartbeat_failed"}"#), Some(1.0), "{level}");
        assert!(text.contains("# HELP almanac_events_total "), "{text}");
        assert!(text.contains("# TYPE almanac_events_total counter"), "{text}");
    }
}

#[test]
fn outage_events_are_kept_newest_first_whatever_the_level_and_at_most_fifty() {
    let recent = Recent::default();
    let log = Log { level: "error".to_owned(), ..Log::default() };
    tracing::subscriber::with_default(subscriber(&log, std::io::sink, &recent, false).unwrap(), || {
        warn!(event = "heartbeat_failed", error = "timed out", "heartbeat did not answer");
        info!(event = "claimed", "claimed");
        warn!(event = "self_stopped", "no successful heartbeat for half a lease");
        for _ in 0..60 {
            warn!(event = "lease_recovered", "lease expired; item recovered");
        }
    });
    let kept = recent.newest_first();
    assert_eq!(kept.len(), 50);
    assert!(kept.iter().all(|e| e.event == "lease_recovered"));
    let recent = Recent::default();
    tracing::subscriber::with_default(subscriber(&log, std::io::sink, &recent, false).unwrap(), || {
        warn!(event = "heartbeat_failed", error = "timed out", "heartbeat did not answer");
        info!(event = "claimed", "claimed");
        warn!(event = "self_stopped", "no successful heartbeat for half a lease");
    });
    let kept = recent.newest_first();
    assert_eq!(kept.iter().map(|e| e.event.as_str()).collect::<Vec<_>>(), ["self_stopped", "heartbeat_failed"]);
    assert_eq!(kept[1].message, "heartbeat did not answer: timed out");
}

#[test]
fn outcomes_fill_duration_histograms_and_crawls_add_up() {
    let text = render("warn", || {
        info!(event = "succeeded", kind = "crawl", duration_ms = 100u64, "succeeded");
        info!(event = "succeeded", kind = %"crawl", duration_ms = 2500u64, "succeeded");
        info!(event = "succeeded", kind = "crawl", duration_ms = 7_200_000u64, "succeeded");
        info!(event = "crawl_finished", files_found = 10u64, files_failed = 1u64, bytes_hashed = 100u64, "done");
        info!(event = "crawl_finished", files_found = 3u64, files_settling = 2u64, "done");
        info!(event = "crawl_finished", files_found = 5u64, "done");
    });
    let series =
        |le: &str| format!(r#"almanac_item_duration_seconds_bucket{{kind="crawl",outcome="succeeded",le="{le}"}}"#);
    assert_eq!(value(&text, &series("0.1")), Some(1.0), "{text}");
    assert_eq!(value(&text, &series("5")), Some(2.0), "{text}");
    assert_eq!(value(&text, &series("3600")), Some(2.0), "two hours is above every bucket: {text}");
    assert_eq!(value(&text, &series("+Inf")), Some(3.0), "{text}");
    assert!(text.contains("# TYPE almanac_item_duration_seconds histogram"), "{text}");
    assert_eq!(value(&text, r#"almanac_crawl_files_total{outcome="found"}"#), Some(18.0), "{text}");
    assert_eq!(value(&text, r#"almanac_crawl_files_total{outcome="settling"}"#), Some(2.0), "{text}");
    assert_eq!(value(&text, r#"almanac_crawl_files_total{outcome="failed"}"#), Some(1.0), "{text}");
    assert_eq!(value(&text, "almanac_crawl_hashed_bytes_total"), Some(100.0), "{text}");
}

/// What a recorder is told about a family: its name, type, unit and HELP.
type Description = (String, table::MetricType, Option<metrics::Unit>, String);

/// A recorder that keeps what it is told about each family.
#[derive(Default)]
struct Descriptions(Mutex<Vec<Description>>);

impl Descriptions {
    fn keep(&self, key: metrics::KeyName, kind: table::MetricType, unit: Option<metrics::Unit>, help: &str) {
        self.0.lock().unwrap().push((key.as_str().to_owned(), kind, unit, help.to_owned()));
    }
}

impl metrics::Recorder for Descriptions {
    fn describe_counter(&self, key: metrics::KeyName, unit: Option<metrics::Unit>, help: metrics::SharedString) {
        self.keep(key, table::MetricType::Counter, unit, &help);
    }
    fn describe_gauge(&self, key: metrics::KeyName, unit: Option<metrics::Unit>, help: metrics::SharedString) {
        self.keep(key, table::MetricType::Gauge, unit, &help);
    }
    fn describe_histogram(&self, key: metrics::KeyName, unit: Option<metrics::Unit>, help: metrics::SharedString) {
        self.keep(key, table::MetricType::Histogram, unit, &help);
    }
    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::noop()
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

#[test]
fn every_family_described_is_in_the_table_with_its_type_unit_and_help() {
    let described = Descriptions::default();
    metrics::with_local_recorder(&described, describe);
    let described = described.0.into_inner().unwrap();
    let expected: Vec<_> = table::METRICS
        .iter()
        .filter(|m| m.owner != table::Owner::Scrape)
        .map(|m| {
            let unit = match m.unit {
                table::MetricUnit::Count => None,
                table::MetricUnit::Seconds => Some(metrics::Unit::Seconds),
                table::MetricUnit::Bytes => Some(metrics::Unit::Bytes),
            };
            (m.name.to_owned(), m.kind, unit, m.help.to_owned())
        })
        .collect();
    for family in &described {
        assert!(expected.contains(family), "described but not in observe/table.rs as described: {family:?}");
    }
    for family in &expected {
        assert!(described.contains(family), "in observe/table.rs but not described so: {family:?}");
    }
    let executor = [almanac_executor::metrics::CLAIM_SECONDS, almanac_executor::metrics::HEARTBEAT_SECONDS];
    for name in executor {
        let row = table::METRICS.iter().find(|m| m.name == name).expect("the executor's families are in the table");
        assert_eq!(row.owner, table::Owner::Executor, "{name}");
    }
}

#[test]
fn the_events_kept_for_the_page_are_the_outage_events() {
    let kept: Vec<_> = table::EVENTS.iter().filter(|e| e.page).map(|e| e.name).collect();
    assert_eq!(
        kept,
        [
            "heartbeat_failed",
            "self_stopped",
            "lost",
            "released_after_outage",
            "catalogue_retry",
            "completion_retry",
            "outcome_unwritten",
            "lease_recovered",
            "claim_failed",
            "recovery_failed",
            "listener_disconnected",
            "database_unavailable",
            "schema_check_failed",
            "unclean_shutdown",
        ]
    );
}

#[test]
fn each_config_s_watch_mode_is_one_gauge_set_and_its_pending_files_another() {
    use almanac_domain::ports::{HeldWatch, WatchChoice, WatchReport};
    use almanac_domain::{StorageConfigId, WorkerId};
    let (polled, unwatched) = (StorageConfigId::new(), StorageConfigId::new());
    let held = HeldWatch {
        worker_id: WorkerId::new("worker-a").unwrap(),
        report: WatchReport { mode: WatchMode::Polling, last_change_at: None, pending_files: 12, note: None },
        since: chrono::DateTime::UNIX_EPOCH,
        lease_expires_at: chrono::DateTime::UNIX_EPOCH,
    };
    let states = [
        WatchState { config: polled, choice: WatchChoice::Auto, held: Some(held) },
        WatchState { config: unwatched, choice: WatchChoice::Events, held: None },
    ];
    let text = render_watch_states(&states);
    let mode = |config: StorageConfigId, mode: &str| {
        value(&text, &format!(r#"almanac_watch_mode{{config="{config}",mode="{mode}"}}"#))
    };
    assert_eq!(
        [mode(polled, "events"), mode(polled, "polling"), mode(polled, "off")],
        [Some(0.0), Some(1.0), Some(0.0)]
    );
    assert_eq!(
        [mode(unwatched, "events"), mode(unwatched, "polling"), mode(unwatched, "off")],
        [Some(0.0), Some(0.0), Some(1.0)],
        "no Worker watches it: off, whatever was chosen: {text}"
    );
    let pending =
        |config: StorageConfigId| value(&text, &format!(r#"almanac_watch_pending_files{{config="{config}"}}"#));
    assert_eq!((pending(polled), pending(unwatched)), (Some(12.0), Some(0.0)), "{text}");
    assert!(text.contains("# TYPE almanac_watch_mode gauge"), "{text}");
    assert!(text.contains("# HELP almanac_watch_pending_files Files the watcher"), "{text}");
    let gone = render_watch_states(&states[1..]);
    assert!(!gone.contains(&polled.to_string()), "a config removed has no series left: {gone}");
}

/// What the command line prints keeps its own layout (line ends, tabs) and escapes every other control character
/// as the logs do: an escape sequence, a bell, a carriage return, an 8-bit CSI, DEL.
#[test]
fn the_command_line_shows_control_characters_escaped_but_its_layout() {
    let path = "2019/\u{1b}]52;c;cHduZWQ=\u{7}x\u{1b}[2J\r\u{9b}31m\u{7f}.jpg";
    let shown = shown(&format!("FAILED\t{path}: truncated\nnext line"));
    assert_eq!(
        shown,
        "FAILED\t2019/\\u{1b}]52;c;cHduZWQ=\\u{7}x\\u{1b}[2J\\r\\u{9b}31m\\u{7f}.jpg: truncated\nnext line"
    );
    assert!(!shown.chars().any(|c| c.is_control() && c != '\n' && c != '\t'), "{shown:?}");
}

/// Every command prints through `say!` or `esay!` (which escape control characters), never straight to the
/// terminal: a new command cannot forget to.
#[test]
fn every_command_prints_through_say() {
    fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    rust_files(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/commands"), &mut files);
    assert!(files.len() > 5, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let printing = ["println!(", "print!(", "eprintln!(", "eprint!("].iter().any(|m| line.contains(m));
            let the_macros = line.contains("crate::observe::shown(") || line.contains("crate::observe::json_shown(");
            assert!(!printing || the_macros, "{}:{}: print with say! or esay!: {line}", file.display(), n + 1);
        }
    }
}

/// A value inside the command line's layout has its line ends and tabs escaped too; JSON keeps valid escapes for
/// DEL and C1, which serde_json leaves raw.
#[test]
fn values_and_json_are_shown_without_control_characters() {
    assert_eq!(value_shown("a\tb\nc\u{1b}"), "a\\tb\\nc\\u{1b}");
    let json = serde_json::to_string_pretty(&serde_json::json!({"error": "x\u{85}\u{7f}\u{1b}y"})).unwrap();
    let shown = json_shown(&json);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&shown).unwrap()["error"], "x\u{85}\u{7f}\u{1b}y");
    assert!(!shown.chars().any(|c| c.is_control() && c != '\n'), "{shown:?}");
}
