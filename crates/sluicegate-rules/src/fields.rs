//! Reading typed fields out of YAML nodes, as yaml.v2 (envoyproxy/ratelimit's parser) would
//! decode them into its structs, reporting what does not fit.

use crate::error::{Report, RuleErrorKind};
use crate::yaml::Spanned;
use crate::yaml::{Node, Scalar, Value};

/// The entries of a map; also reports map keys given twice (yaml.v2 rejects them).
pub(crate) fn map_entries<'n>(
    node: &'n Node,
    what: &str,
    report: &mut Report,
) -> Option<&'n [(Node, Node)]> {
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
pub(crate) fn list_of_maps<'n>(node: &'n Node, what: &str, report: &mut Report) -> Vec<&'n Node> {
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

pub(crate) fn key_name(key: &Node, report: &mut Report) -> Option<String> {
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
pub(crate) fn string(node: &Node, what: &str, report: &mut Report) -> Option<Spanned<String>> {
    let text = match &node.value {
        Value::Scalar(Scalar::Null) => String::new(),
        Value::Scalar(Scalar::Str(text)) => text.clone(),
        Value::Scalar(Scalar::Int(_) | Scalar::Bool(_)) => node.text.clone(),
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

pub(crate) fn flag(node: &Node, what: &str, report: &mut Report) -> bool {
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

pub(crate) fn integer(node: &Node, what: &str, report: &mut Report) -> Option<Spanned<u64>> {
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

pub(crate) fn narrow(n: Spanned<u64>, what: &str, report: &mut Report) -> Option<Spanned<u32>> {
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

pub(crate) fn wrong_type(node: &Node, what: &str, expected: &'static str, report: &mut Report) {
    report.at(
        node.pos,
        RuleErrorKind::WrongType {
            what: what.to_owned(),
            expected,
            found: node.describe(),
        },
    );
}

pub(crate) fn scalar_text(node: &Node) -> String {
    match &node.value {
        Value::Scalar(_) => node.text.clone(),
        _ => node.describe(),
    }
}

/// Free-form YAML as JSON (map keys as their text).
pub(crate) fn to_json(node: &Node) -> serde_json::Value {
    use serde_json::Value as Json;
    match &node.value {
        Value::Scalar(Scalar::Null) => Json::Null,
        Value::Scalar(Scalar::Bool(b)) => Json::Bool(*b),
        Value::Scalar(Scalar::Int(i)) => Json::from(*i),
        Value::Scalar(Scalar::Float(text)) => text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or_else(|| Json::String(text.clone()), Json::Number),
        Value::Scalar(Scalar::Str(text)) => Json::String(text.clone()),
        Value::Seq(items) => Json::Array(items.iter().map(to_json).collect()),
        Value::Map(entries) => Json::Object(
            entries
                .iter()
                .map(|(key, value)| (scalar_text(key), to_json(value)))
                .collect(),
        ),
    }
}
