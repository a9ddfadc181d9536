//! Each controller built from a spec's values. Errors name the builders' parameters
//! (`min_limit`); `ControllerSpec::build` puts them in the spec's words.

use std::time::Duration;

use crate::adaptive::spec::any::AnyController;
use crate::adaptive::spec::values::Values;
use crate::adaptive::{Aimd, EnvoyGradient, Gradient2, Percentile, QueueHeadroom, Vegas, Windowed};
use crate::error::ConfigError;

/// Builds one kind of controller from its values and a seed (for those with randomness).
pub(super) type Build = fn(&Values<'_>, u64) -> Result<AnyController, ConfigError>;

/// Sets `$key` with `$setter` on `$builder` when the spec gives it, read as `$read`.
macro_rules! set {
    ($builder:ident, $values:expr, $read:ident, $key:literal, $setter:ident) => {
        if let Some(value) = $values.$read($key)? {
            $builder = $builder.$setter(value);
        }
    };
}

/// Sets the three bounds every adaptive controller takes.
macro_rules! bounds {
    ($builder:ident, $values:expr) => {
        set!($builder, $values, count, "min", min_limit);
        set!($builder, $values, count, "initial", initial_limit);
        set!($builder, $values, count, "max", max_limit);
    };
}

pub(super) fn unlimited(_: &Values<'_>, _: u64) -> Result<AnyController, ConfigError> {
    Ok(AnyController::Unlimited)
}

pub(super) fn fixed(values: &Values<'_>, _: u64) -> Result<AnyController, ConfigError> {
    let limit = values
        .count("limit")?
        .ok_or(ConfigError::MissingParameter {
            algorithm: "fixed",
            name: "limit",
        })?;
    Ok(AnyController::Fixed(limit))
}

pub(super) fn aimd(values: &Values<'_>, _: u64) -> Result<AnyController, ConfigError> {
    let mut b = Aimd::builder();
    bounds!(b, values);
    set!(b, values, number, "backoff", backoff_ratio);
    set!(b, values, duration, "timeout", timeout);
    windowed(values, AnyController::Aimd(b.build()?))
}

pub(super) fn vegas(values: &Values<'_>, seed: u64) -> Result<AnyController, ConfigError> {
    let mut b = Vegas::builder().seed(seed);
    bounds!(b, values);
    set!(b, values, number, "smoothing", smoothing);
    set!(b, values, count, "probe", probe_multiplier);
    // Netflix's defaults, 3 and 6, for whichever of the two is not given.
    let (alpha, beta) = (values.count("alpha")?, values.count("beta")?);
    if alpha.is_some() || beta.is_some() {
        b = b.alpha_beta(alpha.unwrap_or(3), beta.unwrap_or(6));
    }
    windowed(values, AnyController::Vegas(Box::new(b.build()?)))
}

pub(super) fn gradient2(values: &Values<'_>, _: u64) -> Result<AnyController, ConfigError> {
    let mut b = Gradient2::builder();
    bounds!(b, values);
    set!(b, values, number, "smoothing", smoothing);
    set!(b, values, number, "tolerance", rtt_tolerance);
    set!(b, values, count, "long_window", long_window);
    set!(b, values, count, "short_window", short_window);
    set!(b, values, number, "backoff", backoff_ratio);
    if let Some(n) = values.count("headroom")? {
        b = b.queue_headroom(QueueHeadroom::Fixed(n));
    }
    windowed(values, AnyController::Gradient2(b.build()?))
}

pub(super) fn envoy(values: &Values<'_>, seed: u64) -> Result<AnyController, ConfigError> {
    let mut b = EnvoyGradient::builder().seed(seed);
    bounds!(b, values);
    set!(b, values, count, "pinned", pinned_concurrency);
    set!(b, values, number, "percentile", percentile);
    set!(b, values, number, "buffer", min_rtt_buffer);
    set!(b, values, count, "requests", min_rtt_request_count);
    set!(b, values, number, "jitter", jitter);
    set!(b, values, duration, "interval", min_rtt_interval);
    set!(b, values, duration, "update", update_interval);
    set!(b, values, number, "backoff", backoff_ratio);
    Ok(AnyController::EnvoyGradient(Box::new(b.build()?)))
}

pub(super) fn percentile(values: &Values<'_>, seed: u64) -> Result<AnyController, ConfigError> {
    let mut b = Percentile::relative_builder().seed(seed);
    if let (Some(_), Some(multiple)) = (values.duration("target")?, values.number("multiple")?) {
        return Err(ConfigError::invalid(
            "target_multiple",
            multiple,
            "give a fixed `target` or a relative `multiple`, not both",
        ));
    }
    set!(b, values, duration, "target", target);
    set!(b, values, number, "multiple", target_multiple);
    bounds!(b, values);
    set!(b, values, number, "p", percentile);
    // The controller's own window, which its percentile is read over: not `Windowed`'s.
    set!(b, values, duration, "window", window);
    set!(b, values, count, "min_samples", min_samples);
    set!(b, values, number, "backoff", backoff_ratio);
    Ok(AnyController::Percentile(Box::new(b.build()?)))
}

/// `controller` fed one summary per `window=` if given. A window short of samples collects
/// for at most ten seconds (or one window, if longer), so that a quiet limit still moves.
fn windowed(values: &Values<'_>, controller: AnyController) -> Result<AnyController, ConfigError> {
    let Some(window) = values.duration("window")? else {
        return Ok(controller);
    };
    let windowed = Windowed::builder(controller)
        .min_window(window)
        .max_window(window)
        .max_collect(window.max(Duration::from_secs(10)))
        .build()?;
    Ok(AnyController::Windowed(Box::new(windowed)))
}
