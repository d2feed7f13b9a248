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
use tracing_subscriber::filter::{EnvFilter, FilterFn};
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
pub const OUTAGE_EVENTS: [&str; 10] = [
    "self_stopped",
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

/// The subscriber: the counting layer with its own filter, and the chosen format on `writer` behind
/// `log.level`.
pub fn subscriber<W>(log: &Log, writer: W, recent: &Recent) -> anyhow::Result<impl tracing::Subscriber + Send + Sync>
where
    W: for<'w> fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = EnvFilter::try_new(&log.level).map_err(|e| anyhow::anyhow!("log.level: {e}"))?;
    let printed: Box<dyn Layer<Registry> + Send + Sync> = match log.format {
        LogFormat::Human => {
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
            Box::new(fmt::layer().with_ansi(ansi).with_writer(writer).with_filter(filter))
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
    subscriber(log, std::io::stderr, &recent)?.try_init()?;
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
        let subscriber = subscriber(&log, std::io::sink, &Recent::default()).unwrap();
        metrics::with_local_recorder(&recorder, || {
            describe();
            tracing::subscriber::with_default(subscriber, emit);
        });
        handle.render()
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
        tracing::subscriber::with_default(subscriber(&log, std::io::sink, &recent).unwrap(), || {
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
        tracing::subscriber::with_default(subscriber(&log, std::io::sink, &recent).unwrap(), || {
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
