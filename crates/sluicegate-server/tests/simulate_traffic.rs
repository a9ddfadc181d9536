//! `--traffic` generates the same trace for the same seed; `--plot` draws one panel per
//! limiter.

mod common;

use common::{TestResult, lines, simulate};

#[test]
fn a_seed_makes_traffic_deterministic() -> TestResult {
    let run = |seed: &str| {
        simulate(
            &[
                "--limiter",
                "gcra:rate=10/s,burst=5",
                "--traffic",
                "poisson:rate=20/s,duration=10s,keys=3",
                "--seed",
                seed,
            ],
            "",
        )
    };
    let (first, again, other) = (run("42")?, run("42")?, run("43")?);
    assert!(first.status.success());
    assert_eq!(first.stdout, again.stdout);
    assert_ne!(first.stdout, other.stdout);
    let answers = common::parse_lines(&first.stdout)?;
    // About 200 arrivals (Poisson: standard deviation about 14), on three keys, in time order.
    assert!((120..280).contains(&answers.len()), "{}", answers.len());
    let times: Vec<f64> = answers.iter().filter_map(|a| a["t"].as_f64()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]));
    for key in ["k0", "k1", "k2"] {
        assert!(answers.iter().any(|a| a["key"] == key), "{key}");
    }
    Ok(())
}

#[test]
fn bursts_hit_the_limit() -> TestResult {
    let answers = lines(
        &[
            "--limiter",
            "token-bucket:rate=1/s,burst=10",
            "--traffic",
            "burst:size=50,every=5s,duration=20s",
        ],
        "",
    )?;
    assert_eq!(answers.len(), 200);
    let allowed = answers.iter().filter(|a| a["allowed"] == true).count();
    // Ten from the full bucket, then five refilled by each later burst.
    assert_eq!(allowed, 10 + 5 + 5 + 5);
    Ok(())
}

#[test]
fn the_plot_has_one_panel_per_limiter() -> TestResult {
    let dir = std::env::temp_dir().join(format!("sluicegate-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("bursts.svg");
    let output = simulate(
        &[
            "--limiter",
            "token-bucket:rate=2/s,burst=5",
            "--limiter",
            "gcra:rate=4/s,burst=2",
            "--limiter",
            "concurrency:limit=20",
            "--traffic",
            "burst:size=10,every=2s,duration=10s",
            "--plot",
            path.to_str().ok_or("path")?,
        ],
        "",
    )?;
    assert!(output.status.success());
    let svg = std::fs::read_to_string(&path)?;
    std::fs::remove_dir_all(&dir)?;
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<g class=\"panel\"").count(), 3);
    for title in [
        "token-bucket:rate=2/s,burst=5",
        "gcra:rate=4/s,burst=2",
        "concurrency:limit=20",
    ] {
        assert!(svg.contains(title), "{title}");
    }
    assert!(svg.contains("class=\"rejected\""));
    assert!(svg.contains("class=\"allowed\""));
    assert_well_formed(&svg)?;
    Ok(())
}

/// Every element closed in order, every attribute quoted: enough to know a viewer will read it.
fn assert_well_formed(svg: &str) -> Result<(), String> {
    let mut open: Vec<&str> = Vec::new();
    let mut rest = svg;
    while let Some(start) = rest.find('<') {
        let end = rest[start..].find('>').ok_or("unclosed tag")? + start;
        let tag = &rest[start + 1..end];
        if let Some(name) = tag.strip_prefix('/') {
            let top = open.pop().ok_or(format!("stray </{name}>"))?;
            if top != name.trim() {
                return Err(format!("</{name}> closes <{top}>"));
            }
        } else if !tag.ends_with('/') {
            let name = tag.split_whitespace().next().ok_or("empty tag")?;
            open.push(name);
        }
        if tag.matches('"').count() % 2 != 0 {
            return Err(format!("unbalanced quotes in <{tag}>"));
        }
        if rest[end + 1..]
            .find('<')
            .is_some_and(|next| rest[end + 1..end + 1 + next].contains('>'))
        {
            return Err("stray > in text".into());
        }
        rest = &rest[end + 1..];
    }
    if open.is_empty() {
        Ok(())
    } else {
        Err(format!("unclosed: {open:?}"))
    }
}
