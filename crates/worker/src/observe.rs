//! Logs (human or JSON) and the event counters behind `/metrics`: every log event with an `event` field
//! (`claimed`, `self_stopped`, `lease_recovered`, …) is counted, so metrics and logs never disagree.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry};

use crate::settings::{Log, LogFormat};

/// Counts of log events by their `event` field.
#[derive(Debug, Clone, Default)]
pub struct EventCounts(Arc<Mutex<BTreeMap<String, u64>>>);

impl EventCounts {
    /// A copy of the counts.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

struct EventName(Option<String>);

impl Visit for EventName {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "event" {
            self.0 = Some(value.to_owned());
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "event" && self.0.is_none() {
            self.0 = Some(format!("{value:?}").trim_matches('"').to_owned());
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for EventCounts {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut name = EventName(None);
        event.record(&mut name);
        if let Some(name) = name.0 {
            *self.0.lock().unwrap_or_else(|p| p.into_inner()).entry(name).or_default() += 1;
        }
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
