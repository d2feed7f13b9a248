//! Small pictures drawn on the server as inline SVG: items per hour by outcome, and a crawl's rate over time.
//! Each has a text summary for screen readers and for whoever would rather read.

use almanac_domain::Status;
use almanac_store_pg::HourlyOutcome;
use chrono::{DateTime, Duration, DurationRound, Utc};
use maud::{Markup, html};

const WIDTH: f64 = 480.0;
const HEIGHT: f64 = 120.0;

/// Stacked bars: per hour of the last `hours`, items that succeeded, failed and were cancelled.
pub fn outcomes(rows: &[HourlyOutcome], now: DateTime<Utc>, hours: i64) -> Markup {
    let this_hour = now.duration_trunc(Duration::hours(1)).unwrap_or(now);
    let first = this_hour - Duration::hours(hours - 1);
    let count = |hour: DateTime<Utc>, status: Status| {
        rows.iter().filter(|r| r.hour == hour && r.status == status).map(|r| r.count).sum::<i64>()
    };
    let columns: Vec<[i64; 3]> = (0..hours)
        .map(|i| {
            let hour = first + Duration::hours(i);
            [count(hour, Status::Succeeded), count(hour, Status::Failed), count(hour, Status::Cancelled)]
        })
        .collect();
    let highest = columns.iter().map(|c| c.iter().sum::<i64>()).max().unwrap_or(0).max(1) as f64;
    let totals: [i64; 3] = [0, 1, 2].map(|k| columns.iter().map(|c| c[k]).sum());
    let bar = WIDTH / hours as f64;
    let summary = format!(
        "Last {hours} hours: {} succeeded, {} failed, {} cancelled; the busiest hour ended {} items.",
        totals[0], totals[1], totals[2], highest as i64
    );
    html! {
        figure {
            svg.chart viewBox=(format!("0 0 {WIDTH} {}", HEIGHT + 14.0)) role="img" aria-label=(summary) {
                title { (summary) }
                @for (i, column) in columns.iter().enumerate() {
                    @let x = i as f64 * bar;
                    @let mut y = HEIGHT;
                    @for (k, n) in column.iter().enumerate() {
                        @if *n > 0 {
                            @let h = *n as f64 / highest * HEIGHT;
                            @let top = { y -= h; y };
                            rect class=(["ok", "bad", "off"][k]) x=(fmt(x + 1.0)) y=(fmt(top)) width=(fmt(bar - 2.0)) height=(fmt(h)) {
                                title { (format!("{}: {n} {}", (first + Duration::hours(i as i64)).format("%H:00"), ["succeeded", "failed", "cancelled"][k])) }
                            }
                        }
                    }
                }
                line x1="0" y1=(HEIGHT) x2=(WIDTH) y2=(HEIGHT) class="axis" {}
                text x="0" y=(HEIGHT + 12.0) class="tick" { (first.format("%H:00")) }
                text x=(WIDTH) y=(HEIGHT + 12.0) class="tick" text-anchor="end" { (this_hour.format("%H:00 UTC")) }
            }
            figcaption { (summary) }
        }
    }
}

/// A line: files a second between consecutive samples of one crawl's progress.
pub fn rate(samples: &[(DateTime<Utc>, u64)]) -> Markup {
    let rates: Vec<(f64, f64)> = samples
        .windows(2)
        .filter_map(|w| {
            let seconds = (w[1].0 - w[0].0).num_milliseconds() as f64 / 1000.0;
            (seconds > 0.0).then(|| {
                (
                    (w[1].0 - samples[0].0).num_milliseconds() as f64 / 1000.0,
                    (w[1].1.saturating_sub(w[0].1)) as f64 / seconds,
                )
            })
        })
        .collect();
    if rates.len() < 2 {
        return html! { p.note { "The rate shows once a few samples are in (every few seconds)." } };
    }
    let span = rates.last().map_or(1.0, |r| r.0).max(1.0);
    let highest = rates.iter().map(|r| r.1).fold(0.0, f64::max).max(0.1);
    let points: Vec<String> = rates
        .iter()
        .map(|(t, r)| format!("{},{}", fmt(t / span * WIDTH), fmt(HEIGHT - r / highest * HEIGHT)))
        .collect();
    let latest = rates.last().map_or(0.0, |r| r.1);
    let summary =
        format!("Files a second over the last {}: now {latest:.1}, at most {highest:.1}.", humanize(span as u64));
    html! {
        figure {
            svg.chart viewBox=(format!("0 0 {WIDTH} {}", HEIGHT + 14.0)) role="img" aria-label=(summary) {
                title { (summary) }
                polyline class="rate" points=(points.join(" ")) {}
                line x1="0" y1=(HEIGHT) x2=(WIDTH) y2=(HEIGHT) class="axis" {}
                text x="0" y="10" class="tick" { (format!("{highest:.1}/s")) }
            }
            figcaption { (summary) }
        }
    }
}

fn fmt(v: f64) -> String {
    format!("{v:.1}")
}

/// `95` → `1 min 35 s`.
pub fn humanize(seconds: u64) -> String {
    match seconds {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min {} s", s / 60, s % 60),
        s => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_bars_are_stacked_per_hour_and_summarised() {
        let now: DateTime<Utc> = "2026-11-30T12:34:00Z".parse().unwrap();
        let at = |h: &str| -> DateTime<Utc> { format!("2026-11-30T{h}:00:00Z").parse().unwrap() };
        let rows = [
            HourlyOutcome { hour: at("12"), status: Status::Succeeded, count: 3 },
            HourlyOutcome { hour: at("12"), status: Status::Failed, count: 1 },
            HourlyOutcome { hour: at("10"), status: Status::Cancelled, count: 2 },
            // Outside the window: not drawn, not counted.
            HourlyOutcome { hour: at("01"), status: Status::Succeeded, count: 50 },
        ];
        let svg = outcomes(&rows, now, 6).into_string();
        assert!(
            svg.contains("Last 6 hours: 3 succeeded, 1 failed, 2 cancelled; the busiest hour ended 4 items."),
            "{svg}"
        );
        assert_eq!(svg.matches("<rect").count(), 3, "{svg}");
        assert!(svg.contains("12:00: 1 failed") && svg.contains("10:00: 2 cancelled"), "{svg}");
    }

    #[test]
    fn the_rate_is_files_a_second_between_samples() {
        let t0: DateTime<Utc> = "2026-11-30T12:00:00Z".parse().unwrap();
        assert!(rate(&[(t0, 0), (t0 + Duration::seconds(2), 10)]).into_string().contains("once a few samples"));
        let samples = [(t0, 0), (t0 + Duration::seconds(2), 10), (t0 + Duration::seconds(4), 30)];
        let svg = rate(&samples).into_string();
        assert!(svg.contains("now 10.0, at most 10.0") && svg.contains("<polyline"), "{svg}");
        assert_eq!(humanize(95), "1 min 35 s");
    }
}
