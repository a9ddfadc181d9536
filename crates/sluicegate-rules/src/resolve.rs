//! Phase two: raw descriptors checked and turned into the lookup tree of a domain, with the
//! same composite keys (`key` or `key_value`) envoyproxy/ratelimit uses, so lookups and
//! duplicate checks behave exactly as there.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::error::{Report, RuleErrorKind};
use crate::limit::resolve_limit;
use crate::raw::RawDescriptor;
use crate::rule::{Limit, Rule, Source};
use crate::yaml::Position;

/// One level of descriptors: children by composite key, and the wildcard keys in file order.
#[derive(Debug, Default, Clone)]
pub(crate) struct Level {
    /// Looked up for every entry of every request (up to twice): hashed with foldhash, not
    /// SipHash; keys come from the rule files, not from requests, so nothing to flood.
    pub(crate) children: HashMap<String, DescriptorNode, foldhash::fast::RandomState>,
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
    let rule = |limits: Vec<(Limit, Position)>, unlimited: bool, replaces: Vec<String>| Rule {
        id: full_key.to_owned(),
        limit_positions: limits.iter().map(|(_, pos)| *pos).collect(),
        limits: limits.into_iter().map(|(limit, _)| limit).collect(),
        unlimited,
        replaces,
        shadow_mode: raw.shadow_mode,
        quota_mode: raw.quota_mode,
        detailed_metric: raw.detailed_metric,
        value_to_metric: raw.value_to_metric,
        metadata: raw.metadata.clone(),
        source,
        // Numbered once the whole rule set is loaded.
        index: 0,
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
            // An unlimited rule has no limit, but its `replaces` still count (upstream
            // collects them before it sets unlimited descriptors aside).
            let replaces = one.replaces.iter().map(|r| r.value.clone()).collect();
            match (unlimited, limit) {
                (true, _) => Some(rule(Vec::new(), true, replaces)),
                (false, Some(limit)) => Some(rule(vec![limit], false, replaces)),
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
            let names: Vec<&str> = limits
                .iter()
                .filter_map(|(l, _)| l.name.as_deref())
                .collect();
            let mut sibling_replaced = false;
            for replaced in list.value.iter().flat_map(|entry| &entry.replaces) {
                if names.contains(&replaced.value.as_str()) {
                    sibling_replaced = true;
                    report.extension(
                        replaced.pos,
                        format!(
                            "'{}' is a limit of the same descriptor: limits in rate_limits are \
                             enforced together and cannot replace one another",
                            replaced.value
                        ),
                    );
                }
            }
            let replaces = limits
                .iter()
                .flat_map(|(l, _)| l.replaces.clone())
                .collect();
            (!sibling_replaced && limits.len() == list.value.len())
                .then(|| rule(limits, false, replaces))
        }
    }
}
