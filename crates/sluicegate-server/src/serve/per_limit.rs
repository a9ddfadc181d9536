//! A value per configured limit (an in-memory limiter, a Redis limit), by rule and limit
//! index, rebuilt on reload while keeping the values of limits that did not change, so a
//! reload never resets anyone's budget.

use std::collections::HashMap;

use sluicegate_rules::{Limit, Rule, RuleSet};

/// One `T` per limit of every rule of one rule set, found by the rule's
/// [`index`](Rule::index) (no hashing of its id per call).
#[derive(Debug)]
pub(crate) struct PerLimit<T> {
    /// By rule index.
    by_rule: Vec<RuleValues<T>>,
}

/// A rule's id, and each of its limits with its value.
type RuleValues<T> = (String, Vec<(Limit, T)>);

impl<T> Default for PerLimit<T> {
    fn default() -> Self {
        PerLimit {
            by_rule: Vec::new(),
        }
    }
}

impl<T: Clone> PerLimit<T> {
    /// A value for every limit in `rules`: `previous`'s where the rule (by id) and the limit
    /// are unchanged, else `make(rule, index, limit, before)`, where `before` is the value
    /// the same limit of the same rule had, if it had one (its parameters changed).
    pub(crate) fn build<E>(
        rules: &RuleSet,
        previous: Option<&PerLimit<T>>,
        mut make: impl FnMut(&Rule, usize, &Limit, Option<&T>) -> Result<T, E>,
    ) -> Result<PerLimit<T>, E> {
        let old_by_id: HashMap<&str, &Vec<(Limit, T)>> = previous
            .map(|p| p.by_rule.iter().map(|(id, v)| (id.as_str(), v)).collect())
            .unwrap_or_default();
        let mut by_rule: Vec<Option<RuleValues<T>>> = Vec::new();
        by_rule.resize_with(rules.rule_count(), || None);
        for domain in rules.domains() {
            for rule in rules.rules(domain) {
                let old = old_by_id.get(rule.id.as_str());
                let mut values = Vec::with_capacity(rule.limits.len());
                for (index, limit) in rule.limits.iter().enumerate() {
                    let before = old.and_then(|limits| limits.get(index));
                    let value = match before {
                        Some((old_limit, value)) if old_limit == limit => value.clone(),
                        _ => make(rule, index, limit, before.map(|(_, value)| value))?,
                    };
                    values.push((limit.clone(), value));
                }
                if let Some(slot) = by_rule.get_mut(rule.index()) {
                    *slot = Some((rule.id.clone(), values));
                }
            }
        }
        // Every index below the rule count names a rule, so no slot is left empty; one that
        // were would hold no limits.
        let by_rule = by_rule
            .into_iter()
            .map(|slot| slot.unwrap_or_default())
            .collect();
        Ok(PerLimit { by_rule })
    }

    /// Every limit's value.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.by_rule
            .iter()
            .flat_map(|(_, limits)| limits.iter().map(|(_, value)| value))
    }

    /// The value of limit `index` of `rule`, a rule of the rule set this table was built for.
    #[inline]
    pub(crate) fn get(&self, rule: &Rule, index: usize) -> Option<&T> {
        let (id, limits) = self.by_rule.get(rule.index())?;
        // A rule of another rule set would find a stranger's limits: a comparison (far
        // cheaper than hashing the id) answers `None` instead.
        if *id != rule.id {
            return None;
        }
        let (_, value) = limits.get(index)?;
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluicegate_rules::LoadOptions;

    fn rules(yaml: &str) -> Result<RuleSet, Box<dyn std::error::Error>> {
        Ok(RuleSet::from_sources(
            &[("rules.yaml".into(), yaml.to_owned())],
            &LoadOptions::default(),
        )?)
    }

    /// Numbers each value made, so a reused value is told from a new one.
    fn numbered(
        made: &mut usize,
    ) -> impl FnMut(&Rule, usize, &Limit, Option<&usize>) -> Result<usize, String> {
        move |_, _, _, _| {
            *made += 1;
            Ok(*made)
        }
    }

    #[test]
    fn values_follow_their_rule_when_the_rules_around_it_change()
    -> Result<(), Box<dyn std::error::Error>> {
        let before = rules(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limits:\n      - {unit: second, requests_per_unit: 2}\n      - {unit: hour, requests_per_unit: 3}\n",
        )?;
        let mut made = 0;
        let first = PerLimit::build(&before, None, numbered(&mut made))?;
        let rule = |set: &RuleSet, id: &str| -> Result<Rule, String> {
            set.rules("d")
                .into_iter()
                .find(|r| r.id == id)
                .cloned()
                .ok_or(format!("no rule {id}"))
        };
        let b = rule(&before, "d.b")?;
        assert_eq!((first.get(&b, 0), first.get(&b, 1)), (Some(&2), Some(&3)));

        // A new rule first (every index moves), and `b`'s first limit changed.
        let after = rules(
            "domain: d\ndescriptors:\n  - key: new\n    rate_limit: {unit: day, requests_per_unit: 4}\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limits:\n      - {unit: second, requests_per_unit: 20}\n      - {unit: hour, requests_per_unit: 3}\n",
        )?;
        let mut made = 10;
        let second = PerLimit::build(&after, Some(&first), numbered(&mut made))?;
        let (new, a_after, b_after) = (
            rule(&after, "d.new")?,
            rule(&after, "d.a")?,
            rule(&after, "d.b")?,
        );
        assert_ne!(b_after.index(), b.index());
        assert_eq!(second.get(&new, 0), Some(&11));
        assert_eq!(second.get(&a_after, 0), Some(&1), "unchanged: kept");
        assert_eq!(second.get(&b_after, 0), Some(&12), "changed: made anew");
        assert_eq!(second.get(&b_after, 1), Some(&3), "unchanged: kept");
        assert_eq!(second.get(&b_after, 2), None);
        // A rule of the other set is not mistaken for the one now at its index.
        assert_eq!(second.get(&rule(&before, "d.a")?, 0), None);
        Ok(())
    }
}
