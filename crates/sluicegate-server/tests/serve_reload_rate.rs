//! A reload that changes a limit's rate keeps what each key has used, in memory (the limiter
//! is kept and its keys carried over) and on Redis (the keys are named by rule and algorithm,
//! not by rate).

mod loopback;

use loopback::{
    BoxError, OK, Service, TestResult, in_memory_and_on_redis, store_name, wait_for_rules,
    write_atomically,
};

fn rules(per_hour: u32, algorithm: &str) -> String {
    format!(
        "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {{unit: hour, requests_per_unit: {per_hour}, algorithm: {algorithm}}}\n"
    )
}

/// What `user` has left, checked without charging.
async fn left(service: &mut Service, user: &str) -> Result<u32, BoxError> {
    let mut request = loopback::request(&[&[("user", user)]], 0);
    request.descriptors[0].hits_addend =
        Some(envoy_types::pb::google::protobuf::UInt64Value { value: 0 });
    Ok(service.send(request).await?.statuses[0].limit_remaining)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_rate_keeps_every_keys_used_budget() -> TestResult {
    for algorithm in ["fixed-window", "gcra"] {
        let mut after = Vec::new();
        for (mut service, redis) in in_memory_and_on_redis(&rules(5, algorithm)).await? {
            let store = store_name(&redis);
            for _ in 0..3 {
                assert_eq!(service.code(&[&[("user", "ann")]]).await?, OK);
            }
            assert_eq!(left(&mut service, "ann").await?, 2, "{store} {algorithm}");
            let file = service.dir.path().join("rules.yaml");
            write_atomically(&file, &rules(10, algorithm))?;
            wait_for_rules(&service, "requests_per_unit=10").await?;
            let ann = left(&mut service, "ann").await?;
            assert_eq!(left(&mut service, "bob").await?, 10, "{store} {algorithm}");
            after.push((store, ann));
            service.server.shutdown().await?;
        }
        // A fixed window keeps its count: 3 of the new 10 used. A bucket keeps how full it
        // was (3 of 5 taken: 4 of 10 left), as Guava's setRate and the Redis script do.
        let expected = if algorithm == "fixed-window" { 7 } else { 4 };
        for (store, ann) in after {
            assert_eq!(ann, expected, "{store} {algorithm}: ann's use still counts");
        }
    }
    Ok(())
}
