//! Phase one: the YAML tree read into the shape of the format, every field with its position,
//! nothing interpreted yet. Shape errors (unknown keys, wrong types, lists of non-maps) are
//! found here; meaning errors (bad units, duplicates) in [`crate::resolve`].
//!
//! envoyproxy/ratelimit checks keys against one flat set for the whole file, so a known key
//! in the wrong place (`unit` on a descriptor) passes there and is ignored. We accept such
//! files too (every file it accepts must load) but warn; Sluicegate's own keys are only
//! accepted where they belong.

use crate::error::{Report, RuleErrorKind};
use crate::yaml::{Node, Position, Scalar, Value};

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
     burst, buckets, delay";
const REPLACES_KEYS: &str = "name";

/// A value and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Spanned<T> {
    pub(crate) value: T,
    pub(crate) pos: Position,
}

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
    pub(crate) burst: Option<Spanned<u64>>,
    pub(crate) buckets: Option<Spanned<u64>>,
    pub(crate) delay: Option<Spanned<u64>>,
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
            // Free-form data for the client (envoyproxy/ratelimit does not look inside).
            Some("metadata") => {}
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
        burst: None,
        buckets: None,
        delay: None,
    };
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
            Some("burst") => out.burst = integer(value, "burst", report),
            Some("buckets") => out.buckets = integer(value, "buckets", report),
            Some("delay") => out.delay = integer(value, "delay", report),
            Some(other) => misplaced(key.pos, other, "a rate limit", LIMIT_KEYS, report),
            None => {}
        }
    }
    out
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

/// The entries of a map; also reports map keys given twice (yaml.v2 rejects them).
fn map_entries<'n>(node: &'n Node, what: &str, report: &mut Report) -> Option<&'n [(Node, Node)]> {
    match &node.value {
        Value::Map(entries) => {
            for (i, (key, _)) in entries.iter().enumerate() {
                if entries[..i]
                    .iter()
                    .any(|(earlier, _)| earlier.value == key.value)
                {
                    report.at(
                        key.pos,
                        RuleErrorKind::RepeatedKey {
                            key: scalar_text(key),
                        },
                    );
                }
            }
            Some(entries)
        }
        _ => {
            report.at(
                node.pos,
                RuleErrorKind::WrongType {
                    what: what.to_owned(),
                    expected: "a map",
                    found: node.describe(),
                },
            );
            None
        }
    }
}

/// The maps in a list; a null is an empty list; non-map items are reported.
fn list_of_maps<'n>(node: &'n Node, what: &str, report: &mut Report) -> Vec<&'n Node> {
    match &node.value {
        Value::Scalar(Scalar::Null) => Vec::new(),
        Value::Seq(items) => items
            .iter()
            .filter(|item| {
                let is_map = matches!(item.value, Value::Map(_));
                if !is_map {
                    report.at(
                        item.pos,
                        RuleErrorKind::NonMapListItem {
                            item: scalar_text(item),
                        },
                    );
                }
                is_map
            })
            .collect(),
        _ => {
            report.at(
                node.pos,
                RuleErrorKind::WrongType {
                    what: what.to_owned(),
                    expected: "a list",
                    found: node.describe(),
                },
            );
            Vec::new()
        }
    }
}

fn key_name(key: &Node, report: &mut Report) -> Option<String> {
    match &key.value {
        Value::Scalar(Scalar::Str(name)) => Some(name.clone()),
        _ => {
            report.at(
                key.pos,
                RuleErrorKind::NonStringKey {
                    key: scalar_text(key),
                },
            );
            None
        }
    }
}

/// A string field. As in yaml.v2, integers and booleans are read as their text and null as
/// the empty string; floats are rejected as envoyproxy/ratelimit's key check does.
fn string(node: &Node, what: &str, report: &mut Report) -> Option<Spanned<String>> {
    let text = match &node.value {
        Value::Scalar(Scalar::Null) => String::new(),
        Value::Scalar(Scalar::Str(text)) => text.clone(),
        Value::Scalar(scalar @ (Scalar::Int(_) | Scalar::Bool(_))) => scalar.to_string(),
        Value::Scalar(Scalar::Float(text)) => {
            report.at(
                node.pos,
                RuleErrorKind::FloatValue {
                    value: text.clone(),
                },
            );
            return None;
        }
        _ => {
            wrong_type(node, what, "a string", report);
            return None;
        }
    };
    Some(Spanned {
        value: text,
        pos: node.pos,
    })
}

fn flag(node: &Node, what: &str, report: &mut Report) -> bool {
    match &node.value {
        Value::Scalar(Scalar::Null) => false,
        Value::Scalar(Scalar::Bool(b)) => *b,
        // YAML 1.1 booleans, which yaml.v2 (envoyproxy/ratelimit's parser) accepts.
        Value::Scalar(Scalar::Str(text)) if matches!(text.as_str(), "yes" | "on" | "y") => true,
        Value::Scalar(Scalar::Str(text)) if matches!(text.as_str(), "no" | "off" | "n") => false,
        _ => {
            wrong_type(node, what, "true or false", report);
            false
        }
    }
}

fn integer(node: &Node, what: &str, report: &mut Report) -> Option<Spanned<u64>> {
    match &node.value {
        Value::Scalar(Scalar::Int(n)) if *n >= 0 => Some(Spanned {
            value: n.unsigned_abs(),
            pos: node.pos,
        }),
        Value::Scalar(Scalar::Float(text)) => {
            report.at(
                node.pos,
                RuleErrorKind::FloatValue {
                    value: text.clone(),
                },
            );
            None
        }
        _ => {
            wrong_type(node, what, "a whole number >= 0", report);
            None
        }
    }
}

fn narrow(n: Spanned<u64>, what: &str, report: &mut Report) -> Option<Spanned<u32>> {
    match u32::try_from(n.value) {
        Ok(value) => Some(Spanned { value, pos: n.pos }),
        Err(_) => {
            report.at(
                n.pos,
                RuleErrorKind::WrongType {
                    what: what.to_owned(),
                    expected: "at most 4294967295",
                    found: n.value.to_string(),
                },
            );
            None
        }
    }
}

fn wrong_type(node: &Node, what: &str, expected: &'static str, report: &mut Report) {
    report.at(
        node.pos,
        RuleErrorKind::WrongType {
            what: what.to_owned(),
            expected,
            found: node.describe(),
        },
    );
}

fn scalar_text(node: &Node) -> String {
    match &node.value {
        Value::Scalar(scalar) => scalar.to_string(),
        _ => node.describe(),
    }
}
