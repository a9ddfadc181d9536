//! Phase two: raw descriptors checked and turned into the lookup tree of a domain, with the
//! same composite keys (`key` or `key_value`) envoyproxy/ratelimit uses, so lookups and
//! duplicate checks behave exactly as there.

use std::collections::HashMap;
use std::path::PathBuf;

use sluicegate::parse_duration;

use crate::error::{Report, RuleErrorKind};
use crate::raw::{RawDescriptor, RawLimit, Spanned};
use crate::rule::{Algorithm, Limit, Rule, Source, Unit, Window};

/// One level of descriptors: children by composite key, and the wildcard keys in file order.
#[derive(Debug, Default, Clone)]
pub(crate) struct Level {
    pub(crate) children: HashMap<String, DescriptorNode>,
    pub(crate) wildcards: Vec<String>,
    pub(crate) order: Vec<String>,
}

/// A configured descriptor.
#[derive(Debug, Clone)]
pub(crate) struct DescriptorNode {
    pub(crate) key: String,
    pub(crate) rule: Option<Rule>,
    pub(crate) share_threshold: bool,
    pub(crate) value_to_metric: bool,
    pub(crate) level: Level,
}

/// A domain: its top level and the file that defined it first.
#[derive(Debug, Clone)]
pub(crate) struct DomainTree {
    pub(crate) name: String,
    pub(crate) file: PathBuf,
    pub(crate) root: Level,
}

/// Adds `descriptors` at `level`, reporting every problem.
pub(crate) fn load_descriptors(
    level: &mut Level,
    parent_key: &str,
    descriptors: Vec<RawDescriptor>,
    report: &mut Report,
) {
    for raw in descriptors {
        let key = raw
            .key
            .as_ref()
            .map(|k| k.value.clone())
            .unwrap_or_default();
        if key.is_empty() {
            let pos = raw.key.as_ref().map_or(raw.pos, |k| k.pos);
            report.at(pos, RuleErrorKind::EmptyKey);
            continue;
        }
        let value = raw
            .value
            .as_ref()
            .map(|v| v.value.clone())
            .unwrap_or_default();
        let composite = if value.is_empty() {
            key.clone()
        } else {
            format!("{key}_{value}")
        };
        let full_key = format!("{parent_key}{composite}");
        let duplicate = level.children.contains_key(&composite);
        if duplicate {
            report.at(
                raw.pos,
                RuleErrorKind::DuplicateDescriptor {
                    composite: full_key.clone(),
                },
            );
        }
        let share_threshold = raw.share_threshold.as_ref().is_some_and(|s| s.value);
        let is_wildcard = composite.contains('*');
        if let Some(flag) = raw
            .share_threshold
            .as_ref()
            .filter(|f| f.value && !is_wildcard)
        {
            report.at(
                flag.pos,
                RuleErrorKind::ShareThresholdWithoutWildcard {
                    key: composite.clone(),
                },
            );
        }
        let rule = resolve_rule(&raw, &full_key, report);
        let mut node = DescriptorNode {
            key,
            rule,
            share_threshold,
            value_to_metric: raw.value_to_metric,
            level: Level::default(),
        };
        load_descriptors(
            &mut node.level,
            &format!("{full_key}."),
            raw.descriptors,
            report,
        );
        if duplicate {
            continue;
        }
        if is_wildcard {
            level.wildcards.push(composite.clone());
        }
        level.order.push(composite.clone());
        level.children.insert(composite, node);
    }
}

fn resolve_rule(raw: &RawDescriptor, full_key: &str, report: &mut Report) -> Option<Rule> {
    let source = Source {
        file: report.file.clone(),
        position: raw.pos,
    };
    let rule = |limits: Vec<Limit>, unlimited: bool| Rule {
        id: full_key.to_owned(),
        limits,
        unlimited,
        shadow_mode: raw.shadow_mode,
        quota_mode: raw.quota_mode,
        detailed_metric: raw.detailed_metric,
        value_to_metric: raw.value_to_metric,
        source,
    };
    match (&raw.rate_limit, &raw.rate_limits) {
        (None, None) => None,
        (Some(_), Some(list)) => {
            report.extension(
                list.pos,
                "a descriptor takes either rate_limit or rate_limits, not both",
            );
            None
        }
        (Some(one), None) => {
            let unlimited = one.unlimited.as_ref().is_some_and(|u| u.value);
            let limit = resolve_limit(one, unlimited, report);
            match (unlimited, limit) {
                (true, _) => Some(rule(Vec::new(), true)),
                (false, Some(limit)) => Some(rule(vec![limit], false)),
                (false, None) => None,
            }
        }
        (None, Some(list)) => {
            if list.value.is_empty() {
                report.extension(list.pos, "rate_limits must list at least one limit");
                return None;
            }
            let mut limits = Vec::new();
            for entry in &list.value {
                if let Some(flag) = &entry.unlimited {
                    report.extension(
                        flag.pos,
                        "unlimited is not allowed in rate_limits (use rate_limit: {unlimited: true})",
                    );
                    continue;
                }
                limits.extend(resolve_limit(entry, false, report));
            }
            (limits.len() == list.value.len()).then(|| rule(limits, false))
        }
    }
}

/// Checks one `rate_limit` map. For `unlimited`, only the checks envoyproxy/ratelimit makes
/// (and that no extension is given) apply, and `None` is returned.
fn resolve_limit(raw: &RawLimit, unlimited: bool, report: &mut Report) -> Option<Limit> {
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

fn extension_keys(raw: &RawLimit) -> [(Option<crate::yaml::Position>, &'static str); 5] {
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
