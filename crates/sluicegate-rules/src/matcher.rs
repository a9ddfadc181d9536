//! From a request's (domain, descriptor entries) to the rule that applies, as
//! envoyproxy/ratelimit's `GetLimit` finds it:
//!
//! - at each level, `key_value` exactly, then the level's wildcard descriptors in file order
//!   (first match wins; `*` matches any run of characters, anywhere in the value), then the
//!   key-only descriptor;
//! - no backtracking: once a level matched, the next entry is looked up among its children;
//! - a rule applies only if it sits at the depth of the request's last entry.

use crate::resolve::{DescriptorNode, Level};
use crate::rule::{Limit, Rule};
use crate::ruleset::RuleSet;

/// The rule a descriptor matched, with the keys to count and report it under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match<'a> {
    /// The matched rule (limits and flags).
    pub rule: &'a Rule,
    /// The limits in force: the rule's, less those replaced by another matched limit
    /// (only [`RuleSet::find_all`] removes any).
    pub limits: Vec<&'a Limit>,
    /// The counter key, as envoyproxy/ratelimit composes its cache key (without the window
    /// suffix): `domain_key1_value1_key2_value2_`, where an entry matched by a
    /// `share_threshold` wildcard carries the pattern (so all its values share one counter).
    /// With several limits, a caller appends the limit's index.
    pub counter_key: String,
    /// The stats key: the rule id, or the request's values with `detailed_metric` /
    /// `value_to_metric`, as envoyproxy/ratelimit names its stats.
    pub stats_key: String,
}

impl Match<'_> {
    /// `unlimited: true`: matched, but never limited.
    pub fn unlimited(&self) -> bool {
        self.rule.unlimited
    }

    /// Report over-limit, but let the request pass.
    pub fn shadow_mode(&self) -> bool {
        self.rule.shadow_mode
    }
}

impl RuleSet {
    /// The rule for one descriptor, or `None` (no limit: allowed) when the domain is unknown
    /// or no rule sits at the depth of the last entry.
    pub fn find(&self, domain: &str, entries: &[(&str, &str)]) -> Option<Match<'_>> {
        let &index = self.by_name.get(domain)?;
        let mut level: &Level = &self.domains[index].root;
        let mut found = None;
        let mut share_patterns: Vec<Option<&str>> = vec![None; entries.len()];
        let mut steps: Vec<Step<'_>> = Vec::with_capacity(entries.len());
        let longest = entries.iter().map(|(k, v)| k.len() + v.len()).max();
        let mut composite = String::with_capacity(longest.unwrap_or(0) + 1);
        for (i, &(key, value)) in entries.iter().enumerate() {
            composite.clear();
            composite.push_str(key);
            composite.push('_');
            composite.push_str(value);
            let (node, how) = lookup(level, key, &composite);
            if let How::Wildcard(pattern) = how {
                if node.is_some_and(|n| n.share_threshold) {
                    share_patterns[i] = pattern
                        .strip_prefix(key)
                        .and_then(|rest| rest.strip_prefix('_'));
                }
            }
            steps.push((node, how));
            let Some(node) = node else { break };
            if i + 1 == entries.len() {
                found = node.rule.as_ref();
            }
            if node.level.children.is_empty() {
                break;
            }
            level = &node.level;
        }
        let rule = found?;
        let counter_key = counter_key(domain, entries, &share_patterns);
        let stats_key = stats_key(domain, rule, entries, &share_patterns, &steps);
        Some(Match {
            rule,
            limits: rule.limits.iter().collect(),
            counter_key,
            stats_key,
        })
    }

    /// The rules for all descriptors of one request, in order, after `replaces`: a limit
    /// whose `name` is listed in the `replaces` of any limit matched by the request no longer
    /// applies (a descriptor left with no limit, and not unlimited, becomes `None`).
    pub fn find_all(
        &self,
        domain: &str,
        descriptors: &[&[(&str, &str)]],
    ) -> Vec<Option<Match<'_>>> {
        let mut matches: Vec<Option<Match<'_>>> = descriptors
            .iter()
            .map(|entries| self.find(domain, entries))
            .collect();
        let replaced: Vec<&str> = matches
            .iter()
            .flatten()
            .flat_map(|m| m.rule.replaces.iter().map(String::as_str))
            .collect();
        if replaced.is_empty() {
            return matches;
        }
        for slot in &mut matches {
            if let Some(m) = slot {
                m.limits
                    .retain(|l| !l.name.as_deref().is_some_and(|n| replaced.contains(&n)));
                if m.limits.is_empty() && !m.rule.unlimited {
                    *slot = None;
                }
            }
        }
        matches
    }
}

/// The descriptor an entry led to, and how it was found.
type Step<'a> = (Option<&'a DescriptorNode>, How<'a>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How<'a> {
    Exact,
    Wildcard(&'a str),
    KeyOnly,
    Missing,
}

fn lookup<'l>(
    level: &'l Level,
    key: &str,
    composite: &str,
) -> (Option<&'l DescriptorNode>, How<'l>) {
    if let Some(node) = level.children.get(composite) {
        return (Some(node), How::Exact);
    }
    for pattern in &level.wildcards {
        if glob_match(pattern, composite) {
            return (level.children.get(pattern), How::Wildcard(pattern));
        }
    }
    match level.children.get(key) {
        Some(node) => (Some(node), How::KeyOnly),
        None => (None, How::Missing),
    }
}

/// `*` matches any run of characters (also none); everything else matches itself.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let mut parts: Vec<&str> = parts.collect();
    let Some(last) = parts.pop() else {
        return rest.is_empty();
    };
    for part in parts {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

fn counter_key(domain: &str, entries: &[(&str, &str)], share: &[Option<&str>]) -> String {
    let mut key = String::with_capacity(domain.len() + 1 + entries.len() * 16);
    key.push_str(domain);
    key.push('_');
    for (i, (k, v)) in entries.iter().enumerate() {
        key.push_str(k);
        key.push('_');
        key.push_str(share[i].unwrap_or(v));
        key.push('_');
    }
    key
}

/// `key_value`, or `key` alone for an empty value.
fn push_key_value(out: &mut String, key: &str, value: &str) {
    out.push_str(key);
    if !value.is_empty() {
        out.push('_');
        out.push_str(value);
    }
}

/// `key_value`, written into `out` without an intermediate string.
fn push_pair(out: &mut String, key: &str, value: &str) {
    out.push_str(key);
    out.push('_');
    out.push_str(value);
}

/// Appends one level of the `value_to_metric` stats key.
fn push_metric_part(
    out: &mut String,
    node: Option<&DescriptorNode>,
    how: How<'_>,
    key: &str,
    value: &str,
    share: Option<&str>,
) {
    let Some(node) = node else {
        out.push_str(key);
        return;
    };
    match (how, share) {
        (How::Wildcard(_) | How::Exact, Some(pattern)) => push_pair(out, key, pattern),
        (How::Wildcard(pattern), None) if !node.value_to_metric => out.push_str(pattern),
        (How::Wildcard(_), None) | (How::Exact, None) => push_key_value(out, key, value),
        _ if node.value_to_metric => push_key_value(out, key, value),
        _ => out.push_str(&node.key),
    }
}

fn stats_key(
    domain: &str,
    rule: &Rule,
    entries: &[(&str, &str)],
    share: &[Option<&str>],
    steps: &[Step<'_>],
) -> String {
    let room: usize = entries.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    let mut key = String::with_capacity(domain.len() + room);
    key.push_str(domain);
    if rule.detailed_metric {
        for (i, (k, v)) in entries.iter().enumerate() {
            key.push('.');
            match share[i] {
                Some(pattern) => push_pair(&mut key, k, pattern),
                None if share.iter().any(Option::is_some) => push_key_value(&mut key, k, v),
                None => push_pair(&mut key, k, v),
            }
        }
        return key;
    }
    for (i, &(node, how)) in steps.iter().enumerate() {
        let (k, v) = entries[i];
        key.push('.');
        push_metric_part(&mut key, node, how, k, v, share[i]);
    }
    key
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs() {
        assert!(glob_match("k_foo*", "k_foo"));
        assert!(glob_match("k_foo*", "k_foobar"));
        assert!(!glob_match("k_foo*", "k_fo"));
        assert!(glob_match("k_bar*b", "k_barxyzb"));
        assert!(glob_match("k_bar*b", "k_barb"));
        assert!(!glob_match("k_bar*b", "k_barbx"));
        assert!(glob_match("k_foo*bar*baz", "k_foo1bar2baz"));
        assert!(!glob_match("k_foo*bar*baz", "k_foo1baz"));
        assert!(!glob_match("k_ab*ba", "k_aba"));
        assert!(glob_match("k_*", "k_"));
    }
}
