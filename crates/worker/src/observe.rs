//! Logs (human or JSON) and the metrics behind `/metrics`.
//!
//! Every log event with an `event` field (`claimed`, `self_stopped`, `lease_recovered`, …) is counted, so metrics
//! and logs never disagree about names; the counting layer has a filter of its own (events with an `event`
//! field, at any level), so `log.level` and `log.format` change what is printed, never what is counted. Outcome
//! events with a `kind` and `duration_ms` fill the item duration histogram; `crawl_finished` adds to the crawl
//! totals. The executor measures claim and heartbeat latency itself ([`almanac_executor::metrics`]); the
//! process's CPU, memory and open files come from `metrics-process`. Everything goes through the `metrics`
//! facade to one Prometheus recorder.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::filter::{EnvFilter, FilterFn};
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Registry, fmt};

use crate::settings::{Log, LogFormat};

/// Counter: log events by their `event` field.
pub const EVENTS: &str = "almanac_events_total";
/// Histogram: seconds from claim to outcome, by kind and outcome.
pub const ITEM_SECONDS: &str = "almanac_item_duration_seconds";
/// Counter: files of finished crawls, by what became of them.
pub const CRAWL_FILES: &str = "almanac_crawl_files_total";
/// Counter: bytes hashed by finished crawls.
pub const CRAWL_BYTES: &str = "almanac_crawl_hashed_bytes_total";
/// Gauge: work items by kind and status.
pub const WORK_ITEMS: &str = "almanac_work_items";
/// Gauge: whether the database answered the scrape.
pub const DATABASE_UP: &str = "almanac_database_up";

/// Upper bounds (seconds) of the item duration histogram buckets.
pub const DURATION_BUCKETS: [f64; 10] = [0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0];

/// The crawl fields counted, and the label (or family) each goes to.
const CRAWL_FIELDS: [(&str, Option<&str>); 4] = [
    ("files_found", Some("found")),
    ("files_ingested", Some("ingested")),
    ("files_failed", Some("failed")),
    ("bytes_hashed", None),
];

/// The recorder `/metrics` renders, with the buckets of every histogram.
pub fn recorder() -> PrometheusRecorder {
    let latency = &almanac_executor::metrics::LATENCY_BUCKETS;
    let builder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(ITEM_SECONDS.into()), &DURATION_BUCKETS)
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(almanac_executor::metrics::CLAIM_SECONDS.into()), latency))
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full(almanac_executor::metrics::HEARTBEAT_SECONDS.into()), latency)
        })
        .expect("the bucket lists are not empty");
    builder.build_recorder()
}

/// Installs [`recorder`] as the process's recorder and describes every family; the handle renders it.
pub fn install_metrics() -> anyhow::Result<PrometheusHandle> {
    let recorder = recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|e| anyhow::anyhow!("installing the metrics recorder: {e}"))?;
    describe();
    Ok(handle)
}

/// HELP text for every family of ours and the executor's (the process collector describes its own).
pub fn describe() {
    use metrics::Unit;
    metrics::describe_counter!(
        EVENTS,
        "Worker events by name (claims, lost races, heartbeat failures, self-stops, recoveries, outcomes), counted whatever the log level."
    );
    metrics::describe_histogram!(ITEM_SECONDS, Unit::Seconds, "Time from claim to outcome, by kind and outcome.");
    metrics::describe_counter!(CRAWL_FILES, "Files of finished crawls, by outcome (found, ingested, failed).");
    metrics::describe_counter!(CRAWL_BYTES, Unit::Bytes, "Bytes hashed by finished crawls.");
    metrics::describe_gauge!(WORK_ITEMS, "Work items in the queue by kind and status, as of the scrape.");
    metrics::describe_gauge!(DATABASE_UP, "1 when the database answered the scrape, 0 when it did not.");
    almanac_executor::metrics::describe();
}

/// Events an operator looks for after an outage, kept for the operator's page.
pub const OUTAGE_EVENTS: [&str; 13] = [
    "self_stopped",
    "released_after_outage",
    "catalogue_retry",
    "completion_retry",
    "lease_recovered",
    "heartbeat_failed",
    "claim_failed",
    "recovery_failed",
    "database_unavailable",
    "listener_disconnected",
    "outcome_unwritten",
    "lost",
    "unclean_shutdown",
];

/// How many outage events are kept.
const RECENT_KEPT: usize = 50;

/// One outage event of this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentEvent {
    pub at: chrono::DateTime<chrono::Utc>,
    pub event: String,
    /// The log line's message, and its error when it has one.
    pub message: String,
}

/// This process's latest outage events, newest last (at most 50).
#[derive(Debug, Clone, Default)]
pub struct Recent(Arc<Mutex<VecDeque<RecentEvent>>>);

impl Recent {
    /// A copy, newest first.
    pub fn newest_first(&self) -> Vec<RecentEvent> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).iter().rev().cloned().collect()
    }

    fn push(&self, event: RecentEvent) {
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() == RECENT_KEPT {
            kept.pop_front();
        }
        kept.push_back(event);
    }
}

/// The layer that turns log events into metrics, and keeps the outage events.
#[derive(Debug, Clone, Default)]
pub struct EventMetrics {
    recent: Recent,
}

#[derive(Default)]
struct Fields {
    event: Option<String>,
    message: Option<String>,
    error: Option<String>,
    kind: Option<String>,
    duration_ms: Option<u64>,
    /// Crawl totals: the `outcome` label of a file count (`None`: the bytes hashed), and the value.
    crawl: Vec<(Option<&'static str>, u64)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "event" => self.event = Some(value.to_owned()),
            "kind" => self.kind = Some(value.to_owned()),
            "error" => self.error = Some(value.to_owned()),
            _ => {}
        }
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "duration_ms" => self.duration_ms = Some(value),
            name => {
                if let Some((_, label)) = CRAWL_FIELDS.iter().find(|(f, _)| *f == name) {
                    self.crawl.push((*label, value));
                }
            }
        }
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        if let Ok(value) = u64::try_from(value) {
            self.record_u64(field, value);
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let text = || format!("{value:?}").trim_matches('"').to_owned();
        match field.name() {
            "event" if self.event.is_none() => self.event = Some(text()),
            "kind" if self.kind.is_none() => self.kind = Some(text()),
            "message" => self.message = Some(format!("{value:?}")),
            "error" if self.error.is_none() => self.error = Some(text()),
            _ => {}
        }
    }
}

impl Fields {
    fn record(self, recent: &Recent) {
        let Some(event) = self.event else { return };
        if OUTAGE_EVENTS.contains(&event.as_str()) {
            let message = match (&self.message, &self.error) {
                (Some(m), Some(e)) => format!("{m}: {e}"),
                (Some(m), None) => m.clone(),
                (None, e) => e.clone().unwrap_or_default(),
            };
            recent.push(RecentEvent { at: chrono::Utc::now(), event: event.clone(), message });
        }
        if let (Some(kind), Some(ms)) = (self.kind, self.duration_ms) {
            metrics::histogram!(ITEM_SECONDS, "kind" => kind, "outcome" => event.clone()).record(ms as f64 / 1000.0);
        }
        for (label, value) in self.crawl {
            match label {
                Some(outcome) => metrics::counter!(CRAWL_FILES, "outcome" => outcome).increment(value),
                None => metrics::counter!(CRAWL_BYTES).increment(value),
            }
        }
        metrics::counter!(EVENTS, "event" => event).increment(1);
    }
}

impl<S: tracing::Subscriber> Layer<S> for EventMetrics {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        fields.record(&self.recent);
    }
}

/// Only events that name themselves: decided once per call site, whatever the level.
fn named_events() -> FilterFn {
    FilterFn::new(|meta: &tracing::Metadata<'_>| meta.is_event() && meta.fields().field("event").is_some())
}

/// The human format's fields, of events and spans alike: `name=value` as tracing's default writes them, with
/// every control character of a value or of the message escaped (`\n`, `\r`, `\t`, others as `\u{1b}`), so
/// a file name holding a newline cannot write a line of its own and one holding a terminal escape sequence
/// cannot drive the operator's terminal. The JSON format escapes them already (it is JSON).
#[derive(Debug, Clone, Copy, Default)]
pub struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> std::fmt::Result {
        let mut visitor = EscapingVisitor { writer, first: true, result: Ok(()) };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct EscapingVisitor<'writer> {
    writer: Writer<'writer>,
    first: bool,
    result: std::fmt::Result,
}

impl EscapingVisitor<'_> {
    fn write(&mut self, field: &Field, value: std::fmt::Arguments<'_>) {
        use std::fmt::Write;
        if self.result.is_err() {
            return;
        }
        let separator = if std::mem::take(&mut self.first) { "" } else { " " };
        self.result = match field.name() {
            "message" => write!(self.writer, "{separator}"),
            name => write!(self.writer, "{separator}{}=", name.strip_prefix("r#").unwrap_or(name)),
        }
        .and_then(|()| Escaping(&mut self.writer).write_fmt(value));
    }
}

impl Visit for EscapingVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        // As tracing's own format: the message bare, other strings quoted.
        if field.name() == "message" {
            self.write(field, format_args!("{value}"));
        } else {
            self.write(field, format_args!("{value:?}"));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.write(field, format_args!("{value:?}"));
    }
}

/// Writes through to the inner writer with every control character (C0, DEL, C1) escaped.
struct Escaping<'a, W>(&'a mut W);

impl<W: std::fmt::Write> std::fmt::Write for Escaping<'_, W> {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        let mut rest = text;
        while let Some(at) = rest.find(char::is_control) {
            self.0.write_str(&rest[..at])?;
            let c = rest[at..].chars().next().expect("found at this index");
            match c {
                '\n' => self.0.write_str("\\n")?,
                '\r' => self.0.write_str("\\r")?,
                '\t' => self.0.write_str("\\t")?,
                c => write!(self.0, "\\u{{{:x}}}", u32::from(c))?,
            }
            rest = &rest[at + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

/// The subscriber: the counting layer with its own filter, and the chosen format on `writer` behind
/// `log.level`; the human format colours its lines when `ansi`.
pub fn subscriber<W>(
    log: &Log,
    writer: W,
    recent: &Recent,
    ansi: bool,
) -> anyhow::Result<impl tracing::Subscriber + Send + Sync>
where
    W: for<'w> fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = EnvFilter::try_new(&log.level).map_err(|e| anyhow::anyhow!("log.level: {e}"))?;
    let printed: Box<dyn Layer<Registry> + Send + Sync> = match log.format {
        LogFormat::Human => {
            Box::new(fmt::layer().fmt_fields(EscapedFields).with_ansi(ansi).with_writer(writer).with_filter(filter))
        }
        LogFormat::Json => Box::new(
            fmt::layer().json().with_current_span(true).with_span_list(false).with_writer(writer).with_filter(filter),
        ),
    };
    let counted = EventMetrics { recent: recent.clone() };
    Ok(Registry::default().with(printed).with(counted.with_filter(named_events())))
}

/// Installs the global subscriber, printing on stderr; returns the outage events it keeps.
pub fn init(log: &Log) -> anyhow::Result<Recent> {
    let recent = Recent::default();
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    subscriber(log, std::io::stderr, &recent, ansi)?.try_init()?;
    Ok(recent)
}

#[cfg(test)]
mod tests {
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
            info!(event = "crawl_finished", files_found = 5u64, "done");
        });
        let series =
            |le: &str| format!(r#"almanac_item_duration_seconds_bucket{{kind="crawl",outcome="succeeded",le="{le}"}}"#);
        assert_eq!(value(&text, &series("0.1")), Some(1.0), "{text}");
        assert_eq!(value(&text, &series("5")), Some(2.0), "{text}");
        assert_eq!(value(&text, &series("3600")), Some(2.0), "two hours is above every bucket: {text}");
        assert_eq!(value(&text, &series("+Inf")), Some(3.0), "{text}");
        assert!(text.contains("# TYPE almanac_item_duration_seconds histogram"), "{text}");
        assert_eq!(value(&text, r#"almanac_crawl_files_total{outcome="found"}"#), Some(15.0), "{text}");
        assert_eq!(value(&text, r#"almanac_crawl_files_total{outcome="failed"}"#), Some(1.0), "{text}");
        assert_eq!(value(&text, "almanac_crawl_hashed_bytes_total"), Some(100.0), "{text}");
    }
}
