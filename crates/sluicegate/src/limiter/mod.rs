//! Limiters that hold state and read the clock: the I/O edge around the pure algorithms.

mod acquire;
mod budget;
mod current;
mod direct;
mod keyed;
mod multi;
mod permit;
mod set;
mod waiting;

pub use budget::KeyBudget;
pub use current::CurrentAlgorithm;
pub use direct::DirectLimiter;
pub use keyed::KeyedLimiter;
pub use multi::{LimitTarget, MultiDecision, decide_together, decide_together_at};
pub use permit::{ConcurrencyPermit, KeyedConcurrencyPermit, OwnedConcurrencyPermit};
pub use set::LimitSet;
