//! Every algorithm of the design, each a pure state machine behind [`Algorithm`](crate::Algorithm).

mod bucket;
mod concurrency;
mod gcra;
mod smooth;
mod smooth_bursty;
mod smooth_warmup;
mod token_bucket;

pub use concurrency::{Concurrency, Held};
pub use gcra::{Gcra, Tat};
pub use smooth::SmoothState;
pub use smooth_bursty::SmoothBursty;
pub use smooth_warmup::SmoothWarmup;
pub use token_bucket::{TokenBucket, TokenBucketState};
