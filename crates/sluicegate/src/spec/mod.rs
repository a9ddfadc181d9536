//! Algorithms chosen at run time: an enum over every algorithm, and the `ALGORITHM:key=value,...`
//! specs that name them (the `simulate` command's `--limiter`, rule files' `algorithm:` with
//! their quota, see [`AlgorithmSpec::from_quota`]). [`AnyAlgorithm`] is the workspace's one limit
//! type: the algorithm with its validated parameters.

pub(crate) mod any;
mod build;
mod parse;
mod quota;
mod render;
pub(crate) mod values;

#[cfg(test)]
mod tests;

pub use any::AnyAlgorithm;
pub use parse::AlgorithmSpec;
pub use quota::Quota;
