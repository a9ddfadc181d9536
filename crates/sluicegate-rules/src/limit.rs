//! One `rate_limit` map (or `rate_limits` entry) checked into a [`Limit`]: envoyproxy/ratelimit's
//! unit and `replaces` rules, then Sluicegate's extensions (`period`, `algorithm` and its
//! parameters) and their combinations.

use sluicegate::parse_duration;

use crate::error::{Report, RuleErrorKind};
use crate::raw::{RawLimit, Spanned};
use crate::rule::{Algorithm, Limit, Unit, Window};
use crate::yaml::Position;

/// Checks one `rate_limit` map. For `unlimited`, only the checks envoyproxy/ratelimit makes
/// (and that no extension is given) apply, and `None` is returned.
pub(crate) fn resolve_limit(raw: &RawLimit, unlimited: bool, report: &mut Report) -> Option<Limit> {
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
    let algorithm = resolve_algorithm(raw, report);
    let window = match (&raw.period, algorithm) {
        (_, Some(Algorithm::Concurrency)) => {
            for (given, key) in [
                (raw.unit.as_ref().map(|u| u.pos), "unit"),
                (raw.period.as_ref().map(|p| p.pos), "period"),
            ] {
                if let Some(pos) = given {
                    report.extension(
                        pos,
                        format!("a concurrency limit has no window: remove {key}"),
                    );
                }
            }
            None
        }
        (Some(period), _) => {
            if let Some(u) = &raw.unit {
                report.extension(u.pos, "give either unit or period, not both");
            }
            resolve_period(period, report).map(Window::Period)
        }
        (None, _) => match unit {
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
    if report.errors.len() > errors_before {
        return None;
    }
    Some(Limit {
        // yaml.v2 leaves a missing requests_per_unit at 0: such a limit blocks everything.
        requests_per_unit: raw.requests_per_unit.as_ref().map_or(0, |r| r.value),
        window,
        algorithm: algorithm?,
        name: raw
            .name
            .as_ref()
            .map(|n| n.value.clone())
            .filter(|n| !n.is_empty()),
        replaces: raw.replaces.iter().map(|r| r.value.clone()).collect(),
    })
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

fn extension_keys(raw: &RawLimit) -> [(Option<Position>, &'static str); 5] {
    [
        (raw.period.as_ref().map(|s| s.pos), "period"),
        (raw.algorithm.as_ref().map(|s| s.pos), "algorithm"),
        (raw.burst.as_ref().map(|s| s.pos), "burst"),
        (raw.buckets.as_ref().map(|s| s.pos), "buckets"),
        (raw.delay.as_ref().map(|s| s.pos), "delay"),
    ]
}

fn resolve_period(period: &Spanned<String>, report: &mut Report) -> Option<std::time::Duration> {
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

fn resolve_algorithm(raw: &RawLimit, report: &mut Report) -> Option<Algorithm> {
    let name = raw
        .algorithm
        .as_ref()
        .map_or("fixed-window", |a| a.value.as_str());
    let pos = raw.algorithm.as_ref().map_or(raw.pos, |a| a.pos);
    let rpu = raw
        .requests_per_unit
        .as_ref()
        .map_or(0, |r| u64::from(r.value));
    let burst = raw.burst.as_ref().map(|b| b.value);
    let algorithm = match name {
        "fixed-window" => Algorithm::FixedWindow,
        "sliding-log" => Algorithm::SlidingLog,
        "sliding-window" => {
            let buckets = match &raw.buckets {
                None => None,
                Some(b) => match u32::try_from(b.value) {
                    Ok(n) if n >= 1 => Some(n),
                    _ => {
                        report.extension(
                            b.pos,
                            format!("buckets must be between 1 and {}", u32::MAX),
                        );
                        return None;
                    }
                },
            };
            Algorithm::SlidingWindow { buckets }
        }
        "token-bucket" => Algorithm::TokenBucket {
            burst: burst.unwrap_or(rpu),
        },
        "gcra" => Algorithm::Gcra {
            burst: burst.unwrap_or(rpu),
        },
        "leaky-bucket" => Algorithm::LeakyBucket {
            burst: burst.unwrap_or(rpu),
        },
        "leaky-queue" => Algorithm::LeakyQueue {
            burst: burst.unwrap_or(0),
            delay: raw.delay.as_ref().map(|d| d.value),
        },
        "concurrency" => Algorithm::Concurrency,
        other => {
            report.at(
                pos,
                RuleErrorKind::Config(sluicegate::ConfigError::UnknownAlgorithm {
                    name: other.to_owned(),
                    known: Algorithm::NAMES,
                }),
            );
            return None;
        }
    };
    let takes_burst = matches!(
        algorithm,
        Algorithm::TokenBucket { .. }
            | Algorithm::Gcra { .. }
            | Algorithm::LeakyBucket { .. }
            | Algorithm::LeakyQueue { .. }
    );
    let mut ok = true;
    for (given, key, allowed) in [
        (raw.burst.as_ref().map(|s| s.pos), "burst", takes_burst),
        (
            raw.buckets.as_ref().map(|s| s.pos),
            "buckets",
            matches!(algorithm, Algorithm::SlidingWindow { .. }),
        ),
        (
            raw.delay.as_ref().map(|s| s.pos),
            "delay",
            matches!(algorithm, Algorithm::LeakyQueue { .. }),
        ),
    ] {
        if let Some(pos) = given.filter(|_| !allowed) {
            report.extension(
                pos,
                format!("{key} is not a parameter of {}", algorithm.name()),
            );
            ok = false;
        }
    }
    match algorithm {
        Algorithm::TokenBucket { burst }
        | Algorithm::Gcra { burst }
        | Algorithm::LeakyBucket { burst }
            if burst == 0 && rpu > 0 =>
        {
            let at = raw.burst.as_ref().map_or(pos, |b| b.pos);
            report.extension(
                at,
                format!("burst of {} must be at least 1", algorithm.name()),
            );
            ok = false;
        }
        Algorithm::LeakyQueue {
            burst,
            delay: Some(delay),
        } if delay > burst => {
            let at = raw.delay.as_ref().map_or(pos, |d| d.pos);
            report.extension(at, format!("delay ({delay}) cannot exceed burst ({burst})"));
            ok = false;
        }
        _ => {}
    }
    ok.then_some(algorithm)
}
