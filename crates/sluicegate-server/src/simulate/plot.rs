//! `--plot`: allowed and rejected requests over time as stacked bars, one panel per limiter, in
//! plain SVG (no plotting dependency, nothing to rasterise).

use std::fmt::Write as _;
use std::path::Path;

use sluicegate::Micros;
use sluicegate::rate::format_duration_micros;
use sluicegate::spec::AlgorithmSpec;

/// What happened at one instant, as drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mark {
    Allowed,
    Rejected,
    /// A `set_rate`: drawn as a dashed line.
    RateChange,
}

/// One limiter's marks.
#[derive(Debug, Clone)]
pub(crate) struct Panel {
    title: String,
    marks: Vec<(Micros, Mark)>,
}

impl Panel {
    pub(crate) fn new(spec: &AlgorithmSpec) -> Self {
        Panel {
            title: spec.to_string(),
            marks: Vec::new(),
        }
    }

    pub(crate) fn record(&mut self, t: Micros, mark: Mark) {
        self.marks.push((t, mark));
    }

    fn count(&self, mark: Mark) -> usize {
        self.marks.iter().filter(|(_, m)| *m == mark).count()
    }
}

pub(crate) const WIDTH: f64 = 960.0;
pub(crate) const LEFT: f64 = 64.0;
pub(crate) const RIGHT: f64 = 24.0;
const LEGEND_HEIGHT: f64 = 36.0;
const TITLE_HEIGHT: f64 = 28.0;
const PLOT_HEIGHT: f64 = 150.0;
const AXIS_HEIGHT: f64 = 40.0;
const PANEL_HEIGHT: f64 = TITLE_HEIGHT + PLOT_HEIGHT + AXIS_HEIGHT;
const MAX_BINS: u64 = 120;
const ALLOWED_COLOUR: &str = "#2e7d32";
const REJECTED_COLOUR: &str = "#c62828";
const RATE_COLOUR: &str = "#1565c0";

/// Writes the plot of `panels` (one per limiter, all on the same time axis) to `path`.
pub(crate) fn write_svg(path: &Path, panels: &[Panel]) -> std::io::Result<()> {
    std::fs::write(path, render(panels))
}

/// The scales every panel shares: the same traffic runs through each limiter.
struct Axes {
    bin: Micros,
    bins: u64,
    max_per_bin: u64,
}

impl Axes {
    fn new(panels: &[Panel]) -> Self {
        let end = panels
            .iter()
            .flat_map(|p| p.marks.iter().map(|(t, _)| *t))
            .max()
            .unwrap_or(0);
        let bin = nice_step(end / MAX_BINS + 1);
        let bins = end / bin + 1;
        let max_per_bin = panels
            .iter()
            .flat_map(|p| stacks(p, bin, bins))
            .map(|(allowed, rejected)| allowed + rejected)
            .max()
            .unwrap_or(0)
            .max(1);
        // Up to the next grid line, so the tallest bar sits under a labelled line.
        let max_per_bin = max_per_bin.next_multiple_of(count_step(max_per_bin));
        Axes {
            bin,
            bins,
            max_per_bin,
        }
    }

    /// The time the axis spans: whole bins, up to the end of time (a trace's `t` may be
    /// near `u64::MAX` µs, where one more bin would overflow).
    fn span(&self) -> Micros {
        self.bins.saturating_mul(self.bin)
    }

    fn x(&self, t: Micros) -> f64 {
        LEFT + (WIDTH - LEFT - RIGHT) * t as f64 / self.span() as f64
    }

    fn height(&self, count: u64) -> f64 {
        PLOT_HEIGHT * count as f64 / self.max_per_bin as f64
    }
}

/// Allowed and rejected requests in each bin.
fn stacks(panel: &Panel, bin: Micros, bins: u64) -> Vec<(u64, u64)> {
    let mut stacks = vec![(0, 0); usize::try_from(bins).unwrap_or(0)];
    for (t, mark) in &panel.marks {
        let Some(stack) = stacks.get_mut(usize::try_from(t / bin).unwrap_or(usize::MAX)) else {
            continue;
        };
        match mark {
            Mark::Allowed => stack.0 += 1,
            Mark::Rejected => stack.1 += 1,
            Mark::RateChange => {}
        }
    }
    stacks
}

/// The smallest 1-2-5 step (in µs, at least 1ms) of at least `at_least`.
fn nice_step(at_least: Micros) -> Micros {
    let mut magnitude: Micros = 1_000;
    loop {
        for factor in [1, 2, 5] {
            let step = magnitude.saturating_mul(factor);
            if step >= at_least || step == Micros::MAX {
                return step;
            }
        }
        magnitude = magnitude.saturating_mul(10);
    }
}

/// An SVG document `WIDTH` wide and `height` high, on white, opened (the caller closes it).
pub(crate) fn svg_start(height: f64) -> String {
    let mut svg = String::new();
    // Writing into a String cannot fail.
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="{WIDTH}" height="{height}" fill="white"/>"#
    );
    svg
}

pub(crate) fn render(panels: &[Panel]) -> String {
    let axes = Axes::new(panels);
    let height = LEGEND_HEIGHT + PANEL_HEIGHT * panels.len() as f64;
    let mut svg = svg_start(height);
    legend(&mut svg, &axes);
    for (index, panel) in panels.iter().enumerate() {
        draw_panel(&mut svg, &axes, index, panel);
    }
    svg.push_str("</svg>\n");
    svg
}

fn legend(svg: &mut String, axes: &Axes) {
    let y = 14.0;
    let _ = writeln!(
        svg,
        r#"<g class="legend"><rect x="{LEFT}" y="{y}" width="12" height="12" fill="{ALLOWED_COLOUR}"/><text x="{}" y="{}">allowed</text><rect x="{}" y="{y}" width="12" height="12" fill="{REJECTED_COLOUR}"/><text x="{}" y="{}">rejected</text><line x1="{}" y1="{y}" x2="{}" y2="{}" stroke="{RATE_COLOUR}" stroke-dasharray="4 3"/><text x="{}" y="{}">set_rate</text><text x="{}" y="{}" text-anchor="end">requests per {} bin</text></g>"#,
        LEFT + 16.0,
        y + 11.0,
        LEFT + 90.0,
        LEFT + 106.0,
        y + 11.0,
        LEFT + 185.0,
        LEFT + 185.0,
        y + 12.0,
        LEFT + 191.0,
        y + 11.0,
        WIDTH - RIGHT,
        y + 11.0,
        format_duration_micros(axes.bin),
    );
}

fn draw_panel(svg: &mut String, axes: &Axes, index: usize, panel: &Panel) {
    let top = LEGEND_HEIGHT + PANEL_HEIGHT * index as f64;
    let base = top + TITLE_HEIGHT + PLOT_HEIGHT;
    let (left, right) = (LEFT, WIDTH - RIGHT);
    let _ = writeln!(svg, r#"<g class="panel" id="limiter-{index}">"#);
    let _ = writeln!(
        svg,
        r#"<text x="{left}" y="{}" font-weight="bold">#{index} {}</text><text x="{right}" y="{}" text-anchor="end">{} allowed, {} rejected</text>"#,
        top + 18.0,
        escape(&panel.title),
        top + 18.0,
        panel.count(Mark::Allowed),
        panel.count(Mark::Rejected),
    );
    // Horizontal grid with counts.
    let y_step = count_step(axes.max_per_bin);
    let mut count = 0;
    while count <= axes.max_per_bin {
        let y = base - axes.height(count);
        let _ = writeln!(
            svg,
            r##"<line x1="{left}" y1="{y:.1}" x2="{right}" y2="{y:.1}" stroke="#e0e0e0"/><text x="{}" y="{:.1}" text-anchor="end">{count}</text>"##,
            left - 6.0,
            y + 4.0
        );
        count += y_step;
    }
    // Bars: allowed at the bottom, rejected stacked on top.
    let bar_width = (axes.x(axes.bin) - axes.x(0) - 1.0).max(1.0);
    for (i, (allowed, rejected)) in stacks(panel, axes.bin, axes.bins).into_iter().enumerate() {
        let x = axes.x(i as u64 * axes.bin);
        let (allowed_h, rejected_h) = (axes.height(allowed), axes.height(rejected));
        if allowed > 0 {
            let _ = writeln!(
                svg,
                r#"<rect class="allowed" x="{x:.1}" y="{:.1}" width="{bar_width:.1}" height="{allowed_h:.1}" fill="{ALLOWED_COLOUR}"/>"#,
                base - allowed_h
            );
        }
        if rejected > 0 {
            let _ = writeln!(
                svg,
                r#"<rect class="rejected" x="{x:.1}" y="{:.1}" width="{bar_width:.1}" height="{rejected_h:.1}" fill="{REJECTED_COLOUR}"/>"#,
                base - allowed_h - rejected_h
            );
        }
    }
    for (t, _) in panel.marks.iter().filter(|(_, m)| *m == Mark::RateChange) {
        let x = axes.x(*t);
        let _ = writeln!(
            svg,
            r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{base:.1}" stroke="{RATE_COLOUR}" stroke-dasharray="4 3"/>"#,
            base - PLOT_HEIGHT
        );
    }
    // Time axis.
    let _ = writeln!(
        svg,
        r#"<line x1="{left}" y1="{base:.1}" x2="{right}" y2="{base:.1}" stroke="black"/>"#
    );
    let span = axes.span();
    let t_step = nice_step(span / 10 + 1);
    let mut t = 0;
    while t <= span {
        let x = axes.x(t);
        let _ = writeln!(
            svg,
            r#"<line x1="{x:.1}" y1="{base:.1}" x2="{x:.1}" y2="{:.1}" stroke="black"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            base + 4.0,
            base + 17.0,
            seconds_label(t)
        );
        match t.checked_add(t_step) {
            Some(next) => t = next,
            None => break,
        }
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">time (s)</text>"#,
        (left + right) / 2.0,
        base + 33.0
    );
    svg.push_str("</g>\n");
}

/// A 1-2-5 step giving at most about five grid lines up to `max`.
fn count_step(max: u64) -> u64 {
    let mut magnitude: u64 = 1;
    loop {
        for factor in [1, 2, 5] {
            let step = magnitude.saturating_mul(factor);
            if max / step <= 5 || step == u64::MAX {
                return step;
            }
        }
        magnitude = magnitude.saturating_mul(10);
    }
}

pub(crate) fn seconds_label(micros: Micros) -> String {
    let text = format!("{:.3}", micros as f64 / 1e6);
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_and_steps_are_round() {
        assert_eq!(nice_step(1), 1_000);
        assert_eq!(nice_step(1_001), 2_000);
        assert_eq!(nice_step(83_334), 100_000);
        assert_eq!(count_step(3), 1);
        assert_eq!(count_step(50), 10);
        assert_eq!(seconds_label(2_500_000), "2.5");
        assert_eq!(seconds_label(0), "0");
    }

    #[test]
    fn draws_one_panel_per_limiter_with_bars() -> Result<(), sluicegate::ConfigError> {
        let mut a = Panel::new(&"gcra:rate=1/s,burst=1".parse()?);
        let mut b = Panel::new(&"concurrency:limit=1".parse()?);
        a.record(0, Mark::Allowed);
        a.record(0, Mark::Rejected);
        a.record(1_000_000, Mark::RateChange);
        b.record(0, Mark::Allowed);
        b.record(0, Mark::Allowed);
        let svg = render(&[a, b]);
        assert_eq!(svg.matches(r#"class="panel""#).count(), 2);
        assert_eq!(svg.matches(r#"class="allowed""#).count(), 2);
        assert_eq!(svg.matches(r#"class="rejected""#).count(), 1);
        assert!(svg.contains("1 allowed, 1 rejected"));
        assert!(svg.contains("stroke-dasharray"));
        Ok(())
    }
}
