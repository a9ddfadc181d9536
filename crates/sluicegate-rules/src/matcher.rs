//! From a request's (domain, descriptor entries) to the rule that applies, as
//! envoyproxy/ratelimit's `GetLimit` finds it:
//!
//! - at each level, `key_value` exactly, then the level's wildcard descriptors in file order
//!   (first match wins; `*` matches any run of characters, anywhere in the value), then the
//!   key-only descriptor;
//! - no backtracking: once a level matched, the next entry is looked up among its children;
//! - a rule applies only if it sits at the depth of the request's last entry.

use std::borrow::Cow;

use smallvec::SmallVec;

use crate::resolve::{DescriptorNode, Level};
use crate::rule::{Limit, Rule};
use crate::ruleset::RuleSet;

/// The rule a descriptor matched, with the keys to count and report it under.
#[derive(Debug, Clone, PartialEq)]
pub struct Match<'a> {
    /// The matched rule (limits and flags).
    pub rule: &'a Rule,
    /// The limits in force: the rule's, less those replaced by another matched limit
    /// (only [`RuleSet::find_all`] removes any). Inline for rules of one or two limits, the
    /// usual ones, so that matching them does not allocate for this list.
    pub limits: SmallVec<[&'a Limit; 2]>,
    /// The counter key, as envoyproxy/ratelimit composes its cache key (without the window
    /// suffix): `domain_key1_value1_key2_value2_`, where an entry matched by a
    /// `share_threshold` wildcard carries the pattern (so all its values share one counter).
    /// With several limits, a caller appends the limit's index.
    pub counter_key: String,
    /// The stats key: the rule id, or the request's values with `detailed_metric` /
    /// `value_to_metric`, as envoyproxy/ratelimit names its stats. Borrowed when it is the
    /// rule id (most rules), so matching does not write it anew for every request.
    pub stats_key: Cow<'a, str>,
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
        // Per-entry scratch on the stack for the usual short descriptors, on the heap beyond.
        let (mut share_inline, mut share_heap) = ([None; INLINE_ENTRIES], Vec::new());
        let share_patterns = scratch(&mut share_inline, &mut share_heap, entries.len(), None);
        let missing: Step<'_> = (None, How::Missing);
        let (mut steps_inline, mut steps_heap) = ([missing; INLINE_ENTRIES], Vec::new());
        let steps = scratch(&mut steps_inline, &mut steps_heap, entries.len(), missing);
        let mut taken = 0;
        let mut composite = Composite::default();
        for (i, &(key, value)) in entries.iter().enumerate() {
            let (node, how) = lookup(level, key, composite.of(key, value));
            if let How::Wildcard(pattern) = how {
                if node.is_some_and(|n| n.share_threshold) {
                    share_patterns[i] = pattern
                        .strip_prefix(key)
                        .and_then(|rest| rest.strip_prefix('_'));
                }
            }
            steps[i] = (node, how);
            taken = i + 1;
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
        let counter_key = counter_key(domain, entries, share_patterns);
        let steps = &steps[..taken];
        let stats_key = if stats_key_is_rule_id(rule, steps) {
            debug_assert_eq!(
                stats_key(domain, rule, entries, share_patterns, steps),
                rule.id
            );
            Cow::Borrowed(rule.id.as_str())
        } else {
            Cow::Owned(stats_key(domain, rule, entries, share_patterns, steps))
        };
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
            drop_replaced(slot, &replaced);
        }
        matches
    }

    /// The rule for a request of one descriptor: what [`RuleSet::find_all`] answers for it,
    /// without the Vec.
    pub fn find_one(&self, domain: &str, entries: &[(&str, &str)]) -> Option<Match<'_>> {
        let mut found = self.find(domain, entries);
        if let Some(rule) = found.as_ref().map(|m| m.rule) {
            if !rule.replaces.is_empty() {
                let replaced: Vec<&str> = rule.replaces.iter().map(String::as_str).collect();
                drop_replaced(&mut found, &replaced);
            }
        }
        found
    }
}

/// Removes the limits named in `replaced` from a match, and the match if none is left (and it
/// is not unlimited).
fn drop_replaced(slot: &mut Option<Match<'_>>, replaced: &[&str]) {
    if let Some(m) = slot {
        m.limits
            .retain(|l| !l.name.as_deref().is_some_and(|n| replaced.contains(&n)));
        if m.limits.is_empty() && !m.rule.unlimited {
            *slot = None;
        }
    }
}

/// The descriptor an entry led to, and how it was found.
type Step<'a> = (Option<&'a DescriptorNode>, How<'a>);

/// Entries a descriptor may have before matching it needs the heap for its scratch.
const INLINE_ENTRIES: usize = 8;

/// `len` slots of `fill`: the first of `inline` when they fit, else in `heap`.
fn scratch<'s, T: Copy>(
    inline: &'s mut [T; INLINE_ENTRIES],
    heap: &'s mut Vec<T>,
    len: usize,
    fill: T,
) -> &'s mut [T] {
    if len <= INLINE_ENTRIES {
        return &mut inline[..len];
    }
    heap.resize(len, fill);
    heap
}

/// The `key_value` text a level's exact descriptors are looked up by, written on the stack
/// when it is short (as it usually is), else into a String kept for the next entries.
struct Composite {
    bytes: [u8; 128],
    long: String,
}

impl Default for Composite {
    fn default() -> Self {
        Composite {
            bytes: [0; 128],
            long: String::new(),
        }
    }
}

impl Composite {
    fn of(&mut self, key: &str, value: &str) -> &str {
        let len = key.len() + 1 + value.len();
        if len <= self.bytes.len() {
            self.bytes[..key.len()].copy_from_slice(key.as_bytes());
            self.bytes[key.len()] = b'_';
            self.bytes[key.len() + 1..len].copy_from_slice(value.as_bytes());
            // Valid UTF-8 (two strings joined by an ASCII byte); checked all the same, since
            // the workspace has no `unsafe` to skip the check.
            if let Ok(text) = std::str::from_utf8(&self.bytes[..len]) {
                return text;
            }
        }
        self.long.clear();
        self.long.push_str(key);
        self.long.push('_');
        self.long.push_str(value);
        &self.long
    }
}

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

/// Whether a match's stats key is its rule's id: unless `detailed_metric`, or a
/// `value_to_metric` descriptor matched by wildcard or by key only, every level contributes
/// its configured `key_value` (or `key`, or wildcard pattern), as the id is made of.
fn stats_key_is_rule_id(rule: &Rule, steps: &[Step<'_>]) -> bool {
    !rule.detailed_metric
        && steps.iter().all(|&(node, how)| match node {
            Some(node) => !node.value_to_metric || how == How::Exact,
            None => false,
        })
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
