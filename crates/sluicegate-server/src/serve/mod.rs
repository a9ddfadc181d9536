//! `sluicegate serve`: the rate limit service.

mod args;
mod backend;
mod decision_counters;
mod engine;
mod engine_error;
mod grpc;
mod headers;
mod http;
mod json;
mod limiter_table;
mod memory_decide;
mod metrics;
mod per_limit;
mod protocol;
mod redis_decide;
mod redis_table;
mod reload;
mod server;

pub use args::{PolicyArg, ServeArgs};
pub use backend::{BackendOptions, RedisOptions, RedisTarget};
pub use engine::{Engine, EngineOptions, LoadedRules};
pub use engine_error::EngineError;
pub use grpc::{GrpcService, call_from_proto, verdict_to_proto};
pub use headers::{HeaderOptions, LegacyHeaderNames, headers_for};
pub use http::{MAX_BODY_BYTES, router};
pub use json::{call_from_json, proto_json_duration, verdict_to_json};
pub use metrics::Metrics;
pub use protocol::{
    CallError, Code, CurrentLimit, DescriptorCall, DescriptorVerdict, EnvoyUnit, LimitOverride,
    RateLimitCall, Statuses, Verdict,
};
pub use server::{RunningServer, ServerConfig, grpc_incoming, grpc_server, runtime, start};
