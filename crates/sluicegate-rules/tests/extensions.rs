//! Sluicegate's extensions (`period`, `algorithm` with its parameters, `rate_limits`), their
//! validation, error positions, warnings and the dump of resolved rules.

mod common;

use std::time::Duration;

use common::{errors, rules};
use sluicegate::{
    AnyAlgorithm, FixedWindow, Gcra, LeakyQueue, QueueDelay, Rate, SlidingWindow, TokenBucket,
};
use sluicegate_rules::{RuleErrorKind, Window};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn limit_yaml(body: &str) -> String {
    format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n{body}")
}

#[test]
fn unknown_key_in_a_nested_descriptor_is_reported_at_its_line_and_column() {
    let yaml = "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit:\n          unit: second\n          requests_per_unit: 1\n        shadowmode: true\n";
    let found = errors(yaml);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("test.yaml:9:9: config error, unknown key 'shadowmode'"),
        "{}",
        found[0]
    );
}

#[test]
fn every_error_of_a_file_is_reported() {
    let yaml = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n  - value: x\n  - key: a\n    bogus: 1\n";
    let found = errors(yaml);
    assert_eq!(found.len(), 4, "{found:?}");
    assert!(found[0].contains("invalid rate limit unit 'fortnight'"));
    assert!(found[1].contains("descriptor has empty key"));
    assert!(found[2].contains("duplicate descriptor composite key 'd.a'"));
    assert!(found[3].contains("unknown key 'bogus'"));
}

#[test]
fn period_algorithm_and_burst() -> TestResult {
    let set = rules(&limit_yaml(
        "      requests_per_unit: 100\n      period: 30s\n      algorithm: gcra\n      burst: 20\n",
    ))?;
    let m = set.find("d", &[("k", "v")]).ok_or("match")?;
    let limit = m.limits[0];
    assert_eq!(limit.window, Window::Period(Duration::from_secs(30)));
    let expected: AnyAlgorithm = Gcra::new(Rate::new(100, Duration::from_secs(30))?, 20)?.into();
    assert_eq!(limit.algorithm, Some(expected));
    let rate = limit.rate().ok_or("rate")?;
    assert_eq!(
        (rate.permits(), rate.period()),
        (100, Duration::from_secs(30))
    );
    Ok(())
}

#[test]
fn algorithm_defaults() -> TestResult {
    let set = rules(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token-bucket}\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: sliding-window, buckets: 6}\n  - key: c\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: leaky-queue, burst: 5, delay: 2}\n  - key: f\n    rate_limit: {unit: second, requests_per_unit: 3}\n",
    )?;
    let algorithm = |key: &str| {
        set.find("d", &[(key, "x")])
            .and_then(|m| m.limits[0].algorithm.clone())
    };
    let minute = Duration::from_secs(60);
    assert_eq!(
        algorithm("a"),
        Some(TokenBucket::new(Rate::per_second(5)?, 5)?.into())
    );
    assert_eq!(
        algorithm("b"),
        Some(SlidingWindow::new(60, minute, Some(6))?.into())
    );
    assert_eq!(
        algorithm("c"),
        Some(LeakyQueue::new(Rate::per_second(10)?, 5, QueueDelay::After(2))?.into())
    );
    assert_eq!(
        algorithm("f"),
        Some(FixedWindow::new(3, Duration::from_secs(1))?.into())
    );
    Ok(())
}

#[test]
fn several_limits_on_one_descriptor() -> TestResult {
    let set = rules(
        "domain: d\ndescriptors:\n  - key: user\n    rate_limits:\n      - {unit: second, requests_per_unit: 20}\n      - {unit: hour, requests_per_unit: 5000, name: hourly}\n",
    )?;
    let m = set.find("d", &[("user", "u1")]).ok_or("match")?;
    let sizes: Vec<u32> = m.limits.iter().map(|l| l.requests_per_unit).collect();
    assert_eq!(sizes, vec![20, 5000]);
    assert_eq!(m.limits[1].name.as_deref(), Some("hourly"));
    Ok(())
}

#[test]
fn replacing_one_of_several_limits_keeps_the_others() -> TestResult {
    let set = rules(
        "domain: d\ndescriptors:\n  - key: user\n    rate_limits:\n      - {unit: second, requests_per_unit: 20}\n      - {unit: hour, requests_per_unit: 5000, name: hourly}\n  - key: vip\n    rate_limit: {unit: hour, requests_per_unit: 90000, replaces: [{name: hourly}]}\n",
    )?;
    let user: &[(&str, &str)] = &[("user", "u1")];
    let vip: &[(&str, &str)] = &[("vip", "yes")];
    let found = set.find_all("d", &[user, vip]);
    let sizes: Vec<u32> = found[0]
        .as_ref()
        .ok_or("user still limited")?
        .limits
        .iter()
        .map(|l| l.requests_per_unit)
        .collect();
    assert_eq!(sizes, vec![20]);
    Ok(())
}

fn extension_error(body: &str) -> String {
    let found = errors(&limit_yaml(body));
    assert_eq!(found.len(), 1, "{found:?}");
    found[0].clone()
}

#[test]
fn invalid_extension_combinations_are_explained() {
    let cases = [
        (
            "      unit: second\n      period: 10s\n      requests_per_unit: 1\n",
            "5:13: give either unit or period, not both",
        ),
        (
            "      period: 10 parsecs\n      requests_per_unit: 1\n",
            "5:15: cannot read duration",
        ),
        (
            "      period: 0s\n      requests_per_unit: 1\n",
            "5:15: period '0s' must be longer than zero",
        ),
        (
            "      unit: second\n      requests_per_unit: 1\n      burst: 5\n",
            "7:14: burst is not a parameter of fixed-window",
        ),
        (
            "      unit: second\n      requests_per_unit: 1\n      algorithm: gcra\n      buckets: 5\n",
            "8:16: buckets is not a parameter of gcra",
        ),
        (
            "      unit: second\n      requests_per_unit: 1\n      algorithm: magic\n",
            "7:18: unknown algorithm `magic`",
        ),
        (
            "      unit: second\n      requests_per_unit: 1\n      algorithm: smooth-bursty\n      buckets: 2\n",
            "8:16: buckets is not a parameter of smooth-bursty",
        ),
        (
            "      unit: second\n      requests_per_unit: 5\n      algorithm: gcra\n      burst: 0\n",
            "8:14: invalid burst `0`: must be at least 1",
        ),
        (
            "      unit: second\n      requests_per_unit: 5\n      algorithm: leaky-queue\n      burst: 2\n      delay: 3\n",
            "9:14: invalid delay `3`: delay (3) cannot exceed burst (2)",
        ),
        (
            "      unit: second\n      requests_per_unit: 5\n      algorithm: concurrency\n",
            "7:18: concurrency limits need a release",
        ),
        (
            "      unlimited: true\n      period: 10s\n",
            "6:15: period has no meaning when unlimited",
        ),
        (
            "      unit: second\n      requests_per_unit: 1.5\n",
            "6:26: error checking config: floating-point value 1.5",
        ),
        (
            "      unit: second\n      requests_per_unit: -1\n",
            "6:26: requests_per_unit must be a whole number >= 0",
        ),
        (
            "      unit: second\n      requests_per_unit: 4294967296\n",
            "requests_per_unit must be at most 4294967295",
        ),
        (
            "      unit: second\n      requests_per_unit: 1\n      unlimited: maybe\n",
            "7:18: unlimited must be true or false",
        ),
    ];
    for (body, expected) in cases {
        let error = extension_error(body);
        assert!(
            error.contains(expected),
            "expected `{expected}` in `{error}`"
        );
    }
}

#[test]
fn rate_limit_and_rate_limits_together_or_empty() {
    let both = errors(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits:\n      - {unit: second, requests_per_unit: 1}\n",
    );
    assert!(
        both[0].contains("5:5: a descriptor takes either rate_limit or rate_limits"),
        "{both:?}"
    );
    let empty = errors("domain: d\ndescriptors:\n  - key: k\n    rate_limits: []\n");
    assert!(
        empty[0].contains("4:5: rate_limits must list at least one limit"),
        "{empty:?}"
    );
    let sibling = errors(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: second, requests_per_unit: 1, name: a}\n      - {unit: hour, requests_per_unit: 9, replaces: [{name: a}]}\n",
    );
    assert!(
        sibling[0].contains("6:62: 'a' is a limit of the same descriptor"),
        "{sibling:?}"
    );
    let unlimited = errors(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unlimited: true}\n",
    );
    assert!(
        unlimited[0].contains("unlimited is not allowed in rate_limits"),
        "{unlimited:?}"
    );
}

#[test]
fn upstream_quirks_are_kept() -> TestResult {
    // Unlimited with an invalid unit passes upstream (only a valid unit is rejected).
    let set = rules(&limit_yaml(
        "      unlimited: true\n      unit: fortnight\n",
    ))?;
    assert!(set.find("d", &[("k", "v")]).ok_or("match")?.unlimited());
    // A missing requests_per_unit is 0: the limit blocks everything.
    let set = rules(&limit_yaml("      unit: second\n"))?;
    assert_eq!(
        set.find("d", &[("k", "v")]).ok_or("match")?.limits[0].requests_per_unit,
        0
    );
    // An empty rate_limit map has no unit.
    let found = errors("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {}\n");
    assert!(found[0].contains("invalid rate limit unit ''"), "{found:?}");
    // `rate_limit:` left empty is no limit at all.
    let set = rules("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n")?;
    assert!(set.find("d", &[("k", "v")]).is_none());
    // Integers are read as text where a string is expected.
    let set = rules(
        "domain: d\ndescriptors:\n  - key: code\n    value: 429\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    )?;
    assert!(set.find("d", &[("code", "429")]).is_some());
    let set = rules(
        "domain: d\ndescriptors:\n  - key: flag\n    value: True\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    )?;
    assert!(
        set.find("d", &[("flag", "True")]).is_some(),
        "the text as written"
    );
    Ok(())
}

#[test]
fn a_known_key_in_the_wrong_place_loads_with_a_warning() -> TestResult {
    let set = rules("domain: d\ndescriptors:\n  - key: k\n    unit: second\n")?;
    assert_eq!(set.warnings().len(), 1);
    let warning = set.warnings()[0].to_string();
    assert!(
        warning.starts_with("test.yaml:4:5: key 'unit' has no meaning in a descriptor"),
        "{warning}"
    );
    Ok(())
}

#[test]
fn repeated_map_keys_are_rejected() {
    let found = errors("domain: d\ndomain: e\n");
    assert!(
        found[0].starts_with("test.yaml:2:1: duplicate key 'domain'"),
        "{found:?}"
    );
}

#[test]
fn wrong_shapes_are_rejected() {
    let found = errors("- domain: d\n");
    assert!(
        found[0].contains("1:1: the file must be a map, found a list"),
        "{found:?}"
    );
    let found = errors("domain: d\ndescriptors: {key: a}\n");
    assert!(
        found[0].contains("2:15: descriptors must be a list, found a map"),
        "{found:?}"
    );
    let found = errors("domain: [d]\n");
    assert!(
        found[0].contains("domain must be a string, found a list"),
        "{found:?}"
    );
    let found = errors("");
    assert!(
        found[0].contains("config file cannot have empty domain"),
        "{found:?}"
    );
}

#[test]
fn error_kinds_are_matchable() -> TestResult {
    let errors = match rules("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: eon}\n") {
        Ok(_) => return Err("must fail".into()),
        Err(errors) => errors,
    };
    let first = &errors.errors()[0];
    assert!(matches!(&first.kind, RuleErrorKind::InvalidUnit { unit } if unit == "eon"));
    assert_eq!(first.position.map(|p| (p.line, p.column)), Some((4, 24)));
    Ok(())
}

#[test]
fn dump_as_text_and_json() -> TestResult {
    let set = rules(
        "domain: d\ndescriptors:\n  - key: a\n    value: b\n    shadow_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: c\n    rate_limit: {period: 30s, requests_per_unit: 7, algorithm: gcra, burst: 3}\n  - key: u\n    rate_limit: {unlimited: true}\n",
    )?;
    let text = set.to_string();
    assert_eq!(
        text,
        "d.a_b: unit=MINUTE requests_per_unit=5, shadow_mode: true\n\
         d.c: period=30s requests_per_unit=7 algorithm=gcra burst=3, shadow_mode: false\n\
         d.u: unlimited, shadow_mode: false\n"
    );
    let json = serde_json::to_value(&set)?;
    assert_eq!(json[0]["domain"], "d");
    assert_eq!(json[0]["rules"][0]["id"], "d.a_b");
    assert_eq!(json[0]["rules"][0]["limits"][0]["window"]["unit"], "MINUTE");
    assert_eq!(json[0]["rules"][1]["limits"][0]["window"]["period"], "30s");
    assert_eq!(
        json[0]["rules"][1]["limits"][0]["algorithm"]["name"],
        "gcra"
    );
    assert_eq!(json[0]["rules"][1]["limits"][0]["algorithm"]["burst"], 3);
    assert_eq!(json[0]["rules"][2]["unlimited"], true);
    assert_eq!(json[0]["rules"][0]["source"]["position"]["line"], 3);
    Ok(())
}
