//! Matching a request's descriptor to a rule, as envoyproxy/ratelimit's `GetLimit` does:
//! precedence, depth, unlimited, replaces, shadow mode, units, wildcards and the keys used
//! for counters and stats.

mod common;

use std::time::Duration;

use common::{load_corpus, rules};
use sluicegate_rules::{LoadOptions, RuleSet, Unit, Window};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn rpu(rules: &RuleSet, domain: &str, entries: &[(&str, &str)]) -> Option<u32> {
    rules.find(domain, entries).map(|m| {
        m.rule
            .limits
            .first()
            .map_or(u32::MAX, |l| l.requests_per_unit)
    })
}

#[test]
fn exact_value_beats_wildcard_beats_key_only() -> TestResult {
    let set = load_corpus("derived/priority.yaml", &LoadOptions::default())?;
    assert_eq!(rpu(&set, "priority", &[("p", "exact")]), Some(3));
    assert_eq!(rpu(&set, "priority", &[("p", "exfoo")]), Some(4));
    assert_eq!(
        rpu(&set, "priority", &[("p", "ex")]),
        Some(4),
        "`ex*` matches `ex`"
    );
    assert_eq!(rpu(&set, "priority", &[("p", "other")]), Some(5));
    Ok(())
}

#[test]
fn first_wildcard_in_file_order_wins() -> TestResult {
    let set = load_corpus("derived/priority.yaml", &LoadOptions::default())?;
    assert_eq!(rpu(&set, "priority", &[("q", "abc")]), Some(7));
    assert_eq!(rpu(&set, "priority", &[("r", "abc")]), Some(6));
    assert_eq!(rpu(&set, "priority", &[("q", "xyz")]), None);
    Ok(())
}

#[test]
fn no_backtracking_once_a_level_matched() -> TestResult {
    let set = load_corpus("derived/priority.yaml", &LoadOptions::default())?;
    assert_eq!(
        rpu(&set, "priority", &[("bt", "x"), ("c", "only")]),
        Some(8)
    );
    assert_eq!(rpu(&set, "priority", &[("bt", "x"), ("c", "other")]), None);
    assert_eq!(
        rpu(&set, "priority", &[("bt", "y"), ("c", "other")]),
        Some(9)
    );
    assert_eq!(
        rpu(&set, "priority", &[("tenant", "t1"), ("user", "u")]),
        Some(2)
    );
    Ok(())
}

#[test]
fn a_limit_applies_only_at_the_depth_of_the_last_entry() -> TestResult {
    let set = load_corpus("readme", &LoadOptions::default())?;
    let request = [("key", "value"), ("subkey", "subvalue")];
    assert_eq!(rpu(&set, "example4", &request), Some(300));
    assert_eq!(rpu(&set, "example4_nomatch", &request), None);
    assert_eq!(
        rpu(&set, "example4_nomatch", &[("key", "value")]),
        Some(300)
    );
    // A parent without a limit of its own gives nothing at its depth.
    assert_eq!(rpu(&set, "example4", &[("key", "value")]), None);
    Ok(())
}

#[test]
fn unknown_domain_or_descriptor_has_no_limit() -> TestResult {
    let set = load_corpus("readme", &LoadOptions::default())?;
    assert!(set.find("nope", &[("key", "value")]).is_none());
    assert!(set.find("internal", &[("unknown", "x")]).is_none());
    assert!(set.find("internal", &[]).is_none());
    Ok(())
}

#[test]
fn unlimited_matches_without_limits() -> TestResult {
    let set = load_corpus("readme/internal.yaml", &LoadOptions::default())?;
    let ldap = set
        .find("internal", &[("ldap", "anyone")])
        .ok_or("ldap matches")?;
    assert!(ldap.unlimited());
    assert!(ldap.limits.is_empty());
    let azure = set
        .find("internal", &[("azure", "x")])
        .ok_or("azure matches")?;
    assert!(!azure.unlimited());
    assert_eq!(azure.limits[0].requests_per_unit, 100);
    Ok(())
}

#[test]
fn replaces_removes_the_named_limit_only_when_both_apply() -> TestResult {
    let set = load_corpus("readme/example7.yaml", &LoadOptions::default())?;
    let first: &[(&str, &str)] = &[("key_1", "value_1"), ("user", "bkthomps")];
    let second: &[(&str, &str)] = &[("key_2", "value_2"), ("user", "bkthomps")];

    let alone = set.find_all("example7", &[first]);
    assert_eq!(
        alone[0].as_ref().map(|m| m.limits[0].requests_per_unit),
        Some(5)
    );

    let both = set.find_all("example7", &[first, second]);
    assert!(both[0].is_none(), "specific_limit is replaced");
    assert_eq!(
        both[1].as_ref().map(|m| m.limits[0].requests_per_unit),
        Some(10)
    );

    // An unlimited rule's replaces apply too.
    let vip = rules(
        "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 5, name: per_user}\n  - key: vip\n    rate_limit:\n      unlimited: true\n      replaces: [{name: per_user}]\n",
    )?;
    let user: &[(&str, &str)] = &[("user", "u1")];
    let pass: &[(&str, &str)] = &[("vip", "yes")];
    let found = vip.find_all("d", &[user, pass]);
    assert!(found[0].is_none());
    assert!(found[1].as_ref().is_some_and(|m| m.unlimited()));

    let only_second = set.find_all("example7", &[second]);
    assert_eq!(
        only_second[0]
            .as_ref()
            .map(|m| m.limits[0].requests_per_unit),
        Some(10)
    );
    Ok(())
}

#[test]
fn shadow_mode_is_reported_per_rule() -> TestResult {
    let set = load_corpus("readme/example6.yaml", &LoadOptions::default())?;
    let a = set
        .find("example6", &[("service", "auth"), ("user", "user-a")])
        .ok_or("user-a")?;
    assert!(a.shadow_mode());
    let b = set
        .find("example6", &[("service", "auth"), ("user", "user-b")])
        .ok_or("user-b")?;
    assert!(!b.shadow_mode());
    assert_eq!(b.limits[0].requests_per_unit, 20);
    Ok(())
}

#[test]
fn units_including_week_month_year_in_any_case() -> TestResult {
    let set = load_corpus("derived/units.yaml", &LoadOptions::default())?;
    let day = 86_400;
    for (value, unit, seconds, limit) in [
        ("second", Unit::Second, 1, 11),
        ("minute", Unit::Minute, 60, 12),
        ("hour", Unit::Hour, 3_600, 13),
        ("day", Unit::Day, day, 14),
        ("week", Unit::Week, 7 * day, 15),
        ("month", Unit::Month, 30 * day, 16),
        ("year", Unit::Year, 365 * day, 17),
        ("mixedcase", Unit::Minute, 60, 18),
        ("upper", Unit::Hour, 3_600, 19),
    ] {
        let m = set.find("units", &[("u", value)]).ok_or(value)?;
        let l = m.limits[0];
        assert_eq!(l.window, Window::Unit(unit), "{value}");
        assert_eq!(
            Some(l.window.duration()),
            Some(Duration::from_secs(seconds))
        );
        assert_eq!(l.requests_per_unit, limit);
        let rate = l.rate().ok_or("a rate")?;
        assert_eq!(rate.permits(), u64::from(limit));
        assert_eq!(rate.period(), Duration::from_secs(seconds));
    }
    let zero = set.find("units", &[("zero", "x")]).ok_or("zero")?;
    assert_eq!(zero.limits[0].requests_per_unit, 0);
    assert!(zero.limits[0].rate().is_none(), "0 per unit can never pass");
    Ok(())
}

#[test]
fn wildcards_anywhere_in_the_value() -> TestResult {
    let set = load_corpus("valid/wildcard/wildcard.yaml", &LoadOptions::default())?;
    let d = "test-domain";
    assert_eq!(rpu(&set, d, &[("wild", "foo")]), Some(20));
    assert_eq!(rpu(&set, d, &[("wild", "foobar")]), Some(20));
    assert_eq!(rpu(&set, d, &[("wild", "fo")]), None);
    assert_eq!(rpu(&set, d, &[("noWild", "foo")]), Some(20));
    assert_eq!(rpu(&set, d, &[("noWild", "foobar")]), None);
    assert_eq!(rpu(&set, d, &[("noVal", "anything")]), Some(20));
    assert_eq!(rpu(&set, d, &[("midWild", "barxb")]), Some(20));
    assert_eq!(rpu(&set, d, &[("midWild", "barxbx")]), None);
    assert_eq!(rpu(&set, d, &[("multiWild", "foo1bar2baz")]), Some(10));
    assert_eq!(rpu(&set, d, &[("multiWild", "foo1baz")]), None);
    assert_eq!(
        rpu(&set, d, &[("nestedWild", "val1"), ("wild", "goober")]),
        Some(20)
    );
    assert_eq!(
        rpu(&set, d, &[("nestedWild", "val1"), ("wild", "foo")]),
        None
    );
    Ok(())
}

#[test]
fn counter_keys_follow_the_request_values() -> TestResult {
    let set = load_corpus("valid/wildcard/wildcard.yaml", &LoadOptions::default())?;
    let a = set.find("test-domain", &[("noVal", "a")]).ok_or("a")?;
    let b = set.find("test-domain", &[("noVal", "b")]).ok_or("b")?;
    assert_eq!(a.counter_key, "test-domain_noVal_a_");
    assert_ne!(
        a.counter_key, b.counter_key,
        "a key-only rule counts each value apart"
    );
    assert_eq!(a.rule.id, "test-domain.noVal");
    assert_eq!(a.stats_key, "test-domain.noVal");
    let w = set.find("test-domain", &[("wild", "foo1")]).ok_or("wild")?;
    assert_eq!(w.counter_key, "test-domain_wild_foo1_");
    assert_eq!(w.stats_key, "test-domain.wild_foo*");
    Ok(())
}

#[test]
fn share_threshold_shares_one_counter_per_pattern() -> TestResult {
    let set = load_corpus(
        "valid/share_threshold/share_threshold.yaml",
        &LoadOptions::default(),
    )?;
    let d = "test-domain";
    let a = set.find(d, &[("files", "files/a")]).ok_or("a")?;
    let b = set.find(d, &[("files", "files/b")]).ok_or("b")?;
    assert_eq!(a.counter_key, "test-domain_files_files/*_");
    assert_eq!(a.counter_key, b.counter_key);
    assert_eq!(a.stats_key, "test-domain.files_files/*");
    // The exact value still wins over the sharing wildcard, with its own counter.
    let exact = set.find(d, &[("file", "test1")]).ok_or("exact")?;
    assert_eq!(exact.limits[0].requests_per_unit, 50);
    assert_eq!(exact.counter_key, "test-domain_file_test1_");
    // Nested: both wildcard levels share.
    let nested = set
        .find(
            d,
            &[
                ("user", "user/1"),
                ("resource", "res/9"),
                ("action", "read"),
            ],
        )
        .ok_or("nested")?;
    assert_eq!(nested.limits[0].requests_per_unit, 150);
    assert_eq!(
        nested.counter_key,
        "test-domain_user_user/*_resource_res/*_action_read_"
    );
    // Without share_threshold each value counts apart.
    let example = load_corpus("readme/example11.yaml", &LoadOptions::default())?;
    let x = example
        .find("example11", &[("files_no_share", "files_no_share/x")])
        .ok_or("x")?;
    assert_eq!(x.counter_key, "example11_files_no_share_files_no_share/x_");
    Ok(())
}

#[test]
fn detailed_metric_and_value_to_metric_stats_keys() -> TestResult {
    let set = rules(
        "domain: d\ndescriptors:\n  - key: k\n    detailed_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 10}\n  - key: v\n    value_to_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 10}\n  - key: plain\n    rate_limit: {unit: minute, requests_per_unit: 10}\n",
    )?;
    assert_eq!(
        set.find("d", &[("k", "x1")]).ok_or("k")?.stats_key,
        "d.k_x1"
    );
    assert_eq!(
        set.find("d", &[("v", "x2")]).ok_or("v")?.stats_key,
        "d.v_x2"
    );
    assert_eq!(
        set.find("d", &[("plain", "x3")]).ok_or("plain")?.stats_key,
        "d.plain"
    );
    Ok(())
}

#[test]
fn a_value_equal_to_a_wildcard_pattern_matches_exactly() -> TestResult {
    let set = rules(
        "domain: d\ndescriptors:\n  - key: k\n    value: a*\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    )?;
    let m = set.find("d", &[("k", "a*")]).ok_or("exact")?;
    assert_eq!(m.rule.id, "d.k_a*");
    Ok(())
}

#[test]
fn flags_and_metadata_are_accepted() -> TestResult {
    let set = rules(
        "domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n    metadata:\n      anything: {nested: [1, 2.5]}\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    )?;
    let m = set.find("d", &[("k", "v")]).ok_or("k")?;
    assert!(m.rule.quota_mode);
    assert_eq!(
        m.rule.metadata,
        Some(serde_json::json!({"anything": {"nested": [1, 2.5]}}))
    );
    let corpus = load_corpus("valid/metadata/metadata.yaml", &LoadOptions::default())?;
    let key2 = corpus.find("test-domain", &[("key2", "x")]).ok_or("key2")?;
    assert_eq!(
        key2.rule.metadata,
        Some(serde_json::json!({"service_with_quota": {"name": "service_2"}}))
    );
    let found = common::errors("domain: d\ndescriptors:\n  - key: k\n    metadata: [1]\n");
    assert!(
        found[0].contains("4:15: metadata must be a map"),
        "{found:?}"
    );
    Ok(())
}

#[test]
fn composite_keys_collide_as_upstream() -> TestResult {
    // envoyproxy/ratelimit keys a level by `key` or `key_value`: key `a_b` and key `a` with
    // value `b` are the same descriptor there, so defining both is a duplicate...
    let found = common::errors(
        "domain: d\ndescriptors:\n  - key: a_b\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: a\n    value: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n",
    );
    assert!(
        found[0].contains("duplicate descriptor composite key 'd.a_b'"),
        "{found:?}"
    );
    // ...and a request entry (a, b) finds the key-only descriptor `a_b`.
    let set = rules(
        "domain: d\ndescriptors:\n  - key: a_b\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    )?;
    assert_eq!(rpu(&set, "d", &[("a", "b")]), Some(1));
    assert_eq!(rpu(&set, "d", &[("a_b", "anything")]), Some(1));
    Ok(())
}

#[test]
fn find_one_answers_as_find_all_for_one_descriptor() -> TestResult {
    // Ten levels deep (more entries than matching keeps on the stack), a value longer than
    // its stack buffer, and a limit that another rule replaces (only when both match).
    let mut deep = String::from("domain: d\ndescriptors:\n");
    for level in 0..10 {
        let indent = "  ".repeat(2 * level);
        deep.push_str(&format!("{indent}  - key: k{level}\n"));
        if level == 9 {
            deep.push_str(&format!(
                "{indent}    rate_limit: {{unit: second, requests_per_unit: 7}}\n"
            ));
        } else {
            deep.push_str(&format!("{indent}    descriptors:\n"));
        }
    }
    let long = "v".repeat(300);
    deep.push_str(&format!(
        "  - key: long\n    value: {long}\n    rate_limit: {{unit: hour, requests_per_unit: 3}}\n"
    ));
    deep.push_str("  - key: both\n    rate_limits:\n      - {unit: second, requests_per_unit: 5, name: a}\n      - {unit: hour, requests_per_unit: 9}\n  - key: vip\n    rate_limit: {unit: day, requests_per_unit: 1, replaces: [{name: a}]}\n");
    let set = rules(&deep)?;
    let values: Vec<String> = (0..10).map(|i| format!("x{i}")).collect();
    let ten: Vec<(&str, &str)> = (0..10)
        .map(|i| {
            (
                ["k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9"][i],
                values[i].as_str(),
            )
        })
        .collect();
    let requests: [&[(&str, &str)]; 6] = [
        &ten,
        &ten[..9],
        &[("long", long.as_str())],
        &[("long", "short")],
        &[("both", "b")],
        &[("nothing", "here")],
    ];
    for entries in requests {
        let one = set.find_one("d", entries);
        assert_eq!(one, set.find_all("d", &[entries]).remove(0), "{entries:?}");
    }
    assert_eq!(rpu(&set, "d", &ten), Some(7));
    let deep_key = set
        .find_one("d", &ten)
        .ok_or("ten levels match")?
        .counter_key;
    assert_eq!(
        deep_key,
        "d_k0_x0_k1_x1_k2_x2_k3_x3_k4_x4_k5_x5_k6_x6_k7_x7_k8_x8_k9_x9_"
    );
    assert!(set.find_one("d", &[("long", long.as_str())]).is_some());
    assert!(set.find_one("d", &[("long", "short")]).is_none());
    let both = set.find_one("d", &[("both", "b")]).ok_or("both matches")?;
    assert_eq!(both.limits.len(), 2);
    let with_vip = set.find_all("d", &[&[("both", "b")], &[("vip", "v")]]);
    let kept = with_vip[0].as_ref().ok_or("both still matches")?;
    assert_eq!(kept.limits.len(), 1);
    assert_eq!(kept.limits[0].requests_per_unit, 9);
    Ok(())
}

#[test]
fn rules_are_numbered_in_listing_order() -> TestResult {
    let first = "domain: a\ndescriptors:\n  - key: k\n    descriptors:\n      - key: n\n        rate_limit: {unit: second, requests_per_unit: 1}\n  - key: free\n    rate_limit: {unlimited: true}\n  - key: m\n    rate_limit: {unit: hour, requests_per_unit: 2}\n";
    let second =
        "domain: b\ndescriptors:\n  - key: x\n    rate_limit: {unit: day, requests_per_unit: 3}\n";
    let set = RuleSet::from_sources(
        &[
            ("a.yaml".into(), first.to_owned()),
            ("b.yaml".into(), second.to_owned()),
        ],
        &LoadOptions::default(),
    )?;
    let listed: Vec<(String, usize)> = set
        .domains()
        .flat_map(|d| set.rules(d))
        .map(|r| (r.id.clone(), r.index()))
        .collect();
    assert_eq!(set.rule_count(), 4);
    assert_eq!(
        listed.iter().map(|(_, i)| *i).collect::<Vec<_>>(),
        [0, 1, 2, 3],
        "{listed:?}"
    );
    let found = set.find("b", &[("x", "1")]).ok_or("b.x matches")?;
    assert_eq!(found.rule.index(), 3);
    Ok(())
}
