//! Logs (human or JSON) and the event counters behind `/metrics`: every log event with an `event` field
//! (`claimed`, `self_stopped`, `lease_recovered`, …) is counted, so metrics and logs never disagree.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry};

use crate::settings::{Log, LogFormat};

/// Upper bounds (seconds) of the item duration histogram buckets.
pub const DURATION_BUCKETS: [f64; 10] = [0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0];

/// One histogram: counts per bucket (cumulative when written out), sum and count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    pub buckets: [u64; DURATION_BUCKETS.len()],
    pub sum_seconds: f64,
    pub count: u64,
}

/// What the metrics show, gathered from log events.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// Events by their `event` field.
    pub events: BTreeMap<String, u64>,
    /// Item durations by (kind, outcome event), from the outcome events' `duration_ms`.
    pub durations: BTreeMap<(String, String), Histogram>,
    /// Crawl totals: files found, ingested, failed, bytes hashed.
    pub crawl: BTreeMap<&'static str, u64>,
}

/// Counts of log events by their `event` field, item duration histograms, and crawl totals.
#[derive(Debug, Clone, Default)]
pub struct EventCounts(Arc<Mutex<Observed>>);

impl EventCounts {
    /// A copy of what was observed.
    pub fn snapshot(&self) -> Observed {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[derive(Default)]
struct Fields {
    event: Option<String>,
    kind: Option<String>,
    duration_ms: Option<u64>,
    crawl: Vec<(&'static str, u64)>,
}

const CRAWL_FIELDS: [&str; 4] = ["files_found", "files_ingested", "files_failed", "bytes_hashed"];

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "event" => self.event = Some(value.to_owned()),
            "kind" => self.kind = Some(value.to_owned()),
            _ => {}
        }
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "duration_ms" => self.duration_ms = Some(value),
            name => {
                if let Some(known) = CRAWL_FIELDS.iter().find(|f| **f == name) {
                    self.crawl.push((known, value));
                }
            }
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let text = || format!("{value:?}").trim_matches('"').to_owned();
        match field.name() {
            "event" if self.event.is_none() => self.event = Some(text()),
            "kind" if self.kind.is_none() => self.kind = Some(text()),
            _ => {}
        }
    }
}

impl Observed {
    fn record(&mut self, fields: Fields) {
        let Some(event) = fields.event else { return };
        if let (Some(kind), Some(ms)) = (fields.kind, fields.duration_ms) {
            let seconds = ms as f64 / 1000.0;
            let h = self.durations.entry((kind, event.clone())).or_default();
            if let Some(i) = DURATION_BUCKETS.iter().position(|le| seconds <= *le) {
                h.buckets[i] += 1;
            }
            h.sum_seconds += seconds;
            h.count += 1;
        }
        for (name, value) in fields.crawl {
            *self.crawl.entry(name).or_default() += value;
        }
        *self.events.entry(event).or_default() += 1;
    }
}

impl<S: tracing::Subscriber> Layer<S> for EventCounts {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        self.0.lock().unwrap_or_else(|p| p.into_inner()).record(fields);
    }
}

/// Installs the global subscriber: the filter, the chosen format on stderr, and the counters.
pub fn init(log: &Log) -> anyhow::Result<EventCounts> {
    let counts = EventCounts::default();
    let filter = EnvFilter::try_new(&log.level).map_err(|e| anyhow::anyhow!("log.level: {e}"))?;
    let registry = Registry::default().with(counts.clone()).with(filter);
    match log.format {
        LogFormat::Human => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                    .with_writer(std::io::stderr),
            )
            .try_init()?,
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_writer(std::io::stderr),
            )
            .try_init()?,
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(event: &str, kind: Option<&str>, duration_ms: Option<u64>, crawl: Vec<(&'static str, u64)>) -> Fields {
        Fields { event: Some(event.into()), kind: kind.map(Into::into), duration_ms, crawl }
    }

    #[test]
    fn events_are_counted_and_outcomes_fill_duration_histograms() {
        let mut o = Observed::default();
        o.record(fields("claimed", None, None, vec![]));
        o.record(fields("succeeded", Some("crawl"), Some(100), vec![]));
        o.record(fields("succeeded", Some("crawl"), Some(2500), vec![]));
        o.record(fields("succeeded", Some("crawl"), Some(7_200_000), vec![]));
        o.record(Fields::default());
        assert_eq!(o.events.get("claimed"), Some(&1));
        assert_eq!(o.events.get("succeeded"), Some(&3));
        let h = &o.durations[&("crawl".to_owned(), "succeeded".to_owned())];
        assert_eq!(h.count, 3);
        assert_eq!(h.buckets[0], 1, "0.1 s falls in the first bucket (le=0.1)");
        assert_eq!(h.buckets[3], 1, "2.5 s in le=5");
        assert_eq!(h.buckets.iter().sum::<u64>(), 2, "two hours is above every bucket (only +Inf)");
        assert!((h.sum_seconds - 7202.6).abs() < 1e-9);
    }

    #[test]
    fn crawl_totals_add_up() {
        let mut o = Observed::default();
        o.record(fields("crawl_finished", None, None, vec![("files_found", 10), ("bytes_hashed", 100)]));
        o.record(fields("crawl_finished", None, None, vec![("files_found", 5)]));
        assert_eq!(o.crawl.get("files_found"), Some(&15));
        assert_eq!(o.crawl.get("bytes_hashed"), Some(&100));
    }
}
