//! The fields that tell a client its budget, written for every answer by one module: the IETF
//! `RateLimit-Policy` / `RateLimit` fields (draft-ietf-httpapi-ratelimit-headers), the legacy
//! `X-RateLimit-*` trio, and `Retry-After` on denial, describing the tightest of the limits
//! that applied. The [layer](crate::rate_limit) writes them into responses; `sluicegate serve`
//! into its answers to Envoy.

mod limit_info;
mod standing;
mod write;

pub use limit_info::LimitInfo;
pub use standing::{Standing, retry_after_seconds, tightest};
pub use write::{Field, FieldChoice, FieldValue, write_fields};
