//! Every algorithm of the design, each a pure state machine behind [`Algorithm`](crate::Algorithm).

pub(crate) mod bucket;
mod concurrency;
mod fixed_window;
mod gcra;
mod leaky_bucket;
mod leaky_queue;
mod sliding_log;
mod sliding_window;
mod smooth;
mod smooth_bursty;
mod smooth_warmup;
mod token_bucket;
mod window;

pub use concurrency::{Concurrency, ConcurrencyState};
pub use fixed_window::{FixedWindow, FixedWindowState};
pub use gcra::{Gcra, Tat};
pub use leaky_bucket::{LeakyBucket, LeakyBucketState};
pub use leaky_queue::{LeakyQueue, QueueDelay};
pub use sliding_log::{SlidingLog, SlidingLogState};
pub use sliding_window::{SlidingWindow, SlidingWindowState};
pub use smooth::SmoothState;
pub use smooth_bursty::SmoothBursty;
pub use smooth_warmup::SmoothWarmup;
pub use token_bucket::{TokenBucket, TokenBucketState};
