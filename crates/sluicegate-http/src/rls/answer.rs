//! The service's answer as a verdict: one decision per descriptor status, each described by
//! the limit the service reported.

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use sluicegate::{Decision, Micros};

use crate::rate_limit::{LimitInfo, Verdict};

/// The verdict of `answer`; `None` if it is not one (an `UNKNOWN` overall code).
pub(crate) fn verdict(answer: &RateLimitResponse, domain: &str) -> Option<Verdict> {
    let allowed = match Code::try_from(answer.overall_code).ok()? {
        Code::Ok => true,
        Code::OverLimit => false,
        Code::Unknown => return None,
    };
    let mut decisions = Vec::with_capacity(answer.statuses.len());
    let mut limits = Vec::with_capacity(answer.statuses.len());
    for (i, status) in answer.statuses.iter().enumerate() {
        // A descriptor no rule matched (or an unlimited one) limits nothing: nothing to say.
        if let Some((decision, limit)) = describe(status, domain, i) {
            decisions.push(decision);
            limits.push(limit);
        }
    }
    let limits: Arc<[LimitInfo]> = limits.into();
    Some(Verdict::new(allowed, decisions).with_limits(limits))
}

fn describe(
    status: &DescriptorStatus,
    domain: &str,
    index: usize,
) -> Option<(Decision, LimitInfo)> {
    let limit = status.current_limit.as_ref()?;
    let unit = unit_length(Unit::try_from(limit.unit).unwrap_or(Unit::Unknown))?;
    let name = if limit.name.is_empty() {
        format!("{domain}-{index}")
    } else {
        limit.name.clone()
    };
    let reset = status.duration_until_reset.as_ref().map_or(unit, |d| {
        Duration::new(
            u64::try_from(d.seconds).unwrap_or(0),
            u32::try_from(d.nanos).unwrap_or(0),
        )
    });
    let reset: Micros = u64::try_from(reset.as_micros()).unwrap_or(Micros::MAX);
    let quota = u64::from(limit.requests_per_unit);
    let remaining = u64::from(status.limit_remaining);
    let decision = if status.code == Code::OverLimit as i32 {
        Decision::deny(quota, remaining, reset, Some(reset))
    } else {
        Decision::allow(quota, remaining, reset)
    };
    Some((decision, LimitInfo::rate(&name, quota, unit)))
}

/// The length of a rule's unit (a month as 30 days, a year as 365, as the service counts
/// them for `RateLimit-Policy`'s window).
fn unit_length(unit: Unit) -> Option<Duration> {
    const DAY: u64 = 86_400;
    let seconds = match unit {
        Unit::Second => 1,
        Unit::Minute => 60,
        Unit::Hour => 3_600,
        Unit::Day => DAY,
        Unit::Week => 7 * DAY,
        Unit::Month => 30 * DAY,
        Unit::Year => 365 * DAY,
        Unit::Unknown => return None,
    };
    Some(Duration::from_secs(seconds))
}
