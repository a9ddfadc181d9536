//! Algorithms chosen at run time: an enum over every algorithm, and the `ALGORITHM:key=value,...`
//! specs that name them (the `simulate` command's `--limiter`, rule files' `algorithm:`).

mod any;
mod build;
mod parse;
mod values;

#[cfg(test)]
mod tests;

pub use any::{AnyAlgorithm, AnyState};
pub use parse::AlgorithmSpec;
