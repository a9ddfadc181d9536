//! Resident memory per idle `u64` key at 1 000 000 keys: our `KeyedLimiter<u64, Gcra>` against
//! governor's keyed (`DashMap`) limiter, read from the process's `VmRSS` before and after the
//! keys go in.
//!
//! Run one library per process, so memory the other freed cannot be reused and hide a cost:
//!
//! ```text
//! cargo run --release -p sluicegate --example memory_per_key -- ours
//! cargo run --release -p sluicegate --example memory_per_key -- governor
//! ```

use std::num::NonZeroU32;

use governor::{Quota, RateLimiter};
use sluicegate::{Gcra, KeyedLimiter, Rate};

const KEYS: u64 = 1_000_000;

/// The resident set in bytes, from `/proc/self/status`.
fn resident_bytes() -> Result<u64, Box<dyn std::error::Error>> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .ok_or("no VmRSS in /proc/self/status")?;
    let kib: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()?;
    Ok(kib * 1024)
}

fn report(name: &str, before: u64, after: u64, held: usize) {
    let per_key = after.saturating_sub(before) as f64 / KEYS as f64;
    println!(
        "{name}: {KEYS} keys ({held} held), RSS {:.1} MiB -> {:.1} MiB, {per_key:.1} bytes per key",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let which = std::env::args().nth(1).unwrap_or_else(|| "ours".to_owned());
    // One permit a minute with a burst of 10: after one check a key stays non-fresh (held) for
    // a minute, far longer than the run.
    match which.as_str() {
        "ours" => {
            let limiter = KeyedLimiter::<u64, Gcra>::new(Gcra::new(Rate::per_minute(1)?, 10)?);
            let before = resident_bytes()?;
            for key in 0..KEYS {
                let _ = limiter.check(&key)?;
            }
            let after = resident_bytes()?;
            report(
                "sluicegate KeyedLimiter<u64, Gcra>",
                before,
                after,
                limiter.len(),
            );
        }
        "governor" => {
            let quota =
                Quota::per_minute(NonZeroU32::MIN).allow_burst(NonZeroU32::new(10).ok_or("burst")?);
            let limiter = RateLimiter::<u64, _, _>::dashmap(quota);
            let before = resident_bytes()?;
            for key in 0..KEYS {
                let _ = limiter.check_key(&key);
            }
            let after = resident_bytes()?;
            report("governor keyed (DashMap)", before, after, limiter.len());
        }
        other => return Err(format!("unknown library {other:?}: use `ours` or `governor`").into()),
    }
    Ok(())
}
