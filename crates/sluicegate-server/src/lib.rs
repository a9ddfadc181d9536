//! The pieces of the `sluicegate` binary that tests and other programs can drive in-process:
//! the rate limit service.

pub mod serve;
