//! Every algorithm of the design, each a pure state machine behind [`Algorithm`](crate::Algorithm).

mod bucket;
mod concurrency;
mod gcra;
mod token_bucket;

pub use concurrency::{Concurrency, Held};
pub use gcra::{Gcra, Tat};
pub use token_bucket::{TokenBucket, TokenBucketState};
