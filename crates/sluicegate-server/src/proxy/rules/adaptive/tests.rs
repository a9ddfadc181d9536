use std::path::Path;
use std::time::Duration;

use crate::proxy::rules::Rules;

/// The route `/`'s rule file with `adaptive` set to `block`.
fn rule_file(block: &str) -> String {
    format!("routes:\n  - prefix: /\n    adaptive: {block}\n")
}

fn problems(text: &str) -> String {
    match Rules::parse(Path::new("r.yaml"), text) {
        Ok(_) => "ok".to_owned(),
        Err(error) => error.to_string(),
    }
}

#[test]
fn a_route_reads_its_adaptive_setting() -> Result<(), Box<dyn std::error::Error>> {
    let text = "routes:\n  - prefix: /api/\n    adaptive:\n      controller: percentile\n      target: 150ms\n      max: 64\n      queue_timeout: 250ms\n      queue_capacity: 10\n      retry_after: 3s\n  - prefix: /\n";
    let rules = Rules::parse(Path::new("r.yaml"), text)?;
    let def = rules.routes[0].adaptive.clone().ok_or("no adaptive")?;
    assert_eq!(def.controller.to_string(), "percentile:target=150ms,max=64");
    assert_eq!(def.queue_timeout, Some(Duration::from_millis(250)));
    assert_eq!(def.queue_capacity, 10);
    assert_eq!(def.retry_after, Duration::from_secs(3));
    assert_eq!(rules.routes[1].adaptive, None);
    Ok(())
}

#[test]
fn whatever_simulate_takes_can_be_written_as_a_spec_or_as_keys()
-> Result<(), Box<dyn std::error::Error>> {
    let as_spec = rule_file(r#"{ controller: "gradient2:window=1s,min=1,tolerance=2" }"#);
    let as_keys = rule_file("{ controller: gradient2, window: 1s, min: 1, tolerance: 2 }");
    let mixed = rule_file(r#"{ controller: "gradient2:window=1s", min: 1, tolerance: 2.0 }"#);
    let mut read = Vec::new();
    for text in [as_spec, as_keys, mixed] {
        let rules = Rules::parse(Path::new("r.yaml"), &text)?;
        let def = rules.routes[0].adaptive.clone().ok_or("no adaptive")?;
        read.push(def.controller.build(0)?.bounds());
        assert_eq!(def.controller.get("window"), Some("1s"));
    }
    assert!(read.iter().all(|bounds| bounds == &read[0]));
    // `none` is no limit at all.
    let none = Rules::parse(Path::new("r.yaml"), &rule_file("{ controller: none }"))?;
    assert_eq!(none.routes[0].adaptive, None);
    Ok(())
}

#[test]
fn bad_settings_are_named_with_their_place() {
    let text = problems(
        "routes:\n  - prefix: /\n    adaptive: { controller: percentile, queue_timeout: soon, size: 3 }\n",
    );
    for expected in [
        "r.yaml:3:62: unknown key `size` in `adaptive`",
        "r.yaml:3:56: `queue_timeout` `soon`",
    ] {
        assert!(text.contains(expected), "{expected} not in:\n{text}");
    }
    // Without a target, percentile holds one it derives from what it measures.
    assert_eq!(problems(&rule_file("{ controller: percentile }")), "ok");
    for (block, expected) in [
        ("{}", "r.yaml:3:15: `adaptive` needs a `controller`"),
        (
            "{ controller: aimd, min: 0 }",
            "r.yaml:3:40: aimd: invalid min `0`",
        ),
        (
            "{ controller: vegas, timeout: 1s }",
            "r.yaml:3:45: unknown parameter `timeout` for vegas (it takes: smoothing,",
        ),
        (
            r#"{ controller: "aimd:min=2", min: 3 }"#,
            "r.yaml:3:48: aimd: parameter `min` is given twice",
        ),
        (
            "{ controller: vegas, min: 10, max: 5 }",
            "r.yaml:3:17: `adaptive`: vegas: min (10) must not exceed max (5)",
        ),
        (
            r#"{ controller: "aimd:backoff=2" }"#,
            "r.yaml:3:29: aimd: invalid backoff `2`",
        ),
        (
            "{ controller: tcp }",
            "r.yaml:3:29: unknown controller `tcp` (known: aimd,",
        ),
        (
            "{ controller: none, queue_capacity: 5 }",
            "r.yaml:3:17: `adaptive`: `none` sets no limit",
        ),
    ] {
        let text = problems(&rule_file(block));
        assert!(text.contains(expected), "{expected} not in:\n{text}");
    }
}
