//! `--adaptive`: which controller sets the limit, from a spec such as `vegas:max=100`.

use std::fmt;
use std::time::Duration;

use sluicegate::adaptive::{
    Aimd, AimdBuilder, Controller, EnvoyGradient, EnvoyGradientBuilder, Gradient2,
    Gradient2Builder, LimitBounds, Percentile, PercentileBuilder, QueueHeadroom, Sample, Vegas,
    VegasBuilder, Windowed,
};
use sluicegate::{ConfigError, Micros, parse_duration};

/// A controller spec, `NAME[:key=value,...]`, checked when read: building it later with any
/// seed cannot fail.
#[derive(Debug, Clone)]
pub struct ControllerSpec {
    text: String,
    kind: Kind,
    /// `window=DUR`: the controller hears one summary per window (Netflix's `WindowedLimit`,
    /// the average latency) instead of every sample.
    window: Option<Duration>,
}

#[derive(Debug, Clone)]
enum Kind {
    /// No limit at all.
    None,
    Fixed(u32),
    Aimd(AimdBuilder),
    Vegas(VegasBuilder),
    Gradient2(Gradient2Builder),
    Envoy(EnvoyGradientBuilder),
    Percentile(PercentileBuilder),
}

const NAMES: &str = "aimd, vegas, gradient2, envoy-gradient, percentile, fixed, none";

/// The bounds every controller but `fixed` and `none` takes.
const BOUNDS: [&str; 3] = ["min", "max", "initial"];

/// Builder parameter names (as a [`ConfigError`] gives them) and the spec keys they are
/// written as, so that an error names what the user typed.
const SPEC_KEYS: [(&str, &str); 17] = [
    ("short_window", "short_window"),
    ("long_rise", "long_rise"),
    ("target_multiple", "multiple"),
    ("min_window", "window"),
    ("max_window", "window"),
    ("min_limit", "min"),
    ("max_limit", "max"),
    ("initial_limit", "initial"),
    ("backoff_ratio", "backoff"),
    ("rtt_tolerance", "tolerance"),
    ("probe_multiplier", "probe"),
    ("pinned_concurrency", "pinned"),
    ("min_rtt_buffer", "buffer"),
    ("min_rtt_request_count", "requests"),
    ("min_rtt_interval", "interval"),
    ("update_interval", "update"),
    ("reservoir", "reservoir"),
];

impl ControllerSpec {
    /// Reads a spec; every error names the controller and the parameter at fault.
    pub fn parse(text: &str) -> Result<ControllerSpec, String> {
        let (name, params) = text.split_once(':').unwrap_or((text, ""));
        let name = name.trim().to_ascii_lowercase();
        let takes: &[&str] = match name.as_str() {
            "none" => &[],
            "fixed" => &["limit"],
            "aimd" => &["backoff", "timeout", "window"],
            "vegas" => &["smoothing", "alpha", "beta", "probe", "window"],
            "gradient2" => &[
                "smoothing",
                "tolerance",
                "long_window",
                "short_window",
                "long_rise",
                "headroom",
                "backoff",
                "window",
            ],
            "envoy-gradient" => &[
                "pinned",
                "percentile",
                "buffer",
                "requests",
                "jitter",
                "interval",
                "update",
                "backoff",
            ],
            "percentile" => &[
                "target",
                "multiple",
                "p",
                "window",
                "min_samples",
                "backoff",
            ],
            _ => return Err(format!("unknown controller `{name}` (known: {NAMES})")),
        };
        let bounded = !matches!(name.as_str(), "none" | "fixed");
        let mut params = Params::read(&name, params, takes, bounded)?;
        let kind = match name.as_str() {
            "none" => Kind::None,
            "fixed" => Kind::Fixed(params.count("limit")?.ok_or_else(|| {
                "missing parameter `limit` for fixed (e.g. fixed:limit=20)".to_owned()
            })?),
            "aimd" => Kind::Aimd(params.aimd()?),
            "vegas" => Kind::Vegas(params.vegas()?),
            "gradient2" => Kind::Gradient2(params.gradient2()?),
            "envoy-gradient" => Kind::Envoy(params.envoy()?),
            _ => Kind::Percentile(params.percentile()?),
        };
        let spec = ControllerSpec {
            text: text.trim().to_owned(),
            kind,
            window: params.duration("window")?,
        };
        // Builds it once so that a bad combination (min above max) fails now, not mid-run;
        // the seed plays no part in what is valid.
        spec.build(0)
            .map_err(|e| explain(&name, &params.defaults, e))?;
        Ok(spec)
    }

    /// The controller, seeded (Vegas' re-probe jitter, the reservoirs' sampling) from `seed`;
    /// `None` for no limit.
    pub fn controller(&self, seed: u64) -> Option<Box<dyn Controller>> {
        // The spec was built once when read, so building it again cannot fail; a `None` here
        // would be a bug, and a run without a limit is the least surprising way to show it.
        self.build(seed).ok().flatten()
    }

    /// The lowest limit the controller may set: its `min` (a fixed limit's own; `None` for
    /// no limit).
    pub fn min_limit(&self) -> Option<u32> {
        Some(match &self.kind {
            Kind::None => return None,
            Kind::Fixed(limit) => *limit,
            Kind::Aimd(b) => b.clone().build().ok()?.bounds().min(),
            Kind::Vegas(b) => b.clone().build().ok()?.bounds().min(),
            Kind::Gradient2(b) => b.clone().build().ok()?.bounds().min(),
            Kind::Envoy(b) => b.clone().build().ok()?.bounds().min(),
            Kind::Percentile(b) => b.clone().build().ok()?.bounds().min(),
        })
    }

    /// Whether this spec sets no limit at all.
    pub fn is_unlimited(&self) -> bool {
        matches!(self.kind, Kind::None)
    }

    /// This spec with `limits`' bounds wherever it sets none of its own (a fixed limit and
    /// none take no bounds: they stay as they are). Its name stays the one it was written
    /// with.
    pub fn with_limits(&self, limits: &LimitsSpec) -> Result<ControllerSpec, String> {
        if matches!(self.kind, Kind::None | Kind::Fixed(_)) {
            return Ok(self.clone());
        }
        let (name, params) = self.text.split_once(':').unwrap_or((&self.text, ""));
        let mut params: Vec<String> = params
            .split(',')
            .filter(|p| !p.trim().is_empty())
            .map(str::to_owned)
            .collect();
        for (key, value) in limits.pairs() {
            let given = params
                .iter()
                .any(|p| p.split_once('=').is_some_and(|(k, _)| k.trim() == key));
            if let (false, Some(value)) = (given, value) {
                params.push(format!("{key}={value}"));
            }
        }
        let mut spec = ControllerSpec::parse(&format!("{name}:{}", params.join(",")))?;
        spec.text.clone_from(&self.text);
        Ok(spec)
    }

    fn build(&self, seed: u64) -> Result<Option<Box<dyn Controller>>, ConfigError> {
        Ok(Some(match &self.kind {
            Kind::None => return Ok(None),
            Kind::Fixed(limit) => Box::new(Fixed(*limit)),
            Kind::Aimd(builder) => self.windowed(builder.clone().build()?)?,
            Kind::Vegas(builder) => self.windowed(builder.clone().seed(seed).build()?)?,
            Kind::Gradient2(builder) => self.windowed(builder.clone().build()?)?,
            Kind::Envoy(builder) => Box::new(builder.clone().seed(seed).build()?),
            Kind::Percentile(builder) => Box::new(builder.clone().seed(seed).build()?),
        }))
    }
}

impl ControllerSpec {
    /// `controller`, wrapped in fixed windows of `window=` if given (which collect for at
    /// most ten seconds, or one window if longer, when short of samples).
    fn windowed<C: Controller + 'static>(
        &self,
        controller: C,
    ) -> Result<Box<dyn Controller>, ConfigError> {
        Ok(match self.window {
            None => Box::new(controller),
            Some(window) => Box::new(
                Windowed::builder(controller)
                    .min_window(window)
                    .max_window(window)
                    .max_collect(window.max(Duration::from_secs(10)))
                    .build()?,
            ),
        })
    }
}

impl fmt::Display for ControllerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// `--limits min=N,initial=N,max=N`: bounds for every adaptive controller that does not set
/// its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LimitsSpec {
    min: Option<u32>,
    initial: Option<u32>,
    max: Option<u32>,
}

impl LimitsSpec {
    /// Reads `min=N,initial=N,max=N` (any of the three).
    pub fn parse(text: &str) -> Result<LimitsSpec, String> {
        let mut limits = LimitsSpec::default();
        for item in text.split(',').filter(|item| !item.trim().is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("expected key=value in `{}`", item.trim()))?;
            let (key, value) = (key.trim(), value.trim());
            let n = match value.parse::<u32>() {
                Ok(n) if n > 0 => n,
                _ => {
                    return Err(format!(
                        "bad {key} `{value}`: expected a whole number, at least 1"
                    ));
                }
            };
            let slot = match key {
                "min" => &mut limits.min,
                "initial" => &mut limits.initial,
                "max" => &mut limits.max,
                _ => {
                    return Err(format!(
                        "unknown parameter `{key}` for --limits (it takes: min, initial, max)"
                    ));
                }
            };
            if slot.replace(n).is_some() {
                return Err(format!("parameter `{key}` given twice"));
            }
        }
        Ok(limits)
    }

    /// The initial limit, if set.
    pub fn initial(&self) -> Option<u32> {
        self.initial
    }

    fn pairs(&self) -> [(&'static str, Option<u32>); 3] {
        [
            ("min", self.min),
            ("initial", self.initial),
            ("max", self.max),
        ]
    }
}

/// A limit that never moves: the baseline that adaptive limits are measured against.
#[derive(Debug, Clone, Copy)]
struct Fixed(u32);

impl Controller for Fixed {
    fn on_sample(&mut self, _now: Micros, _sample: Sample) -> u32 {
        self.0
    }

    fn limit(&self) -> u32 {
        self.0
    }
}

/// A spec's `key=value` pairs, checked against what its controller takes.
struct Params<'a> {
    controller: String,
    values: Vec<(&'a str, &'a str)>,
    /// The controller's default bounds, quoted when a bound is out of order: `aimd:max=10`
    /// fails on the default `min` of 20, which the user never typed.
    defaults: Option<LimitBounds>,
}

impl<'a> Params<'a> {
    fn read(
        controller: &str,
        text: &'a str,
        takes: &[&str],
        bounded: bool,
    ) -> Result<Params<'a>, String> {
        let mut values: Vec<(&str, &str)> = Vec::new();
        for item in text.split(',').filter(|item| !item.trim().is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("expected key=value in `{}`", item.trim()))?;
            let key = key.trim();
            if !(takes.contains(&key) || bounded && BOUNDS.contains(&key)) {
                let mut all: Vec<&str> = takes.to_vec();
                if bounded {
                    all.extend(BOUNDS);
                }
                let all = if all.is_empty() {
                    "nothing".to_owned()
                } else {
                    all.join(", ")
                };
                return Err(format!(
                    "unknown parameter `{key}` for {controller} (it takes: {all})"
                ));
            }
            if values.iter().any(|(k, _)| *k == key) {
                return Err(format!("parameter `{key}` given twice"));
            }
            values.push((key, value.trim()));
        }
        Ok(Params {
            controller: controller.to_owned(),
            values,
            defaults: None,
        })
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.values.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn count(&self, key: &str) -> Result<Option<u32>, String> {
        self.get(key)
            .map(|text| match text.parse::<u32>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!(
                    "bad {key} `{text}` for {}: expected a whole number, at least 1",
                    self.controller
                )),
            })
            .transpose()
    }

    fn number(&self, key: &str) -> Result<Option<f64>, String> {
        self.get(key)
            .map(|text| match text.parse::<f64>() {
                Ok(x) if x.is_finite() => Ok(x),
                _ => Err(format!(
                    "bad {key} `{text}` for {}: expected a number, such as 0.5",
                    self.controller
                )),
            })
            .transpose()
    }

    fn duration(&self, key: &str) -> Result<Option<Duration>, String> {
        self.get(key)
            .map(|text| {
                parse_duration(text).map_err(|e| format!("bad {key} for {}: {e}", self.controller))
            })
            .transpose()
    }

    /// Sets the bounds given on a builder of any controller.
    fn bounds<B>(
        &mut self,
        builder: B,
        defaults: Option<LimitBounds>,
        set: [fn(B, u32) -> B; 3],
    ) -> Result<B, String> {
        self.defaults = defaults;
        let mut builder = builder;
        for (key, set) in BOUNDS.into_iter().zip(set) {
            if let Some(n) = self.count(key)? {
                builder = set(builder, n);
            }
        }
        Ok(builder)
    }

    fn aimd(&mut self) -> Result<AimdBuilder, String> {
        let defaults = Some(Aimd::default().bounds());
        let mut b = self.bounds(
            Aimd::builder(),
            defaults,
            [
                AimdBuilder::min_limit,
                AimdBuilder::max_limit,
                AimdBuilder::initial_limit,
            ],
        )?;
        if let Some(x) = self.number("backoff")? {
            b = b.backoff_ratio(x);
        }
        if let Some(d) = self.duration("timeout")? {
            b = b.timeout(d);
        }
        Ok(b)
    }

    fn vegas(&mut self) -> Result<VegasBuilder, String> {
        let defaults = Some(Vegas::default().bounds());
        let mut b = self.bounds(
            Vegas::builder(),
            defaults,
            [
                VegasBuilder::min_limit,
                VegasBuilder::max_limit,
                VegasBuilder::initial_limit,
            ],
        )?;
        if let Some(x) = self.number("smoothing")? {
            b = b.smoothing(x);
        }
        // Netflix's defaults, 3 and 6, for whichever of the two is not given.
        let (alpha, beta) = (self.count("alpha")?, self.count("beta")?);
        if alpha.is_some() || beta.is_some() {
            b = b.alpha_beta(alpha.unwrap_or(3), beta.unwrap_or(6));
        }
        if let Some(n) = self.count("probe")? {
            b = b.probe_multiplier(n);
        }
        Ok(b)
    }

    fn gradient2(&mut self) -> Result<Gradient2Builder, String> {
        let defaults = Some(Gradient2::default().bounds());
        let mut b = self.bounds(
            Gradient2::builder(),
            defaults,
            [
                Gradient2Builder::min_limit,
                Gradient2Builder::max_limit,
                Gradient2Builder::initial_limit,
            ],
        )?;
        if let Some(x) = self.number("smoothing")? {
            b = b.smoothing(x);
        }
        if let Some(x) = self.number("tolerance")? {
            b = b.rtt_tolerance(x);
        }
        if let Some(n) = self.count("long_window")? {
            b = b.long_window(n);
        }
        if let Some(n) = self.count("headroom")? {
            b = b.queue_headroom(QueueHeadroom::Fixed(n));
        }
        if let Some(n) = self.count("short_window")? {
            b = b.short_window(n);
        }
        if let Some(x) = self.number("long_rise")? {
            b = b.long_rise(x);
        }
        if let Some(x) = self.number("backoff")? {
            b = b.backoff_ratio(x);
        }
        Ok(b)
    }

    fn envoy(&mut self) -> Result<EnvoyGradientBuilder, String> {
        let defaults = Some(EnvoyGradient::default().bounds());
        let mut b = self.bounds(
            EnvoyGradient::builder(),
            defaults,
            [
                EnvoyGradientBuilder::min_limit,
                EnvoyGradientBuilder::max_limit,
                EnvoyGradientBuilder::initial_limit,
            ],
        )?;
        if let Some(n) = self.count("pinned")? {
            b = b.pinned_concurrency(n);
        }
        if let Some(x) = self.number("percentile")? {
            b = b.percentile(x);
        }
        if let Some(x) = self.number("buffer")? {
            b = b.min_rtt_buffer(x);
        }
        if let Some(n) = self.count("requests")? {
            b = b.min_rtt_request_count(n);
        }
        if let Some(x) = self.number("jitter")? {
            b = b.jitter(x);
        }
        if let Some(d) = self.duration("interval")? {
            b = b.min_rtt_interval(d);
        }
        if let Some(d) = self.duration("update")? {
            b = b.update_interval(d);
        }
        if let Some(x) = self.number("backoff")? {
            b = b.backoff_ratio(x);
        }
        Ok(b)
    }

    fn percentile(&mut self) -> Result<PercentileBuilder, String> {
        let defaults = Some(Percentile::default().bounds());
        let mut builder = Percentile::relative_builder();
        match (self.duration("target")?, self.number("multiple")?) {
            (Some(_), Some(_)) => {
                return Err(
                    "percentile takes a fixed `target` or a relative `multiple`, not both"
                        .to_owned(),
                );
            }
            (Some(target), None) => builder = builder.target(target),
            (None, Some(multiple)) => builder = builder.target_multiple(multiple),
            (None, None) => {}
        }
        let mut b = self.bounds(
            builder,
            defaults,
            [
                PercentileBuilder::min_limit,
                PercentileBuilder::max_limit,
                PercentileBuilder::initial_limit,
            ],
        )?;
        if let Some(x) = self.number("p")? {
            b = b.percentile(x);
        }
        if let Some(d) = self.duration("window")? {
            b = b.window(d);
        }
        if let Some(n) = self.count("min_samples")? {
            b = b.min_samples(n);
        }
        if let Some(x) = self.number("backoff")? {
            b = b.backoff_ratio(x);
        }
        Ok(b)
    }
}

/// A builder's error in the spec's own words: `min`, not `min_limit`.
fn explain(controller: &str, defaults: &Option<LimitBounds>, error: ConfigError) -> String {
    let key = |name: &str| -> String {
        let key = SPEC_KEYS
            .iter()
            .find(|(builder, _)| *builder == name)
            .map_or(name, |(_, key)| *key);
        // The percentile controller's own percentile is written `p`.
        if controller == "percentile" && key == "percentile" {
            "p".to_owned()
        } else {
            key.to_owned()
        }
    };
    match error {
        ConfigError::InvalidParameter {
            name,
            value,
            reason,
        } => {
            format!("bad {} `{value}` for {controller}: {reason}", key(name))
        }
        ConfigError::OutOfOrder {
            low_name,
            low,
            high_name,
            high,
        } => {
            let mut text = format!(
                "{} ({low}) must not exceed {} ({high}) for {controller}",
                key(low_name),
                key(high_name)
            );
            if let Some(d) = defaults {
                text.push_str(&format!(
                    " (its defaults: min {}, initial {}, max {})",
                    d.min(),
                    d.initial(),
                    d.max()
                ));
            }
            text
        }
        other => format!("{controller}: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample that found the limit full, at `rtt`.
    fn busy(rtt: Micros, in_flight: u32) -> Sample {
        Sample::ok(0, rtt, in_flight)
    }

    #[test]
    fn builds_each_controller_with_its_bounds() -> Result<(), String> {
        for (text, initial) in [
            ("aimd", 20),
            ("aimd:min=2,initial=5,max=9,backoff=0.5,timeout=2s", 5),
            ("vegas:initial=7,alpha=2,beta=4,probe=10,smoothing=0.5", 7),
            (
                "gradient2:min=1,initial=3,tolerance=2,long_window=100,headroom=2",
                3,
            ),
            (
                "envoy-gradient:min=2,initial=4,pinned=2,update=50ms,interval=30s",
                4,
            ),
            ("percentile", 10),
            ("percentile:multiple=3,initial=6", 6),
            ("gradient2:short_window=5,long_rise=2,backoff=0.8", 20),
            ("percentile:target=50ms,p=0.9,initial=8,window=500ms", 8),
            ("fixed:limit=13", 13),
            (" Fixed:limit=13 ", 13),
        ] {
            let spec = ControllerSpec::parse(text)?;
            let controller = spec.controller(9).ok_or(text)?;
            // Envoy's controller measures its first minimum RTT at the initial limit.
            assert_eq!(controller.limit(), initial, "{text}");
            assert_eq!(spec.to_string(), text.trim());
        }
        let none = ControllerSpec::parse("none")?;
        assert!(none.is_unlimited());
        assert!(none.controller(0).is_none());
        Ok(())
    }

    #[test]
    fn the_parameters_reach_the_controller() -> Result<(), String> {
        // backoff=0.5 halves AIMD's limit on a timeout, where the default 0.9 would not.
        let mut aimd = ControllerSpec::parse("aimd:min=1,initial=10,backoff=0.5")?
            .controller(0)
            .ok_or("aimd")?;
        assert_eq!(aimd.on_sample(0, Sample::timeout(0, 1_000, 10)), 5);
        // A fixed limit ignores every sample.
        let mut fixed = ControllerSpec::parse("fixed:limit=4")?
            .controller(0)
            .ok_or("fixed")?;
        assert_eq!(fixed.on_sample(0, Sample::timeout(0, 1, 4)), 4);
        Ok(())
    }

    #[test]
    fn a_window_feeds_one_sample_per_window() -> Result<(), String> {
        // Per sample, AIMD grows by one for each busy answer; windowed, once per window.
        let mut plain = ControllerSpec::parse("aimd:min=1,initial=10")?
            .controller(0)
            .ok_or("aimd")?;
        let mut windowed = ControllerSpec::parse("aimd:min=1,initial=10,window=1s")?
            .controller(0)
            .ok_or("aimd")?;
        for t in 1..=20 {
            plain.on_sample(t * 10_000, busy(5_000, 100));
            windowed.on_sample(t * 10_000, busy(5_000, 100));
        }
        assert_eq!(plain.limit(), 30);
        // The first window, opened by the first sample, is still open.
        assert_eq!(windowed.limit(), 10);
        Ok(())
    }

    #[test]
    fn errors_use_the_spec_words() {
        for (text, needle) in [
            ("tcp", "unknown controller `tcp` (known: aimd,"),
            (
                "aimd:min=5,max=4",
                "min (5) must not exceed max (4) for aimd",
            ),
            ("aimd:max=10", "(its defaults: min 1, initial 20, max 200)"),
            ("percentile:target=1s,multiple=2", "not both"),
            ("percentile:multiple=1", "bad multiple `1` for percentile"),
            (
                "gradient2:long_rise=0.5",
                "bad long_rise `0.5` for gradient2",
            ),
            (
                "aimd:backoff=1",
                "bad backoff `1` for aimd: must be in [0.5, 1)",
            ),
            ("aimd:timeout=0s", "bad timeout"),
            (
                "aimd:min=0",
                "bad min `0` for aimd: expected a whole number, at least 1",
            ),
            ("aimd:min", "expected key=value in `min`"),
            ("aimd:min=1,min=2", "parameter `min` given twice"),
            ("vegas:smoothing=nan", "bad smoothing `nan`"),
            ("vegas:alpha=7", "alpha (7) must not exceed beta (6)"),
            (
                "gradient2:tolerance=0.5",
                "bad tolerance `0.5` for gradient2",
            ),
            ("gradient2:window=0s", "bad window"),
            ("envoy-gradient:jitter=2", "bad jitter `2`"),
            (
                "envoy-gradient:window=1s",
                "unknown parameter `window` for envoy-gradient",
            ),
            ("percentile:target=0ms", "bad target"),
            ("percentile:target=1s,p=0", "bad p `0` for percentile"),
            (
                "fixed:limit=1,min=1",
                "unknown parameter `min` for fixed (it takes: limit)",
            ),
            ("none:limit=1", "(it takes: nothing)"),
        ] {
            let err = ControllerSpec::parse(text).expect_err(text);
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
