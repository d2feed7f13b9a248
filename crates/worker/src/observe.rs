//! Logs (human or JSON) and the metrics behind `/metrics`.
//!
//! Every log event with an `event` field (`claimed`, `self_stopped`, `lease_recovered`, …) is counted, so metrics
//! and logs never disagree about names; the counting layer has a filter of its own (events with an `event`
//! field, at any level), so `log.level` and `log.format` change what is printed, never what is counted. Outcome
//! events with a `kind` and `duration_ms` fill the item duration histogram; `crawl_finished` adds to the crawl
//! totals. The executor measures claim and heartbeat latency itself ([`almanac_executor::metrics`]); the
//! process's CPU, memory and open files come from `metrics-process`. Everything goes through the `metrics`
//! facade to one Prometheus recorder. Every event and every family is a row of [`table`], from which
//! docs/operations.md's lists are generated (`cargo xtask docs`) and against which the tidy tests check the code.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use almanac_domain::ports::{WatchMode, WatchState};
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

pub mod table;

pub use table::{
    CRAWL_BYTES, CRAWL_FILES, DATABASE_UP, EVENTS_TOTAL, ITEM_SECONDS, WATCH_MODE, WATCH_PENDING_FILES, WORK_ITEMS,
};

/// Upper bounds (seconds) of the item duration histogram buckets.
pub const DURATION_BUCKETS: [f64; 10] = [0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0];

/// The crawl fields counted, and the label (or family) each goes to.
const CRAWL_FIELDS: [(&str, Option<&str>); 5] = [
    ("files_found", Some("found")),
    ("files_ingested", Some("ingested")),
    ("files_failed", Some("failed")),
    ("files_settling", Some("settling")),
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

/// HELP text for every family of ours and the executor's (the process collector describes its own), from
/// [`table::METRICS`].
pub fn describe() {
    use metrics::Unit;
    use table::{MetricType, MetricUnit, Owner};
    for m in table::METRICS.iter().filter(|m| m.owner == Owner::Worker) {
        let unit = match m.unit {
            MetricUnit::Count => None,
            MetricUnit::Seconds => Some(Unit::Seconds),
            MetricUnit::Bytes => Some(Unit::Bytes),
        };
        metrics::with_recorder(|r| match m.kind {
            MetricType::Counter => r.describe_counter(m.name.into(), unit, m.help.into()),
            MetricType::Gauge => r.describe_gauge(m.name.into(), unit, m.help.into()),
            MetricType::Histogram => r.describe_histogram(m.name.into(), unit, m.help.into()),
        });
    }
    almanac_executor::metrics::describe();
}

/// The watch gauges of every config's watch as stored, in Prometheus's text format ([`WATCH_MODE`]: 1 for the
/// mode its holder reports, or `off` when no Worker holds it, 0 for the others; [`WATCH_PENDING_FILES`]). They
/// are written at each scrape from the store, not kept in the recorder, so a config removed has no series left.
pub fn render_watch_states(states: &[WatchState]) -> String {
    use std::fmt::Write;
    let mut text = String::new();
    let mut scrape_gauge = |name: &str, series: &mut dyn FnMut(&mut String, &WatchState)| {
        let help = table::METRICS.iter().find(|m| m.name == name).map_or("", |m| m.help);
        let _ = writeln!(text, "# HELP {name} {help}\n# TYPE {name} gauge");
        for state in states {
            series(&mut text, state);
        }
        text.push('\n');
    };
    scrape_gauge(WATCH_MODE, &mut |text, state| {
        let current = state.held.as_ref().map_or(WatchMode::Off, |h| h.report.mode);
        for mode in WatchMode::ALL {
            let on = u8::from(mode == current);
            let _ = writeln!(text, "{WATCH_MODE}{{config=\"{}\",mode=\"{}\"}} {on}", state.config, mode.as_str());
        }
    });
    scrape_gauge(WATCH_PENDING_FILES, &mut |text, state| {
        let pending = state.held.as_ref().map_or(0, |h| h.report.pending_files);
        let _ = writeln!(text, "{WATCH_PENDING_FILES}{{config=\"{}\"}} {pending}", state.config);
    });
    text
}

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
        if table::event_named(&event).is_some_and(|e| e.page) {
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
        metrics::counter!(EVENTS_TOTAL, "event" => event).increment(1);
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
        .and_then(|()| Escaping { inner: &mut self.writer, keep_layout: false }.write_fmt(value));
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

/// `text` as the command line prints it: every control character escaped as the logs escape it, but the line
/// ends and tabs the command line lays its output out with. Every line a command prints, and the error it ends
/// with, goes through it (`say!`), so a file name or an error holding a terminal escape sequence (a library's
/// owner can name files anything) cannot drive the operator's terminal.
pub fn shown(text: &str) -> String {
    escaped(text, true)
}

/// A value the command line prints inside its own layout (a path, an error, a root): every control character
/// escaped, line ends and tabs too, so a value cannot start a row or a column of its own.
pub fn value_shown(text: &str) -> String {
    escaped(text, false)
}

/// `text` through [`Escaping`].
fn escaped(text: &str, keep_layout: bool) -> String {
    let mut out = String::with_capacity(text.len());
    let _ = std::fmt::Write::write_str(&mut Escaping { inner: &mut out, keep_layout }, text);
    out
}

/// JSON the command line prints: serde_json escapes C0 control characters in strings but leaves DEL and C1 as
/// they are; here they are written as JSON's own escapes (`\u0085`), so the text stays valid JSON for a script and
/// drives no terminal. Outside strings, JSON holds no control character but the pretty format's line ends.
pub fn json_shown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() && c != '\n' {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// Writes through to the inner writer with every control character (C0, DEL, C1) escaped; with `keep_layout`,
/// line ends and tabs pass as they are.
struct Escaping<'a, W> {
    inner: &'a mut W,
    keep_layout: bool,
}

impl<W: std::fmt::Write> std::fmt::Write for Escaping<'_, W> {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        let keep_layout = self.keep_layout;
        let escaped = |c: char| c.is_control() && !(keep_layout && matches!(c, '\n' | '\t'));
        let mut rest = text;
        while let Some(at) = rest.find(escaped) {
            self.inner.write_str(&rest[..at])?;
            let c = rest[at..].chars().next().expect("found at this index");
            match c {
                '\n' => self.inner.write_str("\\n")?,
                '\r' => self.inner.write_str("\\r")?,
                '\t' => self.inner.write_str("\\t")?,
                c => write!(self.inner, "\\u{{{:x}}}", u32::from(c))?,
            }
            rest = &rest[at + c.len_utf8()..];
        }
        self.inner.write_str(rest)
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
mod tests;
