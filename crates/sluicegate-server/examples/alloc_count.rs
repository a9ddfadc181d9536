//! Runs in-memory decisions on the engine alone (no gRPC), for counting their heap
//! allocations from outside (the workspace forbids the `unsafe` a counting allocator needs):
//!
//! ```sh
//! cargo build -p sluicegate-server --example alloc_count
//! valgrind target/debug/examples/alloc_count CALLS DESCRIPTORS [count-denied]
//! ```
//!
//! The difference in `total heap usage` between two `CALLS` counts, divided by the difference
//! in calls, is the allocations per decision. `DESCRIPTORS` is 1 (the service benchmark's call:
//! one descriptor, one limit) or 2.

use std::sync::Arc;

use sluicegate_rules::{LoadOptions, RuleSet};
use sluicegate_server::serve::{DescriptorCall, Engine, EngineOptions, Metrics, RateLimitCall};

const RULES: &str = "domain: bench\ndescriptors:\n  - key: key\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000000000}\n";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let calls: u64 = args.next().unwrap_or_else(|| "1000".into()).parse()?;
    let descriptors: usize = args.next().unwrap_or_else(|| "1".into()).parse()?;
    let count_denied = args.next().is_some_and(|a| a == "count-denied");
    let rules = RuleSet::from_sources(
        &[("bench.yaml".into(), RULES.to_owned())],
        &LoadOptions::default(),
    )?;
    let options = EngineOptions {
        count_denied,
        ..EngineOptions::default()
    };
    let engine = Engine::new(rules, options, Arc::new(Metrics::new()))?;
    let descriptors = [("key", "k0"), ("user", "u")][..descriptors.min(2)]
        .iter()
        .map(|(k, v)| DescriptorCall::new(vec![((*k).into(), (*v).into())], None, None, None))
        .collect();
    let call = RateLimitCall::new("bench".into(), descriptors)?;
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    for _ in 0..calls {
        std::hint::black_box(runtime.block_on(engine.should_rate_limit(&call)));
    }
    Ok(())
}
