//! `sluicegate_decisions_total{domain,rule,outcome}`, `sluicegate_near_limit_total{domain,rule}`
//! and `sluicegate_shadow_mode_total{domain,rule}`, read from the decision totals when
//! `/metrics` is scraped: the request path records a decision once, in
//! [`DecisionTotals`], and the exposition is made from there.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;

use crate::serve::decision_totals::{DecisionTotals, DecisionTotalsByKey};

/// The collector, registered once in the service's registry.
#[derive(Debug)]
pub(crate) struct DecisionMetrics(pub(crate) Arc<DecisionTotalsByKey>);

/// One series: its labels and its value.
type Series = (Vec<(&'static str, String)>, u64);

impl Collector for DecisionMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (mut decisions, mut near_limit, mut shadow_mode) = (Vec::new(), Vec::new(), Vec::new());
        self.0.for_each(|domain, rule, totals| {
            let labels = || vec![("domain", domain.to_owned()), ("rule", rule.to_owned())];
            let with_outcome = |outcome: &str| {
                let mut labels = labels();
                labels.push(("outcome", outcome.to_owned()));
                labels
            };
            for (outcome, total) in outcomes(rule, totals) {
                push_counted(&mut decisions, || with_outcome(outcome), total);
            }
            push_counted(&mut near_limit, labels, &totals.near_limit);
            push_counted(&mut shadow_mode, labels, &totals.shadow_over_limit);
        });
        family(
            &mut encoder,
            "decisions",
            "Rate limit decisions.",
            &decisions,
        )?;
        family(
            &mut encoder,
            "near_limit",
            "Allowed decisions above 80% of their limit.",
            &near_limit,
        )?;
        family(
            &mut encoder,
            "shadow_mode",
            "Requests a shadow-mode rule would have denied.",
            &shadow_mode,
        )
    }
}

/// Each outcome label of `sluicegate_decisions_total` with its total.
fn outcomes<'t>(rule: &str, totals: &'t DecisionTotals) -> [(&'static str, &'t AtomicU64); 4] {
    let no_limit = if rule.is_empty() {
        "no_rule"
    } else {
        "unlimited"
    };
    [
        (no_limit, &totals.no_limit),
        ("ok", &totals.ok),
        ("over_limit", &totals.over_limit),
        ("shadow_over_limit", &totals.shadow_over_limit),
    ]
}

/// Adds a series for `total` once it counted something: `/metrics` lists only label sets that
/// counted, as a registered family does.
fn push_counted(
    series: &mut Vec<Series>,
    labels: impl FnOnce() -> Vec<(&'static str, String)>,
    total: &AtomicU64,
) {
    let value = total.load(Ordering::Relaxed);
    if value > 0 {
        series.push((labels(), value));
    }
}

/// Encodes a counter family, unless it has no series (the registry skips empty families too).
/// `help` ends with a full stop, which the registry adds to the families registered in it.
fn family(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[Series],
) -> Result<(), std::fmt::Error> {
    if series.is_empty() {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in series {
        ConstCounter::new(*value).encode(metric.encode_family(labels)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use prometheus_client::registry::Registry;

    use super::DecisionMetrics;
    use crate::serve::decision_totals::{DecisionTotalsByKey, Outcome};

    /// `totals` as the service's registry shows them.
    fn render(totals: &Arc<DecisionTotalsByKey>) -> String {
        let mut registry = Registry::with_prefix("sluicegate");
        registry.register_collector(Box::new(DecisionMetrics(Arc::clone(totals))));
        let mut text = String::new();
        let encoded = prometheus_client::encoding::text::encode(&mut text, &registry);
        assert!(encoded.is_ok());
        text
    }

    #[test]
    fn totals_are_listed_under_their_labels_and_only_what_counted_is_listed() {
        let totals = Arc::new(DecisionTotalsByKey::default());
        let rule = totals.get("d", "d.k");
        rule.count(Outcome::Allowed { near_limit: false });
        rule.count(Outcome::Allowed { near_limit: true });
        totals.get("d", "").count(Outcome::NoLimit);
        totals.get("e", "e.k").count(Outcome::ShadowDenied);
        // Found but never counted: no series.
        totals.get("f", "f.k");
        let text = render(&totals);
        for line in [
            "# HELP sluicegate_decisions Rate limit decisions.",
            "# TYPE sluicegate_decisions counter",
            r#"sluicegate_decisions_total{domain="d",rule="d.k",outcome="ok"} 2"#,
            r#"sluicegate_near_limit_total{domain="d",rule="d.k"} 1"#,
            r#"sluicegate_decisions_total{domain="d",rule="",outcome="no_rule"} 1"#,
            r#"sluicegate_decisions_total{domain="e",rule="e.k",outcome="shadow_over_limit"} 1"#,
            r#"sluicegate_shadow_mode_total{domain="e",rule="e.k"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert!(!text.contains(r#"outcome="over_limit""#), "{text}");
        assert!(!text.contains("unlimited"), "{text}");
        assert!(!text.contains("f.k"), "{text}");
    }

    #[test]
    fn nothing_counted_lists_no_decision_family() {
        let totals = Arc::new(DecisionTotalsByKey::default());
        totals.get("d", "d.k");
        let text = render(&totals);
        assert!(!text.contains("sluicegate_decisions"), "{text}");
        assert!(!text.contains("sluicegate_near_limit"), "{text}");
    }
}
