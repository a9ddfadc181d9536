//! A value per configured limit (an in-memory limiter, a Redis limit), by rule id and limit
//! index, rebuilt on reload while keeping the values of limits that did not change, so a
//! reload never resets anyone's budget.

use std::collections::HashMap;

use sluicegate_rules::{Limit, Rule, RuleSet};

/// One `T` per limit of every rule.
#[derive(Debug)]
pub(crate) struct PerLimit<T> {
    by_rule: HashMap<String, Vec<(Limit, T)>>,
}

impl<T> Default for PerLimit<T> {
    fn default() -> Self {
        PerLimit {
            by_rule: HashMap::new(),
        }
    }
}

impl<T: Clone> PerLimit<T> {
    /// A value for every limit in `rules`: `previous`'s where the limit is unchanged, else
    /// `make(rule, index, limit)`.
    pub(crate) fn build<E>(
        rules: &RuleSet,
        previous: Option<&PerLimit<T>>,
        mut make: impl FnMut(&Rule, usize, &Limit) -> Result<T, E>,
    ) -> Result<PerLimit<T>, E> {
        let mut by_rule = HashMap::new();
        for domain in rules.domains() {
            for rule in rules.rules(domain) {
                let old = previous.and_then(|p| p.by_rule.get(&rule.id));
                let mut values = Vec::with_capacity(rule.limits.len());
                for (index, limit) in rule.limits.iter().enumerate() {
                    let reused = old
                        .and_then(|limits| limits.get(index))
                        .filter(|(old_limit, _)| old_limit == limit)
                        .map(|(_, value)| value.clone());
                    let value = match reused {
                        Some(value) => value,
                        None => make(rule, index, limit)?,
                    };
                    values.push((limit.clone(), value));
                }
                by_rule.insert(rule.id.clone(), values);
            }
        }
        Ok(PerLimit { by_rule })
    }

    /// The value of limit `index` of rule `rule_id`.
    pub(crate) fn get(&self, rule_id: &str, index: usize) -> Option<&T> {
        let (_, value) = self.by_rule.get(rule_id)?.get(index)?;
        Some(value)
    }
}
