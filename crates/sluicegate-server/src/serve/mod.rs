//! `sluicegate serve`: the rate limit service.

mod admin;
mod args;
mod check;
mod clock;
mod counters;
mod decide;
mod decision_metrics;
mod decision_totals;
mod engine;
mod engine_error;
mod grpc;
mod grpc_codec;
mod grpc_lean;
mod grpc_message;
mod grpc_options;
mod headers;
mod http;
mod json;
mod key_cap;
mod limiter_table;
mod live_rules;
mod metrics;
mod overrides;
mod per_limit;
mod protocol;
mod recorder;
mod redis_table;
mod reload;
mod request_timer;
mod server;
mod verdict;

pub use crate::plumbing::RedisSettings;
pub use crate::plumbing::admin_address_allowed;
pub use crate::plumbing::{EVERY_RULE, Mode, ModeError, ModeTable, Modes};
pub use crate::redis_args::PolicyArg;
pub use admin::admin_router;
pub use args::ServeArgs;
pub use clock::ServiceClock;
pub use counters::{BackendOptions, RedisTarget};
pub use engine::{Engine, EngineOptions, LoadedRules};
pub use engine_error::EngineError;
pub use grpc::{GrpcService, call_from_proto, verdict_to_proto};
pub use grpc_options::{GrpcOptions, GrpcServer, Keepalive};
pub use headers::{HeaderOptions, LegacyHeaderNames, headers_for};
pub use http::{MAX_BODY_BYTES, router};
pub use json::{call_from_json, proto_json_duration, verdict_to_json};
pub use key_cap::DEFAULT_MAX_KEYS;
pub use metrics::Metrics;
pub use protocol::{
    CallError, CallLimits, CallVerdict, Code, CurrentLimit, DescriptorCall, DescriptorVerdict,
    EnvoyUnit, LimitOverride, RateLimitCall, Statuses,
};
pub use server::{RunningServer, ServerConfig, grpc_incoming, grpc_server, runtime, start};
