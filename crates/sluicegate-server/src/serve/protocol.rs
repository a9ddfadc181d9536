//! The service's request and answer, independent of the wire (gRPC or JSON): both transports
//! convert to and from these, so they cannot drift apart.

use std::time::Duration;

use smallvec::SmallVec;

use sluicegate_http::rate_limit::LimitInfo;

/// Envoy's rate limit units, as the protocol numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EnvoyUnit {
    /// No unit: a limit over some other period (Sluicegate's `period:` extension).
    Unknown,
    /// Per second.
    Second,
    /// Per minute.
    Minute,
    /// Per hour.
    Hour,
    /// Per day.
    Day,
    /// Per month (30 days).
    Month,
    /// Per year (365 days).
    Year,
    /// Per week.
    Week,
}

impl EnvoyUnit {
    /// The unit's number in `envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit`.
    pub fn proto_number(self) -> i32 {
        match self {
            EnvoyUnit::Unknown => 0,
            EnvoyUnit::Second => 1,
            EnvoyUnit::Minute => 2,
            EnvoyUnit::Hour => 3,
            EnvoyUnit::Day => 4,
            EnvoyUnit::Month => 5,
            EnvoyUnit::Year => 6,
            EnvoyUnit::Week => 7,
        }
    }

    /// The unit for a protocol number; `None` for numbers the protocol does not define.
    pub fn from_proto_number(number: i32) -> Option<EnvoyUnit> {
        Some(match number {
            0 => EnvoyUnit::Unknown,
            1 => EnvoyUnit::Second,
            2 => EnvoyUnit::Minute,
            3 => EnvoyUnit::Hour,
            4 => EnvoyUnit::Day,
            5 => EnvoyUnit::Month,
            6 => EnvoyUnit::Year,
            7 => EnvoyUnit::Week,
            _ => return None,
        })
    }

    /// The protocol's name for the unit (`SECOND`, ...), as the JSON form writes it.
    pub fn proto_name(self) -> &'static str {
        match self {
            EnvoyUnit::Unknown => "UNKNOWN",
            EnvoyUnit::Second => "SECOND",
            EnvoyUnit::Minute => "MINUTE",
            EnvoyUnit::Hour => "HOUR",
            EnvoyUnit::Day => "DAY",
            EnvoyUnit::Month => "MONTH",
            EnvoyUnit::Year => "YEAR",
            EnvoyUnit::Week => "WEEK",
        }
    }

    /// The unit for a protocol name, in any case.
    pub fn from_proto_name(name: &str) -> Option<EnvoyUnit> {
        (0..=7)
            .filter_map(EnvoyUnit::from_proto_number)
            .find(|unit| unit.proto_name().eq_ignore_ascii_case(name))
    }

    /// The unit's length; `None` for `Unknown`.
    pub fn duration(self) -> Option<Duration> {
        const DAY: u64 = 86_400;
        Some(Duration::from_secs(match self {
            EnvoyUnit::Unknown => return None,
            EnvoyUnit::Second => 1,
            EnvoyUnit::Minute => 60,
            EnvoyUnit::Hour => 3_600,
            EnvoyUnit::Day => DAY,
            EnvoyUnit::Week => 7 * DAY,
            EnvoyUnit::Month => 30 * DAY,
            EnvoyUnit::Year => 365 * DAY,
        }))
    }
}

/// A limit a client sends in place of the configured one (`RateLimitDescriptor.limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LimitOverride {
    /// Requests per unit.
    pub requests_per_unit: u32,
    /// The unit.
    pub unit: EnvoyUnit,
}

/// One descriptor of a request: the entries to match, and how many hits it adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorCall {
    /// `(key, value)` entries, in order.
    pub entries: Vec<(String, String)>,
    /// Hits this descriptor adds: its own `hits_addend` when set, even to 0 (0 checks without
    /// charging), else the request's, else 1.
    pub hits: u64,
    /// A client-supplied limit replacing the configured one.
    pub limit_override: Option<LimitOverride>,
}

/// A `ShouldRateLimit` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitCall {
    /// The rules' domain.
    pub domain: String,
    /// The descriptors, each limited on its own; the request passes only if all pass.
    pub descriptors: Vec<DescriptorCall>,
}

/// Whether a descriptor, or the request, is under or over its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Under the limit.
    Ok,
    /// Over the limit.
    OverLimit,
}

impl Code {
    /// The protocol's number for the code.
    pub fn proto_number(self) -> i32 {
        match self {
            Code::Ok => 1,
            Code::OverLimit => 2,
        }
    }

    /// The protocol's name for the code.
    pub fn proto_name(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::OverLimit => "OVER_LIMIT",
        }
    }
}

/// The limit that applied to a descriptor, as reported back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLimit {
    /// The limit's name, if the rule has one.
    pub name: String,
    /// Requests per unit.
    pub requests_per_unit: u32,
    /// The unit (`Unknown` for a limit over another period).
    pub unit: EnvoyUnit,
    /// The limit's window, for the `RateLimit-Policy` header.
    pub window: Duration,
    /// Whether the window is aligned to the Unix epoch (a fixed window), so that it resets at
    /// the window's end whether or not anything was counted in it.
    pub aligned: bool,
    /// The limit as the `RateLimit-Policy` field describes it, written once per limit.
    pub policy: LimitInfo,
}

/// The answer for one descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorVerdict {
    /// Under or over.
    pub code: Code,
    /// The limit that applied (`None` when no rule matched, or the rule is unlimited).
    pub current_limit: Option<CurrentLimit>,
    /// Requests left in the current window.
    pub limit_remaining: u32,
    /// Time until the limit is back to full.
    pub duration_until_reset: Option<Duration>,
    /// When over the limit: the earliest time the same request could pass.
    pub retry_after: Option<Duration>,
}

impl DescriptorVerdict {
    /// The answer for a descriptor that no limit applies to.
    pub fn unlimited() -> Self {
        DescriptorVerdict {
            code: Code::Ok,
            current_limit: None,
            limit_remaining: 0,
            duration_until_reset: None,
            retry_after: None,
        }
    }
}

/// One answer per descriptor; inline for the usual call of one descriptor, so that answering
/// it allocates nothing for this list.
pub type Statuses = SmallVec<[DescriptorVerdict; 1]>;

/// The answer to a `ShouldRateLimit` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallVerdict {
    /// Over the limit if any descriptor is (shadow-mode rules never are).
    pub overall: Code,
    /// One status per descriptor, in request order.
    pub statuses: Statuses,
    /// Headers for the client (`RateLimit`, `Retry-After`, ...).
    pub headers: Vec<(String, String)>,
}

/// Why a call cannot be answered: the caller's mistake, reported back as such.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The request names no domain.
    #[error("rate limit domain must not be empty")]
    EmptyDomain,
    /// The request has no descriptors.
    #[error("rate limit descriptor list must not be empty")]
    NoDescriptors,
    /// A descriptor has no entries.
    #[error("descriptor {index}: must have at least one entry")]
    EmptyDescriptor {
        /// The descriptor's position in the request.
        index: usize,
    },
    /// A descriptor's limit override names no usable unit.
    #[error(
        "descriptor {index}: limit override needs a unit (SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR)"
    )]
    OverrideWithoutUnit {
        /// The descriptor's position in the request.
        index: usize,
    },
    /// The request has more descriptors than the service accepts.
    #[error("{count} descriptors in one request; at most {max} are accepted (--max-descriptors)")]
    TooManyDescriptors {
        /// Descriptors in the request.
        count: usize,
        /// The cap.
        max: usize,
    },
    /// A descriptor has more entries than the service accepts.
    #[error("descriptor {index}: {count} entries; at most {max} are accepted (--max-entries)")]
    TooManyEntries {
        /// The descriptor's position in the request.
        index: usize,
        /// Entries in the descriptor.
        count: usize,
        /// The cap.
        max: usize,
    },
    /// A descriptor's keys and values are longer, together, than the service accepts.
    #[error(
        "descriptor {index}: its keys and values take {bytes} bytes; at most {max} are accepted (--max-descriptor-bytes)"
    )]
    DescriptorTooLarge {
        /// The descriptor's position in the request.
        index: usize,
        /// The bytes of its keys and values.
        bytes: usize,
        /// The cap.
        max: usize,
    },
    /// The body is not a valid request.
    #[error("malformed request: {0}")]
    Malformed(String),
}

/// The largest request the service decides: a client cannot make one call cost unbounded work,
/// nor one counter key unbounded memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    /// Descriptors per request.
    pub max_descriptors: usize,
    /// Entries per descriptor.
    pub max_entries: usize,
    /// Bytes of a descriptor's keys and values together (a counter key is about that long).
    pub max_descriptor_bytes: usize,
}

impl Default for CallLimits {
    /// Far above what Envoy's rate limit actions produce (a handful of descriptors of a few
    /// short entries), far below what would let one call hurt the service.
    fn default() -> Self {
        CallLimits {
            max_descriptors: 64,
            max_entries: 16,
            max_descriptor_bytes: 1024,
        }
    }
}

impl DescriptorCall {
    /// A descriptor as a transport reads it: `own_hits` is the descriptor's `hits_addend`,
    /// `request_hits` the request's. A descriptor's own count is used whenever it is set, 0
    /// included (check without charging), as envoyproxy/ratelimit does; otherwise the
    /// request's, where 0 means unset; and finally one hit.
    pub fn new(
        entries: Vec<(String, String)>,
        own_hits: Option<u64>,
        request_hits: Option<u64>,
        limit_override: Option<LimitOverride>,
    ) -> DescriptorCall {
        let hits = own_hits.or(request_hits.filter(|h| *h > 0)).unwrap_or(1);
        DescriptorCall {
            entries,
            hits,
            limit_override,
        }
    }
}

impl RateLimitCall {
    /// A call, validated as both transports require.
    pub fn new(
        domain: String,
        descriptors: Vec<DescriptorCall>,
    ) -> Result<RateLimitCall, CallError> {
        let call = RateLimitCall {
            domain,
            descriptors,
        };
        call.validate()?;
        Ok(call)
    }

    /// Checks the call's size against `limits`.
    pub fn check_size(&self, limits: &CallLimits) -> Result<(), CallError> {
        if self.descriptors.len() > limits.max_descriptors {
            return Err(CallError::TooManyDescriptors {
                count: self.descriptors.len(),
                max: limits.max_descriptors,
            });
        }
        for (index, descriptor) in self.descriptors.iter().enumerate() {
            let count = descriptor.entries.len();
            if count > limits.max_entries {
                return Err(CallError::TooManyEntries {
                    index,
                    count,
                    max: limits.max_entries,
                });
            }
            let bytes: usize = descriptor
                .entries
                .iter()
                .map(|(key, value)| key.len() + value.len())
                .sum();
            if bytes > limits.max_descriptor_bytes {
                return Err(CallError::DescriptorTooLarge {
                    index,
                    bytes,
                    max: limits.max_descriptor_bytes,
                });
            }
        }
        Ok(())
    }

    /// Checks what both transports require of a call.
    pub fn validate(&self) -> Result<(), CallError> {
        if self.domain.is_empty() {
            return Err(CallError::EmptyDomain);
        }
        if self.descriptors.is_empty() {
            return Err(CallError::NoDescriptors);
        }
        for (index, descriptor) in self.descriptors.iter().enumerate() {
            if descriptor.entries.is_empty() {
                return Err(CallError::EmptyDescriptor { index });
            }
            if descriptor
                .limit_override
                .is_some_and(|o| o.unit == EnvoyUnit::Unknown)
            {
                return Err(CallError::OverrideWithoutUnit { index });
            }
        }
        Ok(())
    }
}
