//! Controllers chosen at run time: the `CONTROLLER[:key=value,...]` specs that name them
//! (`sluicegate simulate --adaptive`, the proxy's `adaptive:` route setting) and
//! [`AnyController`], the enum over what they build.
//!
//! | controller | parameters (all optional) |
//! |---|---|
//! | `aimd` | `backoff` (F), `timeout` (DUR): a slower answer is a loss, `window` (DUR) |
//! | `vegas` | `smoothing` (F), `alpha` (N), `beta` (N), `probe` (N): the probe multiplier, `window` (DUR) |
//! | `gradient2` | `smoothing` (F), `tolerance` (F): the RTT tolerance, `long_window` (N), `short_window` (N), `headroom` (N): a fixed queue headroom, `backoff` (F), `window` (DUR) |
//! | `envoy-gradient` | `pinned` (N): the pinned concurrency, `percentile` (F), `buffer` (F): the minRTT buffer, `requests` (N): minRTT requests, `jitter` (F), `interval` (DUR): the minRTT interval, `update` (DUR): the update interval, `backoff` (F) |
//! | `percentile` | `target` (DUR) or `multiple` (F, of the lowest window latency; the default), `p` (F): the percentile held, `window` (DUR): its own window, `min_samples` (N), `backoff` (F) |
//! | `fixed` | `limit` (N), required: a limit that never moves |
//! | `none` | nothing: no limit |
//!
//! Every adaptive controller (not `fixed` or `none`) also takes its bounds `min`, `initial`
//! and `max` (N). N is a whole number of at least 1, F a decimal number (`0.9`), DUR a
//! duration (`250ms`, `1s`). Each parameter sets the builder parameter of the same meaning
//! (`backoff` is `backoff_ratio`), with the same default and the same checks; the builders'
//! docs say what they do. `window` on `aimd`, `vegas` and `gradient2` wraps the controller in
//! [`Windowed`](crate::adaptive::Windowed) windows of that length (collecting for at most
//! 10 s when short of samples): it then moves once per window, on the window's average.
//!
//! Names are case-insensitive, `_` and `-` interchangeable; a spec is checked in full when
//! read (unknown, repeated and malformed parameters, then the controller built once), and
//! every error names the parameter as the spec writes it.
//!
//! ```
//! use sluicegate::adaptive::spec::ControllerSpec;
//! use sluicegate::adaptive::{Controller, Sample};
//!
//! let spec: ControllerSpec = "aimd:min=1,initial=10,backoff=0.5".parse()?;
//! let mut aimd = spec.build(0)?;
//! assert_eq!(aimd.on_sample(0, Sample::dropped(0, 1_000, 10)), 5);
//!
//! // The bounds are checked together, counting the defaults of those not given.
//! let err = "aimd:max=10".parse::<ControllerSpec>().unwrap_err();
//! assert_eq!(err.to_string(), "aimd: default initial (20) must not exceed max (10)");
//! # Ok::<(), sluicegate::ConfigError>(())
//! ```

mod any;
mod build;
mod kinds;
mod parse;
mod values;

#[cfg(test)]
mod tests;

pub use any::AnyController;
pub use kinds::PARAMETERS;
pub use parse::ControllerSpec;
