//! Limits a context cannot honour, refused at the place they were written: the rule files
//! mean the same wherever they are read, and a reader that cannot do what one says (the rate
//! limit service cannot hold a request for a shaping wait; Redis has no smooth limiters)
//! says so with file, line and column instead of reading it as something else.

use crate::error::{LoadErrors, RuleError, RuleErrorKind};
use crate::rule::{Limit, Rule};
use crate::ruleset::RuleSet;
use crate::yaml::Position;

/// One limit of a rule set, with where its algorithm was written.
#[derive(Debug, Clone, Copy)]
pub struct LimitAt<'a> {
    /// The rule the limit belongs to.
    pub rule: &'a Rule,
    /// The limit.
    pub limit: &'a Limit,
    /// Its `algorithm` key, or its `rate_limit` map when it names none.
    pub position: Position,
}

impl LimitAt<'_> {
    /// An error about this limit, at its position in its file.
    pub fn error(&self, message: impl Into<String>) -> RuleError {
        RuleError {
            file: self.rule.source.file.clone(),
            position: Some(self.position),
            kind: RuleErrorKind::Extension {
                message: message.into(),
            },
        }
    }
}

impl RuleSet {
    /// Every limit of every rule, with where its algorithm was written.
    pub fn limits_at(&self) -> Vec<LimitAt<'_>> {
        let mut out = Vec::new();
        for domain in self.domains() {
            for rule in self.rules(domain) {
                for (index, limit) in rule.limits.iter().enumerate() {
                    let position = rule
                        .limit_positions
                        .get(index)
                        .copied()
                        .unwrap_or(rule.source.position);
                    out.push(LimitAt {
                        rule,
                        limit,
                        position,
                    });
                }
            }
        }
        out
    }

    /// The limits whose algorithm holds admitted requests for a wait ([`Limit::shapes`]): a
    /// leaky queue without `nodelay`, or with a `delay` below its `burst`.
    pub fn shaping_limits(&self) -> Vec<LimitAt<'_>> {
        self.limits_at()
            .into_iter()
            .filter(|at| at.limit.shapes())
            .collect()
    }

    /// Refuses every limit for which `refuse` gives a reason, each reported at its place.
    pub fn refuse_limits(
        &self,
        mut refuse: impl FnMut(&Limit) -> Option<String>,
    ) -> Result<(), LoadErrors> {
        let errors: Vec<RuleError> = self
            .limits_at()
            .into_iter()
            .filter_map(|at| refuse(at.limit).map(|reason| at.error(reason)))
            .collect();
        match errors.is_empty() {
            true => Ok(()),
            false => Err(LoadErrors::new(errors)),
        }
    }

    /// What the rate limit service (which answers yes or no, and cannot make a request wait)
    /// cannot honour: a limit that shapes. A leaky queue there must say `nodelay: true`
    /// (every request within the burst passes at once: what a rule file without `delay`
    /// used to mean), or a `delay` equal to its `burst`.
    pub fn check_for_service(&self) -> Result<(), LoadErrors> {
        self.refuse_limits(|limit| {
            limit.shapes().then(|| {
                format!(
                    "{} shapes (holds requests for a wait), which the rate limit service cannot \
                     do: write `nodelay: true` to admit the whole burst at once",
                    limit.algorithm_name
                )
            })
        })
    }
}
