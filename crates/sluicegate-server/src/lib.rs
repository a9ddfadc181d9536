//! The pieces of the `sluicegate` binary that tests and other programs can drive in-process:
//! the rate limit service, the rate limiting reverse proxy and the simulator.

pub mod flags;
mod plumbing;
pub mod proxy;
pub mod redis_args;
pub mod serve;
pub mod simulate;
