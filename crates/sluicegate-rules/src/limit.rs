//! One `rate_limit` map (or `rate_limits` entry) checked into a [`Limit`]: envoyproxy/ratelimit's
//! unit and `replaces` rules, then Sluicegate's extensions (`period`, `algorithm` and its
//! parameters) and their combinations.
//!
//! The algorithm and its parameters are read by the core's spec table
//! ([`AlgorithmSpec::from_quota`]): `requests_per_unit` per `unit` (or `period`) is the
//! algorithm's rate (or limit and window), every other key one of its parameters, under the
//! same names, aliases, defaults and checks as in a spec string; algorithm names are read in
//! any case. Its errors are reported at the key they are about.

use std::time::Duration;

use sluicegate::rate::parse_duration;
use sluicegate::spec::AlgorithmSpec;
use sluicegate::{AnyAlgorithm, ConfigError};

use crate::error::{Report, RuleErrorKind};
use crate::raw::RawLimit;
use crate::rule::{Limit, Unit, Window};
use crate::yaml::Position;
use crate::yaml::Spanned;

/// Checks one `rate_limit` map, returning the limit and where its algorithm was written (its
/// `algorithm` key, or the map when none was). For `unlimited`, only the checks
/// envoyproxy/ratelimit makes (and that no extension is given) apply, and `None` is returned.
pub(crate) fn resolve_limit(
    raw: &RawLimit,
    unlimited: bool,
    report: &mut Report,
) -> Option<(Limit, Position)> {
    let errors_before = report.errors.len();
    check_replaces(raw, report);
    let unit_text = raw.unit.as_ref().map(|u| u.value.as_str()).unwrap_or("");
    let unit = Unit::parse(unit_text);
    if unlimited {
        if unit.is_some() {
            report.at(
                raw.unit.as_ref().map_or(raw.pos, |u| u.pos),
                RuleErrorKind::UnitWhenUnlimited,
            );
        }
        for (given, key) in extension_keys(raw) {
            if let Some(pos) = given {
                report.extension(pos, format!("{key} has no meaning when unlimited"));
            }
        }
        return None;
    }
    let window = match &raw.period {
        Some(period) => {
            if let Some(u) = &raw.unit {
                report.extension(u.pos, "give either unit or period, not both");
            }
            resolve_period(period, report).map(Window::Period)
        }
        None => match unit {
            Some(unit) => Some(Window::Unit(unit)),
            None => {
                report.at(
                    raw.unit.as_ref().map_or(raw.pos, |u| u.pos),
                    RuleErrorKind::InvalidUnit {
                        unit: unit_text.to_owned(),
                    },
                );
                None
            }
        },
    };
    // yaml.v2 leaves a missing requests_per_unit at 0: such a limit blocks everything.
    let requests_per_unit = raw.requests_per_unit.as_ref().map_or(0, |r| r.value);
    let algorithm = resolve_algorithm(raw, requests_per_unit, window, report);
    if report.errors.len() > errors_before {
        return None;
    }
    let (algorithm, algorithm_name) = algorithm?;
    let limit = Limit {
        requests_per_unit,
        window: window?,
        algorithm,
        algorithm_name,
        name: raw
            .name
            .as_ref()
            .map(|n| n.value.clone())
            .filter(|n| !n.is_empty()),
        replaces: raw.replaces.iter().map(|r| r.value.clone()).collect(),
    };
    Some((limit, algorithm_position(raw)))
}

/// Where a limit's algorithm was written: its `algorithm` key, or the map.
fn algorithm_position(raw: &RawLimit) -> Position {
    raw.algorithm.as_ref().map_or(raw.pos, |a| a.pos)
}

fn check_replaces(raw: &RawLimit, report: &mut Report) {
    let name = raw.name.as_ref().map(|n| n.value.as_str()).unwrap_or("");
    for entry in &raw.replaces {
        if entry.value.is_empty() {
            report.at(entry.pos, RuleErrorKind::EmptyReplaces);
        } else if entry.value == name {
            report.at(entry.pos, RuleErrorKind::ReplacesSelf);
        }
    }
}

fn extension_keys(raw: &RawLimit) -> Vec<(Option<Position>, &str)> {
    let mut keys = vec![
        (raw.period.as_ref().map(|s| s.pos), "period"),
        (raw.algorithm.as_ref().map(|s| s.pos), "algorithm"),
    ];
    for (key, _) in &raw.params {
        keys.push((Some(key.pos), key.value.as_str()));
    }
    keys
}

fn resolve_period(period: &Spanned<String>, report: &mut Report) -> Option<Duration> {
    match parse_duration(&period.value) {
        Ok(d) if d.is_zero() => {
            report.extension(
                period.pos,
                format!("period '{}' must be longer than zero", period.value),
            );
            None
        }
        Ok(d) => Some(d),
        Err(err) => {
            report.at(period.pos, RuleErrorKind::Config(err));
            None
        }
    }
}

/// The algorithm of `raw` through the core's spec table, with its name: no algorithm for a
/// limit of zero (nothing passes; no algorithm takes a rate of zero, so only the names are
/// checked), `None` after reporting an error (or when the window is already reported wrong).
fn resolve_algorithm(
    raw: &RawLimit,
    requests_per_unit: u32,
    window: Option<Window>,
    report: &mut Report,
) -> Option<(Option<AnyAlgorithm>, &'static str)> {
    let name = raw
        .algorithm
        .as_ref()
        .map_or("fixed-window", |a| a.value.as_str());
    let pos = algorithm_position(raw);
    if name.trim().eq_ignore_ascii_case("concurrency") {
        report.extension(
            pos,
            "concurrency limits need a release, which a rate limit call cannot send; \
             use the library's concurrency limiter",
        );
        return None;
    }
    // A window already reported wrong still has its names checked, on a stand-in period.
    let period = window.map_or(Duration::from_secs(1), Window::duration);
    let params = raw
        .params
        .iter()
        .map(|(key, value)| (key.value.as_str(), value.value.as_str()));
    let spec = AlgorithmSpec::from_quota(name, u64::from(requests_per_unit), period, params)
        .map_err(|error| report_config(raw, name, error, report))
        .ok()?;
    window?;
    if requests_per_unit == 0 {
        return Some((None, spec.algorithm()));
    }
    spec.build()
        .map(|algorithm| (Some(algorithm), spec.algorithm()))
        .map_err(|error| report_config(raw, name, error, report))
        .ok()
}

/// Reports an error of the core's spec reader at the key it is about: the parameter it
/// names, else the algorithm.
fn report_config(raw: &RawLimit, algorithm: &str, error: ConfigError, report: &mut Report) {
    let key_named = |name: &str| {
        raw.params.iter().find(|(key, _)| {
            key.value == name
                || AlgorithmSpec::canonical_parameter(algorithm, &key.value) == Some(name)
        })
    };
    let pos = algorithm_position(raw);
    match error {
        ConfigError::UnknownParameter {
            algorithm, name, ..
        } => {
            let at = key_named(&name).map_or(pos, |(_, value)| value.pos);
            report.extension(at, format!("{name} is not a parameter of {algorithm}"));
        }
        ConfigError::InvalidParameter { name, .. } if key_named(name).is_some() => {
            let at = key_named(name).map_or(pos, |(_, value)| value.pos);
            report.at(at, RuleErrorKind::Config(error));
        }
        // A value the quota gave (`rate`, `limit`, `window`): requests_per_unit says it.
        ConfigError::InvalidParameter { .. } => {
            let at = raw.requests_per_unit.as_ref().map_or(pos, |r| r.pos);
            report.at(at, RuleErrorKind::Config(error));
        }
        other => report.at(pos, RuleErrorKind::Config(other)),
    }
}
