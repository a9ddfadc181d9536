//! The pieces of the `sluicegate` binary that tests and other programs can drive in-process:
//! the rate limit service and the simulator.

pub mod redis_args;
pub mod serve;
pub mod simulate;
