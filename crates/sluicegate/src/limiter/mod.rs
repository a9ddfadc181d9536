//! Limiters that hold state and read the clock: the I/O edge around the pure algorithms.

mod direct;
mod keyed;

pub use direct::DirectLimiter;
pub use keyed::KeyedLimiter;
