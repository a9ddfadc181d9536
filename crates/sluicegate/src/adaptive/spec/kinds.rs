//! What each controller of a spec takes, under which names, and how it is built.

use crate::adaptive::spec::build::{self, Build};
use crate::adaptive::spec::values::ValueKind::{self, Count, Duration, Number};
use crate::error::ConfigError;
use crate::spec::values;

/// One parameter of a controller spec.
pub(super) struct Param {
    /// Its name as specs write it (`min`, `backoff`).
    pub(super) key: &'static str,
    /// What its value is.
    pub(super) value: ValueKind,
    /// The builder parameters it sets, as builder errors name them (`min_limit`).
    pub(super) builder: &'static [&'static str],
}

const fn param(key: &'static str, value: ValueKind, builder: &'static [&'static str]) -> Param {
    Param {
        key,
        value,
        builder,
    }
}

/// The bounds every adaptive controller takes (not `fixed` or `none`).
const BOUNDS: [Param; 3] = [
    param("min", Count, &["min_limit"]),
    param("max", Count, &["max_limit"]),
    param("initial", Count, &["initial_limit"]),
];

/// `window=` on a per-sample controller: [`Windowed`](crate::adaptive::Windowed)'s windows.
const WINDOW: Param = param(
    "window",
    Duration,
    &["min_window", "max_window", "max_collect"],
);

/// One controller's spec grammar.
pub(super) struct Kind {
    /// Its name as specs write it.
    pub(super) name: &'static str,
    /// Its own parameters (the bounds come on top when `bounded`).
    params: &'static [Param],
    /// Whether it takes `min`, `max` and `initial`.
    pub(super) bounded: bool,
    /// Every parameter it takes, as listed in errors.
    pub(super) expected: &'static str,
    /// Builds it.
    pub(super) build: Build,
}

pub(super) const KINDS: &[Kind] = &[
    Kind {
        name: "aimd",
        params: &[
            param("backoff", Number, &["backoff_ratio"]),
            param("timeout", Duration, &["timeout"]),
            WINDOW,
        ],
        bounded: true,
        expected: "backoff, timeout, window, min, max, initial",
        build: build::aimd,
    },
    Kind {
        name: "vegas",
        params: &[
            param("smoothing", Number, &["smoothing"]),
            param("alpha", Count, &["alpha"]),
            param("beta", Count, &["beta"]),
            param("probe", Count, &["probe_multiplier"]),
            WINDOW,
        ],
        bounded: true,
        expected: "smoothing, alpha, beta, probe, window, min, max, initial",
        build: build::vegas,
    },
    Kind {
        name: "gradient2",
        params: &[
            param("smoothing", Number, &["smoothing"]),
            param("tolerance", Number, &["rtt_tolerance"]),
            param("long_window", Count, &["long_window"]),
            param("short_window", Count, &["short_window"]),
            param("headroom", Count, &["queue_headroom"]),
            param("backoff", Number, &["backoff_ratio"]),
            WINDOW,
        ],
        bounded: true,
        expected: "smoothing, tolerance, long_window, short_window, headroom, backoff, \
                   window, min, max, initial",
        build: build::gradient2,
    },
    Kind {
        name: "envoy-gradient",
        params: &[
            param("pinned", Count, &["pinned_concurrency"]),
            param("percentile", Number, &["percentile"]),
            param("buffer", Number, &["min_rtt_buffer"]),
            param("requests", Count, &["min_rtt_request_count"]),
            param("jitter", Number, &["jitter"]),
            param("interval", Duration, &["min_rtt_interval"]),
            param("update", Duration, &["update_interval"]),
            param("backoff", Number, &["backoff_ratio"]),
        ],
        bounded: true,
        expected: "pinned, percentile, buffer, requests, jitter, interval, update, backoff, \
                   min, max, initial",
        build: build::envoy,
    },
    Kind {
        name: "percentile",
        params: &[
            param("target", Duration, &["target"]),
            param("multiple", Number, &["target_multiple"]),
            param("p", Number, &["percentile"]),
            param("window", Duration, &["window"]),
            param("min_samples", Count, &["min_samples"]),
            param("backoff", Number, &["backoff_ratio"]),
        ],
        bounded: true,
        expected: "target, multiple, p, window, min_samples, backoff, min, max, initial",
        build: build::percentile,
    },
    Kind {
        name: "fixed",
        params: &[param("limit", Count, &["limit"])],
        bounded: false,
        expected: "limit",
        build: build::fixed,
    },
    Kind {
        name: "none",
        params: &[],
        bounded: false,
        expected: "nothing",
        build: build::unlimited,
    },
];

/// The controllers' names, as listed in errors.
const KNOWN: &str = "aimd, vegas, gradient2, envoy-gradient, percentile, fixed, none";

/// Every parameter some controller takes, for a front end that mixes them with keys of its
/// own (the proxy's `adaptive:` block).
pub const PARAMETERS: &[&str] = &[
    "min",
    "max",
    "initial",
    "backoff",
    "timeout",
    "window",
    "smoothing",
    "alpha",
    "beta",
    "probe",
    "tolerance",
    "long_window",
    "short_window",
    "headroom",
    "pinned",
    "percentile",
    "buffer",
    "requests",
    "jitter",
    "interval",
    "update",
    "target",
    "multiple",
    "p",
    "min_samples",
    "limit",
];

/// The controller named `written`: case-insensitive, `_` for `-`.
pub(super) fn kind_named(written: &str) -> Result<&'static Kind, ConfigError> {
    values::named(KINDS, |kind| kind.name, written).ok_or_else(|| ConfigError::UnknownController {
        name: written.trim().to_owned(),
        known: KNOWN,
    })
}

impl Kind {
    /// Every parameter it takes.
    pub(super) fn params(&self) -> impl Iterator<Item = &'static Param> {
        let bounds: &'static [Param] = if self.bounded { &BOUNDS } else { &[] };
        self.params.iter().chain(bounds)
    }

    /// The parameter written `written` (case-insensitive, `-` for `_`), if it takes it.
    pub(super) fn param(&self, written: &str) -> Option<&'static Param> {
        let key = written.trim().to_ascii_lowercase().replace('-', "_");
        self.params().find(|p| p.key == key)
    }

    /// The spec key a builder's parameter is written as (`min_limit` is `min`).
    pub(super) fn key_of(&self, builder: &'static str) -> &'static str {
        self.params()
            .find(|p| p.builder.contains(&builder))
            .map_or(builder, |p| p.key)
    }
}
