//! Phase one: the YAML tree read into the shape of the format, every field with its position,
//! nothing interpreted yet. Shape errors (unknown keys, wrong types, lists of non-maps) are
//! found here; meaning errors (bad units, duplicates) in [`crate::resolve`].
//!
//! envoyproxy/ratelimit checks keys against one flat set for the whole file, so a known key
//! in the wrong place (`unit` on a descriptor) passes there and is ignored. We accept such
//! files too (every file it accepts must load) but warn; Sluicegate's own keys are only
//! accepted where they belong.

use crate::error::{Report, RuleErrorKind};
use crate::fields::{
    flag, integer, key_name, list_of_maps, map_entries, narrow, string, to_json, wrong_type,
};
use crate::yaml::{Node, Position, Scalar, Spanned, Value};

/// Keys envoyproxy/ratelimit accepts anywhere in a file.
const UPSTREAM_KEYS: &[&str] = &[
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];

const ROOT_KEYS: &str = "domain, descriptors";
const DESCRIPTOR_KEYS: &str = "key, value, descriptors, rate_limit, rate_limits, shadow_mode, \
     quota_mode, detailed_metric, value_to_metric, share_threshold, metadata";
const LIMIT_KEYS: &str = "requests_per_unit, unit, unlimited, name, replaces, period, algorithm, \
     and the algorithm's parameters (burst, buckets, delay, nodelay, initial, capacity, \
     burst_seconds, warmup, cold_factor)";
const REPLACES_KEYS: &str = "name";

/// One rule file.
#[derive(Debug, Default)]
pub(crate) struct RawFile {
    pub(crate) domain: Option<Spanned<String>>,
    /// `domain` was given but could not be read (already reported).
    pub(crate) domain_unreadable: bool,
    pub(crate) descriptors: Vec<RawDescriptor>,
}

/// One entry of a `descriptors` list.
#[derive(Debug)]
pub(crate) struct RawDescriptor {
    pub(crate) pos: Position,
    pub(crate) key: Option<Spanned<String>>,
    pub(crate) value: Option<Spanned<String>>,
    pub(crate) rate_limit: Option<RawLimit>,
    pub(crate) rate_limits: Option<Spanned<Vec<RawLimit>>>,
    pub(crate) descriptors: Vec<RawDescriptor>,
    pub(crate) shadow_mode: bool,
    pub(crate) quota_mode: bool,
    pub(crate) detailed_metric: bool,
    pub(crate) value_to_metric: bool,
    pub(crate) share_threshold: Option<Spanned<bool>>,
    pub(crate) metadata: Option<serde_json::Value>,
}

/// A `rate_limit` map (or one entry of `rate_limits`).
#[derive(Debug)]
pub(crate) struct RawLimit {
    pub(crate) pos: Position,
    pub(crate) requests_per_unit: Option<Spanned<u32>>,
    pub(crate) unit: Option<Spanned<String>>,
    pub(crate) unlimited: Option<Spanned<bool>>,
    pub(crate) name: Option<Spanned<String>>,
    pub(crate) replaces: Vec<Spanned<String>>,
    pub(crate) period: Option<Spanned<String>>,
    pub(crate) algorithm: Option<Spanned<String>>,
    /// The algorithm's other parameters (`burst: 20`), by the key as written, their values as
    /// text for the core's spec reader (a key alone, `nodelay:`, reads as the flag).
    pub(crate) params: Vec<(Spanned<String>, Spanned<String>)>,
}

/// Reads a parsed document; `None` (an empty file) reads as a file with no domain.
pub(crate) fn read_file(root: Option<&Node>, report: &mut Report) -> RawFile {
    let mut file = RawFile::default();
    let Some(root) = root else {
        return file;
    };
    if matches!(root.value, Value::Scalar(Scalar::Null)) {
        return file;
    }
    let Some(entries) = map_entries(root, "the file", report) else {
        return file;
    };
    for (key, value) in entries {
        match key_name(key, report).as_deref() {
            Some("domain") => {
                file.domain = string(value, "domain", report);
                file.domain_unreadable = file.domain.is_none();
            }
            Some("descriptors") => file.descriptors = descriptors(value, report),
            Some(other) => misplaced(key.pos, other, "the top level", ROOT_KEYS, report),
            None => {}
        }
    }
    file
}

fn descriptors(node: &Node, report: &mut Report) -> Vec<RawDescriptor> {
    list_of_maps(node, "descriptors", report)
        .into_iter()
        .map(|item| descriptor(item, report))
        .collect()
}

fn descriptor(node: &Node, report: &mut Report) -> RawDescriptor {
    let mut out = RawDescriptor {
        pos: node.pos,
        key: None,
        value: None,
        rate_limit: None,
        rate_limits: None,
        descriptors: Vec::new(),
        shadow_mode: false,
        quota_mode: false,
        detailed_metric: false,
        value_to_metric: false,
        share_threshold: None,
        metadata: None,
    };
    let Some(entries) = map_entries(node, "a descriptor", report) else {
        return out;
    };
    for (key, value) in entries {
        match key_name(key, report).as_deref() {
            Some("key") => out.key = string(value, "key", report),
            Some("value") => out.value = string(value, "value", report),
            Some("rate_limit") => {
                out.rate_limit = match value.value {
                    Value::Scalar(Scalar::Null) => None,
                    _ => map_entries(value, "rate_limit", report)
                        .map(|e| limit(value.pos, e, report)),
                }
            }
            Some("rate_limits") => {
                let limits = list_of_maps(value, "rate_limits", report)
                    .into_iter()
                    .filter_map(|item| {
                        map_entries(item, "rate_limits", report).map(|e| limit(item.pos, e, report))
                    })
                    .collect();
                out.rate_limits = Some(Spanned {
                    value: limits,
                    pos: key.pos,
                });
            }
            Some("descriptors") => out.descriptors = descriptors(value, report),
            Some("shadow_mode") => out.shadow_mode = flag(value, "shadow_mode", report),
            Some("quota_mode") => out.quota_mode = flag(value, "quota_mode", report),
            Some("detailed_metric") => out.detailed_metric = flag(value, "detailed_metric", report),
            Some("value_to_metric") => out.value_to_metric = flag(value, "value_to_metric", report),
            Some("share_threshold") => {
                out.share_threshold = Some(Spanned {
                    value: flag(value, "share_threshold", report),
                    pos: key.pos,
                });
            }
            // Free-form data handed back to the client; its keys are not checked.
            Some("metadata") => match &value.value {
                Value::Map(_) => out.metadata = Some(to_json(value)),
                Value::Scalar(Scalar::Null) => {}
                _ => wrong_type(value, "metadata", "a map", report),
            },
            Some(other) => misplaced(key.pos, other, "a descriptor", DESCRIPTOR_KEYS, report),
            None => {}
        }
    }
    out
}

fn limit(pos: Position, entries: &[(Node, Node)], report: &mut Report) -> RawLimit {
    let mut out = RawLimit {
        pos,
        requests_per_unit: None,
        unit: None,
        unlimited: None,
        name: None,
        replaces: Vec::new(),
        period: None,
        algorithm: None,
        params: Vec::new(),
    };
    let parameters = sluicegate::spec::AlgorithmSpec::non_quota_parameters();
    for (key, value) in entries {
        match key_name(key, report).as_deref() {
            Some("requests_per_unit") => {
                out.requests_per_unit = integer(value, "requests_per_unit", report)
                    .and_then(|n| narrow(n, "requests_per_unit", report));
            }
            Some("unit") => out.unit = string(value, "unit", report),
            Some("unlimited") => {
                out.unlimited = Some(Spanned {
                    value: flag(value, "unlimited", report),
                    pos: key.pos,
                });
            }
            Some("name") => out.name = string(value, "name", report),
            Some("replaces") => out.replaces = replaces(value, report),
            Some("period") => out.period = string(value, "period", report),
            Some("algorithm") => out.algorithm = string(value, "algorithm", report),
            Some(other) if parameters.contains(&other) => {
                if let Some(text) = parameter(value, other, report) {
                    let key = Spanned {
                        value: other.to_owned(),
                        pos: key.pos,
                    };
                    out.params.push((key, text));
                }
            }
            Some(other) => misplaced(key.pos, other, "a rate limit", LIMIT_KEYS, report),
            None => {}
        }
    }
    out
}

/// An algorithm parameter's value as the text a spec would give it: numbers, words and
/// booleans as written, nothing (a flag such as `nodelay:`) as the empty text.
fn parameter(node: &Node, what: &str, report: &mut Report) -> Option<Spanned<String>> {
    let text = match &node.value {
        Value::Scalar(Scalar::Null) => String::new(),
        Value::Scalar(Scalar::Str(text)) => text.clone(),
        Value::Scalar(Scalar::Int(_) | Scalar::Bool(_) | Scalar::Float(_)) => node.text.clone(),
        _ => {
            wrong_type(node, what, "a number, a word or true/false", report);
            return None;
        }
    };
    Some(Spanned {
        value: text,
        pos: node.pos,
    })
}

fn replaces(node: &Node, report: &mut Report) -> Vec<Spanned<String>> {
    let mut names = Vec::new();
    for item in list_of_maps(node, "replaces", report) {
        let Some(entries) = map_entries(item, "replaces", report) else {
            continue;
        };
        let mut name = Spanned {
            value: String::new(),
            pos: item.pos,
        };
        for (key, value) in entries {
            match key_name(key, report).as_deref() {
                Some("name") => {
                    if let Some(text) = string(value, "name", report) {
                        name = text;
                    }
                }
                Some(other) => misplaced(key.pos, other, "a replaces entry", REPLACES_KEYS, report),
                None => {}
            }
        }
        names.push(name);
    }
    names
}

/// A key valid elsewhere in the format is accepted (as envoyproxy/ratelimit does) with a
/// warning; any other key is an error.
fn misplaced(pos: Position, key: &str, place: &str, expected: &'static str, report: &mut Report) {
    if UPSTREAM_KEYS.contains(&key) {
        report.warn(
            pos,
            format!("key '{key}' has no meaning in {place} and is ignored"),
        );
    } else {
        report.at(
            pos,
            RuleErrorKind::UnknownKey {
                key: key.to_owned(),
                expected,
            },
        );
    }
}
