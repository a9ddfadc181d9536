//! `--plot` for `--adaptive`: per run, the limit and in-flight, the latency, and the goodput
//! over time, as line charts in the style of the limiter plot (plain SVG, the same widths,
//! fonts and time axis).

use std::fmt::Write as _;
use std::path::Path;

use sluicegate::Micros;

use crate::simulate::adaptive::engine::{Run, Second};
use crate::simulate::adaptive::server::ServerSpec;
use crate::simulate::plot::{self, LEFT, RIGHT, WIDTH, escape, seconds_label};

/// One run to draw, under its title.
#[derive(Debug, Clone, Copy)]
pub struct Panel<'a> {
    /// The gate's name (a controller spec).
    pub title: &'a str,
    /// What it did.
    pub run: &'a Run,
}

const LEGEND_HEIGHT: f64 = 36.0;
const TITLE_HEIGHT: f64 = 42.0;
const CHART_HEIGHT: f64 = 80.0;
const CHART_GAP: f64 = 22.0;
const AXIS_HEIGHT: f64 = 40.0;
const CHARTS: usize = 3;
const PANEL_HEIGHT: f64 =
    TITLE_HEIGHT + CHARTS as f64 * (CHART_HEIGHT + CHART_GAP) - CHART_GAP + AXIS_HEIGHT;
const LIMIT_COLOUR: &str = "#1565c0";
const IN_FLIGHT_COLOUR: &str = "#ef6c00";
const P99_COLOUR: &str = "#c62828";
const P50_COLOUR: &str = "#9e9e9e";
const GOODPUT_COLOUR: &str = "#2e7d32";
const REFERENCE_COLOUR: &str = "#424242";

/// Writes the charts of `panels` (the same scenario under different limits) to `path`.
pub fn write_svg(path: &Path, server: &ServerSpec, panels: &[Panel<'_>]) -> std::io::Result<()> {
    std::fs::write(path, render(server, panels))
}

/// One series: a value (or a gap) per second.
struct Series<'a> {
    colour: &'a str,
    dashed: bool,
    values: Vec<Option<f64>>,
}

fn render(server: &ServerSpec, panels: &[Panel<'_>]) -> String {
    let seconds = panels
        .iter()
        .map(|p| p.run.seconds.len())
        .max()
        .unwrap_or(0);
    let height = LEGEND_HEIGHT + PANEL_HEIGHT * panels.len() as f64;
    let mut svg = plot::svg_start(height);
    legend(&mut svg);
    for (index, panel) in panels.iter().enumerate() {
        draw_panel(&mut svg, server, seconds, index, panel);
    }
    svg.push_str("</svg>\n");
    svg
}

fn legend(svg: &mut String) {
    let y = 14.0;
    let mut x = LEFT;
    svg.push_str(r#"<g class="legend">"#);
    for (name, colour, dashed) in [
        ("limit", LIMIT_COLOUR, false),
        ("in flight", IN_FLIGHT_COLOUR, false),
        ("p99", P99_COLOUR, false),
        ("p50", P50_COLOUR, false),
        ("goodput", GOODPUT_COLOUR, false),
        (
            "capacity, 2x unloaded p99, worker change",
            REFERENCE_COLOUR,
            true,
        ),
    ] {
        let dash = if dashed {
            r#" stroke-dasharray="4 3""#
        } else {
            ""
        };
        let _ = write!(
            svg,
            r#"<line x1="{x}" y1="{}" x2="{}" y2="{}" stroke="{colour}" stroke-width="2"{dash}/><text x="{}" y="{}">{name}</text>"#,
            y + 6.0,
            x + 16.0,
            y + 6.0,
            x + 20.0,
            y + 10.0
        );
        x += 28.0 + 7.0 * name.len() as f64;
    }
    svg.push_str("</g>\n");
}

fn draw_panel(svg: &mut String, server: &ServerSpec, seconds: usize, index: usize, panel: &Panel) {
    let top = LEGEND_HEIGHT + PANEL_HEIGHT * index as f64;
    let run = panel.run;
    let _ = writeln!(svg, r#"<g class="panel" id="run-{index}">"#);
    let p99 = run
        .p99_ms
        .map_or_else(|| "no answers".to_owned(), |p| format!("p99 {p:.0} ms"));
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="{}" font-weight="bold">{}</text><text x="{}" y="{}" text-anchor="end">goodput {}, {p99}</text>"#,
        top + 18.0,
        escape(panel.title),
        WIDTH - RIGHT,
        top + 18.0,
        run.goodput(),
    );
    let column = |f: fn(&Second) -> Option<f64>| run.seconds.iter().map(f).collect::<Vec<_>>();
    // Capacity at each second's start, in requests per second.
    let capacity: Vec<Option<f64>> = (0..seconds)
        .map(|s| Some(server.capacity_at(s as Micros * 1_000_000)))
        .collect();
    let two_unloaded = server.unloaded_p99() * 2.0 / 1e3;
    let charts = [
        (
            "concurrency",
            vec![
                Series {
                    colour: IN_FLIGHT_COLOUR,
                    dashed: false,
                    values: column(|s| Some(f64::from(s.in_flight))),
                },
                Series {
                    colour: LIMIT_COLOUR,
                    dashed: false,
                    values: column(|s| s.limit.map(f64::from)),
                },
            ],
        ),
        (
            "latency (ms)",
            vec![
                Series {
                    colour: REFERENCE_COLOUR,
                    dashed: true,
                    values: vec![Some(two_unloaded); seconds],
                },
                Series {
                    colour: P50_COLOUR,
                    dashed: false,
                    values: column(|s| s.p50_ms),
                },
                Series {
                    colour: P99_COLOUR,
                    dashed: false,
                    values: column(|s| s.p99_ms),
                },
            ],
        ),
        (
            "goodput (/s)",
            vec![
                Series {
                    colour: REFERENCE_COLOUR,
                    dashed: true,
                    values: capacity,
                },
                Series {
                    colour: GOODPUT_COLOUR,
                    dashed: false,
                    values: column(|s| Some(s.goodput as f64)),
                },
            ],
        ),
    ];
    for (chart, (label, series)) in charts.iter().enumerate() {
        let chart_top = top + TITLE_HEIGHT + chart as f64 * (CHART_HEIGHT + CHART_GAP);
        draw_chart(svg, chart_top, seconds, label, series);
        for (t, _) in server.changes() {
            let x = x_of(*t as f64 / 1e6, seconds);
            let _ = writeln!(
                svg,
                r#"<line class="change" x1="{x:.1}" y1="{chart_top:.1}" x2="{x:.1}" y2="{:.1}" stroke="{REFERENCE_COLOUR}" stroke-dasharray="4 3"/>"#,
                chart_top + CHART_HEIGHT
            );
        }
    }
    let base = top + TITLE_HEIGHT + CHARTS as f64 * (CHART_HEIGHT + CHART_GAP) - CHART_GAP;
    time_axis(svg, base, seconds);
    svg.push_str("</g>\n");
}

/// The x of time `t` (seconds) on a run of `seconds`.
fn x_of(t: f64, seconds: usize) -> f64 {
    let span = seconds.max(1) as f64;
    LEFT + (WIDTH - LEFT - RIGHT) * t / span
}

fn draw_chart(svg: &mut String, top: f64, seconds: usize, label: &str, series: &[Series]) {
    let base = top + CHART_HEIGHT;
    let highest = series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(0.0f64, |a, b| a.max(*b));
    let step = nice_step(highest / 3.0);
    let top_value = (highest / step).ceil().max(1.0) * step;
    let y_of = |v: f64| base - CHART_HEIGHT * v / top_value;
    let (left, right) = (LEFT, WIDTH - RIGHT);
    let _ = writeln!(
        svg,
        r#"<text x="{left}" y="{:.1}" fill="{REFERENCE_COLOUR}">{label}</text>"#,
        top - 4.0
    );
    let mut value = 0.0;
    while value <= top_value * (1.0 + 1e-9) {
        let y = y_of(value);
        let _ = writeln!(
            svg,
            r##"<line x1="{left}" y1="{y:.1}" x2="{right}" y2="{y:.1}" stroke="#e0e0e0"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            left - 6.0,
            y + 4.0,
            number_label(value)
        );
        value += step;
    }
    for s in series {
        let dash = if s.dashed {
            r#" stroke-dasharray="4 3""#
        } else {
            ""
        };
        // One polyline per stretch of known values, a point in the middle of each second; a
        // point between two of the same value adds nothing and is left out, so that flat
        // lines (a fixed limit, the capacity) cost two points, not one per second.
        let mut points = String::new();
        for (second, value) in s.values.iter().enumerate() {
            let Some(v) = value else {
                polyline(svg, s.colour, dash, &mut points);
                continue;
            };
            let before = second.checked_sub(1).and_then(|i| s.values[i]);
            let after = s.values.get(second + 1).copied().flatten();
            if before == Some(*v) && after == Some(*v) {
                continue;
            }
            if before.is_none() && after.is_none() {
                // A lone value: a line across its second, since one point draws nothing.
                let _ = write!(
                    points,
                    "{:.1},{y:.1} {:.1},{y:.1} ",
                    x_of(second as f64, seconds),
                    x_of(second as f64 + 1.0, seconds),
                    y = y_of(*v)
                );
                continue;
            }
            let _ = write!(
                points,
                "{:.1},{:.1} ",
                x_of(second as f64 + 0.5, seconds),
                y_of(*v)
            );
        }
        polyline(svg, s.colour, dash, &mut points);
    }
    let _ = writeln!(
        svg,
        r#"<line x1="{left}" y1="{base:.1}" x2="{right}" y2="{base:.1}" stroke="black"/>"#
    );
}

/// Draws `points` as a line, if any, and empties them.
fn polyline(svg: &mut String, colour: &str, dash: &str, points: &mut String) {
    if points.is_empty() {
        return;
    }
    let _ = writeln!(
        svg,
        r#"<polyline fill="none" stroke="{colour}" stroke-width="1.5"{dash} points="{}"/>"#,
        points.trim_end()
    );
    points.clear();
}

fn time_axis(svg: &mut String, base: f64, seconds: usize) {
    let span = seconds.max(1) as u64;
    let step = nice_step(span as f64 / 10.0).max(1.0) as u64;
    let mut t = 0;
    while t <= span {
        let x = x_of(t as f64, seconds);
        let _ = writeln!(
            svg,
            r#"<line x1="{x:.1}" y1="{base:.1}" x2="{x:.1}" y2="{:.1}" stroke="black"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            base + 4.0,
            base + 17.0,
            seconds_label(t * 1_000_000)
        );
        t += step;
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">time (s)</text>"#,
        (LEFT + WIDTH - RIGHT) / 2.0,
        base + 33.0
    );
}

/// The smallest 1-2-5 step of at least `at_least` (and at least 1).
fn nice_step(at_least: f64) -> f64 {
    let mut magnitude = 1.0;
    while magnitude * 10.0 <= at_least {
        magnitude *= 10.0;
    }
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|f| f * magnitude)
        .find(|step| *step >= at_least)
        .unwrap_or(magnitude * 10.0)
}

fn number_label(value: f64) -> String {
    if value >= 10_000.0 {
        format!("{:.0}k", value / 1e3)
    } else {
        format!("{value:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn second(t: u64, p99: Option<f64>) -> Second {
        Second {
            t,
            limit: Some(10),
            limits: Vec::new(),
            in_flight: 5,
            p50_ms: p99.map(|p| p / 2.0),
            p99_ms: p99,
            goodput: 100,
            rejected: 0,
            timed_out: 0,
            errors: None,
            arrivals: 100,
        }
    }

    #[test]
    fn steps_are_round() {
        assert_eq!(nice_step(0.0), 1.0);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(34.0), 50.0);
        assert_eq!(nice_step(100.0), 100.0);
        assert_eq!(nice_step(101.0), 200.0);
        assert_eq!(number_label(25_000.0), "25k");
    }

    #[test]
    fn draws_three_charts_per_run_with_gaps_and_changes() -> Result<(), String> {
        let server = ServerSpec::parse("mmc:workers=2,service=10ms,change=2s:1")?;
        let run = Run {
            seconds: vec![
                second(1, Some(30.0)),
                second(2, None),
                second(3, Some(40.0)),
            ],
            p50_ms: Some(15.0),
            p99_ms: Some(40.0),
            settled_p99_ms: None,
        };
        let panels = [
            Panel {
                title: "a<b",
                run: &run,
            },
            Panel {
                title: "none",
                run: &run,
            },
        ];
        let svg = render(&server, &panels);
        assert_eq!(svg.matches(r#"class="panel""#).count(), 2);
        assert!(svg.contains("a&lt;b"));
        assert!(svg.contains("goodput 300, p99 40 ms"));
        // A second with no answer splits each panel's p99 line in two (and the legend has
        // one more).
        let red = svg.matches(&format!(r#"stroke="{P99_COLOUR}""#)).count();
        assert_eq!(red, 1 + 2 * 2);
        // One dashed line per chart for the worker change, in each panel.
        assert_eq!(svg.matches(r#"class="change""#).count(), 2 * CHARTS);
        Ok(())
    }
}
