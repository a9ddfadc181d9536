use std::num::NonZeroU64;
use std::time::Duration;

use proptest::prelude::*;

use crate::algorithm::{Concurrency, Gcra, TokenBucket};
use crate::error::{CheckError, ConfigError};
use crate::rate::Rate;
use crate::spec::{AlgorithmSpec, AnyAlgorithm};
use crate::state::AnyState;
use crate::state_machine::{Algorithm, Op};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const ONE: NonZeroU64 = NonZeroU64::MIN;

fn spec(text: &str) -> Result<AnyAlgorithm, ConfigError> {
    text.parse()
}

#[test]
fn reads_the_specs_of_the_design() -> TestResult {
    let cases = [
        ("token-bucket:rate=10/s,burst=20", "token-bucket", 20),
        ("gcra:rate=10/s,burst=5", "gcra", 5),
        ("gcra:rate=100/1m", "gcra", 100),
        ("concurrency:limit=3", "concurrency", 3),
        (
            " Token_Bucket : RATE = 0.5/s , Burst = 2 ",
            "token-bucket",
            2,
        ),
        ("gcra:rate=1/s,capacity=4", "gcra", 4),
        ("fixed-window:limit=100,window=60s", "fixed-window", 100),
        ("sliding-log:limit=5,window=1s", "sliding-log", 5),
        (
            "sliding-window:limit=100,window=60s,buckets=6",
            "sliding-window",
            100,
        ),
        (
            "sliding-window:limit=100,window=1.5s",
            "sliding-window",
            100,
        ),
        ("leaky-bucket:rate=10/s,capacity=5", "leaky-bucket", 5),
        ("leaky-bucket:rate=10/s,burst=5", "leaky-bucket", 5),
        ("leaky-queue:rate=10/s,burst=5,delay=2", "leaky-queue", 6),
        ("leaky-queue:rate=10/s,burst=5,nodelay", "leaky-queue", 6),
        ("leaky-queue:rate=10/s", "leaky-queue", 1),
        ("smooth-bursty:rate=5", "smooth-bursty", 6),
        ("smooth-bursty:rate=5,burst_seconds=2", "smooth-bursty", 11),
        (
            "smooth-warmup:rate=2,warmup=4s,cold_factor=3",
            "smooth-warmup",
            2,
        ),
        ("smooth-warmup:rate=2.5,warmup=4s", "smooth-warmup", 3),
    ];
    for (text, name, limit) in cases {
        let algorithm = spec(text)?;
        assert_eq!(
            (algorithm.name(), algorithm.limit()),
            (name, limit),
            "{text}"
        );
    }
    Ok(())
}

#[test]
fn a_spec_prints_in_canonical_form_and_reads_back() -> TestResult {
    let parsed: AlgorithmSpec = "GCRA:Rate=10/s,capacity=5".parse()?;
    assert_eq!(parsed.to_string(), "gcra:rate=10/s,burst=5");
    assert_eq!(parsed.to_string().parse::<AlgorithmSpec>()?, parsed);
    let built = AlgorithmSpec::new("gcra", [("rate", "10/s"), ("burst", "5")])?;
    assert_eq!(built, parsed);
    Ok(())
}

#[test]
fn an_unknown_algorithm_lists_the_known_ones() {
    let err = spec("token-backet:rate=1/s").expect_err("typo");
    assert!(
        matches!(&err, ConfigError::UnknownAlgorithm { name, .. } if name == "token-backet"),
        "{err:?}"
    );
    assert!(err.to_string().contains("gcra"), "{err}");
    assert!(matches!(
        spec(""),
        Err(ConfigError::UnknownAlgorithm { .. })
    ));
}

#[test]
fn parameter_errors_name_the_parameter() {
    let err = spec("gcra:rate=10/s,brust=5").expect_err("unknown");
    assert!(
        matches!(&err, ConfigError::UnknownParameter { name, algorithm: "gcra", .. } if name == "brust"),
        "{err:?}"
    );
    assert!(err.to_string().contains("rate, burst, initial"), "{err}");

    let err = spec("gcra:burst=5").expect_err("missing");
    assert_eq!(
        err,
        ConfigError::MissingParameter {
            algorithm: "gcra",
            name: "rate"
        }
    );

    let err = spec("gcra:rate=1/s,burst=2,capacity=3").expect_err("duplicate");
    assert!(
        matches!(&err, ConfigError::InvalidParameter { name: "burst", reason, .. } if reason.contains("twice")),
        "{err:?}"
    );

    for (text, name) in [
        ("gcra:rate=fast", "rate"),
        ("gcra:rate=0/s", "rate"),
        ("gcra:rate=10/s,burst=-1", "burst"),
        ("gcra:rate=10/s,burst=1.5", "burst"),
        ("gcra:rate=10/s,burst=0", "burst"),
        ("token-bucket:rate=10/s,burst=2,initial=3", "initial"),
        ("concurrency:limit=0", "limit"),
        ("concurrency:limit", "limit"),
        ("concurrency:limit=99999999999999999999999", "limit"),
        ("fixed-window:limit=10,window=0s", "window"),
        ("fixed-window:limit=10,window=soon", "window"),
        ("sliding-window:limit=10,window=1s,buckets=0", "buckets"),
        (
            "sliding-window:limit=10,window=1s,buckets=99999999999",
            "buckets",
        ),
        ("leaky-queue:rate=1/s,delay=1,nodelay", "delay"),
        ("leaky-queue:rate=1/s,nodelay=yes", "nodelay"),
        ("smooth-bursty:rate=0", "rate"),
        ("smooth-bursty:rate=nan", "rate"),
        ("smooth-bursty:rate=-5", "rate"),
        ("smooth-bursty:rate=5,burst_seconds=inf", "burst_seconds"),
        ("smooth-warmup:rate=2,warmup=0s", "warmup"),
        (
            "smooth-warmup:rate=2,warmup=4s,cold_factor=0.5",
            "cold_factor",
        ),
    ] {
        let err = spec(text).expect_err(text);
        assert!(
            matches!(&err, ConfigError::InvalidParameter { name: n, .. } if *n == name),
            "{text}: {err:?}"
        );
        assert!(err.to_string().contains(name), "{text}: {err}");
    }
    assert!(matches!(
        spec("gcra:rate=1/s,,burst=1"),
        Err(ConfigError::Syntax { .. })
    ));
}

#[test]
fn decides_exactly_as_the_algorithm_it_wraps() -> TestResult {
    let gcra = Gcra::new(Rate::per_second(3)?, 2)?;
    let any = AnyAlgorithm::from(gcra.clone());
    let (mut plain, mut wrapped) = (gcra.initial_state(0), any.initial_state(0));
    for (i, now) in [0, 0, 0, 100_000, 333_333, 333_334, 900_000, 2_000_000]
        .into_iter()
        .enumerate()
    {
        let op = if i % 3 == 2 { Op::Peek } else { Op::Check };
        let expected = gcra.decide(&mut plain, now, ONE, op)?;
        assert_eq!(
            any.decide(&mut wrapped, now, ONE, op)?,
            expected,
            "at {now}"
        );
        assert_eq!(any.is_fresh(&wrapped, now), gcra.is_fresh(&plain, now));
    }
    assert_eq!(any.capacity(), 2);
    Ok(())
}

#[test]
fn errors_pass_through() -> TestResult {
    let any = spec("token-bucket:rate=1/s,burst=2")?;
    let mut state = any.initial_state(0);
    let three = NonZeroU64::new(3).ok_or("3")?;
    assert_eq!(
        any.decide(&mut state, 0, three, Op::Check),
        Err(CheckError::InsufficientCapacity {
            requested: 3,
            capacity: 2
        })
    );
    assert!(matches!(
        any.decide(&mut state, 0, ONE, Op::Release),
        Err(CheckError::Unsupported {
            algorithm: "token-bucket",
            ..
        })
    ));
    Ok(())
}

#[test]
fn set_rate_keeps_the_other_parameters_and_carries_the_state() -> TestResult {
    let old = spec("token-bucket:rate=1/s,burst=4")?;
    let new = old.with_rate("2/s")?;
    assert_eq!((new.name(), new.limit()), ("token-bucket", 4));

    let plain_old = TokenBucket::new(Rate::per_second(1)?, 4)?;
    let plain_new = TokenBucket::new(Rate::per_second(2)?, 4)?;
    let mut plain = plain_old.initial_state(0);
    let mut wrapped = old.initial_state(0);
    let three = NonZeroU64::new(3).ok_or("3")?;
    let _ = plain_old.decide(&mut plain, 0, three, Op::Check)?;
    let _ = old.decide(&mut wrapped, 0, three, Op::Check)?;
    plain_old.carry_over(&plain_new, &mut plain, 500_000);
    old.carry_over(&new, &mut wrapped, 500_000);
    for now in [500_000, 500_000, 600_000, 1_000_000] {
        let expected = plain_new.decide(&mut plain, now, ONE, Op::Check)?;
        assert_eq!(new.decide(&mut wrapped, now, ONE, Op::Check)?, expected);
    }

    let gcra = spec("gcra:rate=10/s,burst=7")?.with_rate("0.5/s")?;
    assert_eq!(gcra.limit(), 7);
    let window = spec("sliding-window:limit=10,window=1s,buckets=4")?;
    assert_eq!(window.with_rate("20")?.limit(), 20);
    let per_minute = window.with_rate("30/1m")?;
    assert!(
        matches!(&per_minute, AnyAlgorithm::SlidingWindow(w) if w.window() == Duration::from_secs(60) && w.buckets() == Some(4)),
        "{per_minute:?}"
    );
    let smooth = spec("smooth-warmup:rate=2,warmup=4s,cold_factor=5")?.with_rate("2.5")?;
    assert!(
        matches!(&smooth, AnyAlgorithm::SmoothWarmup(s) if s.permits_per_second() == 2.5 && s.cold_factor() == 5.0),
        "{smooth:?}"
    );
    let queue = spec("leaky-queue:rate=1/s,burst=3,delay=1")?.with_rate("4/s")?;
    assert!(
        matches!(&queue, AnyAlgorithm::LeakyQueue(q) if q.burst() == 3 && q.delay() == crate::algorithm::QueueDelay::After(1)),
        "{queue:?}"
    );
    let concurrency = spec("concurrency:limit=3")?.with_rate("5")?;
    assert_eq!(concurrency.limit(), 5);
    let err = gcra.with_rate("fast").expect_err("bad rate");
    assert!(err.to_string().contains("rate"), "{err}");
    assert!(concurrency.with_rate("5/s").is_err());
    Ok(())
}

#[test]
fn another_algorithms_state_counts_as_fresh() -> TestResult {
    let gcra = spec("gcra:rate=1/s,burst=1")?;
    let concurrency = AnyAlgorithm::from(Concurrency::new(1)?);
    let mut state = concurrency.initial_state(0);
    let _ = concurrency.decide(&mut state, 0, ONE, Op::Check)?;
    assert!(gcra.is_fresh(&state, 0));
    // A denial leaves the foreign state untouched.
    let mut taken = gcra.initial_state(0);
    let _ = gcra.decide(&mut taken, 0, ONE, Op::Check)?;
    let before = taken.clone();
    let denied = concurrency.decide(&mut taken, 0, NonZeroU64::MIN, Op::Peek)?;
    assert!(denied.allowed());
    assert_eq!(taken, before);
    // Switching algorithm starts the new one afresh.
    gcra.carry_over(&concurrency, &mut taken, 5);
    assert_eq!(taken, AnyState::Concurrency(0));
    assert_eq!(
        spec("gcra:rate=1/s")?,
        AnyAlgorithm::from(Gcra::new(Rate::per_second(1)?, 1)?)
    );
    Ok(())
}

#[test]
fn a_keyed_limiter_runs_any_algorithm() -> TestResult {
    let clock = crate::clock::ManualClock::new(0);
    let limiter =
        crate::limiter::KeyedLimiter::with_clock(spec("gcra:rate=10/s,burst=1")?, clock.clone());
    assert!(limiter.check(&"a")?.allowed());
    let denied = limiter.check(&"a")?;
    assert_eq!(denied.retry_after(), Some(Duration::from_millis(100)));
    let new = limiter.algorithm().with_rate("1/s")?;
    limiter.set_algorithm(new);
    clock.advance(Duration::from_millis(100));
    assert!(!limiter.check(&"a")?.allowed());
    clock.advance(Duration::from_millis(900));
    assert!(limiter.check(&"a")?.allowed());
    Ok(())
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in ".{0,64}") {
        let _ = text.parse::<AnyAlgorithm>();
    }

    #[test]
    fn spec_shaped_text_never_panics(
        name in prop::sample::select(vec![
            "gcra", "token-bucket", "fixed-window", "sliding-log", "sliding-window",
            "leaky-bucket", "leaky-queue", "smooth-bursty", "smooth-warmup", "concurrency", "x",
        ]),
        items in prop::collection::vec(
            (
                prop::sample::select(vec![
                    "rate", "burst", "initial", "limit", "capacity", "window", "buckets", "delay",
                    "nodelay", "burst_seconds", "warmup", "cold_factor", "?",
                ]),
                "[0-9./a-z:=]{0,12}|[0-9]{1,3}(/s|/1m|ms|s)?",
            ),
            0..5,
        ),
    ) {
        let params: Vec<String> = items.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let text = format!("{name}:{}", params.join(","));
        if let Ok(algorithm) = text.parse::<AnyAlgorithm>() {
            prop_assert!(algorithm.limit() > 0);
            let _ = algorithm.with_rate(&items.first().map(|(_, v)| v.clone()).unwrap_or_default());
        }
    }
}

#[test]
fn every_algorithm_writes_back_the_spec_that_builds_it() -> Result<(), ConfigError> {
    for spec in [
        "token-bucket:rate=10/s,burst=20,initial=3",
        "gcra:rate=0.5/s",
        "fixed-window:limit=100,window=60s",
        "sliding-log:limit=5,window=250ms",
        "sliding-window:limit=100,window=1m,buckets=6",
        "sliding-window:limit=100,window=1m",
        "leaky-bucket:rate=10/s,capacity=4",
        "leaky-queue:rate=10/s,burst=5,delay=2",
        "leaky-queue:rate=10/s,burst=5,nodelay",
        "leaky-queue:rate=10/s",
        "smooth-bursty:rate=0.3,burst_seconds=2.5",
        "smooth-warmup:rate=2,warmup=4s,cold_factor=3.5",
        "concurrency:limit=3",
    ] {
        let algorithm: AnyAlgorithm = spec.parse()?;
        let written = algorithm.to_string();
        assert_eq!(
            written.parse::<AnyAlgorithm>()?,
            algorithm,
            "{spec} -> {written}"
        );
        assert_eq!(written.parse::<AlgorithmSpec>()?, algorithm.to_spec());
    }
    Ok(())
}

#[test]
fn a_quota_fills_the_rate_or_the_limit_and_window() -> Result<(), ConfigError> {
    let minute = Duration::from_secs(60);
    let none: [(&str, &str); 0] = [];
    for (name, expected) in [
        ("token-bucket", "token-bucket:rate=100/1m"),
        ("Sliding_Window", "sliding-window:limit=100,window=1m"),
        ("concurrency", "concurrency:limit=100"),
        ("smooth-bursty", "smooth-bursty:rate=100/1m"),
    ] {
        let spec = AlgorithmSpec::from_quota(name, 100, minute, none)?;
        assert_eq!(spec.to_string(), expected);
        let quota = spec.to_quota()?;
        assert_eq!(quota.permits, 100);
    }
    // The same aliases and checks as the text.
    let spec = AlgorithmSpec::from_quota("gcra", 10, minute, [("CAPACITY", "4")])?;
    assert_eq!(spec.get("burst"), Some("4"));
    let err = AlgorithmSpec::from_quota("gcra", 10, minute, [("window", "1s")])
        .expect_err("the quota gives the window");
    assert!(err.to_string().contains("window"), "{err}");
    let err = AlgorithmSpec::from_quota("gcra", 10, minute, [("brust", "4")])
        .expect_err("a misspelt parameter");
    assert!(err.to_string().contains("brust"), "{err}");
    let names = AlgorithmSpec::non_quota_parameters();
    assert!(names.contains(&"nodelay") && names.contains(&"capacity"));
    assert!(!names.contains(&"rate") && !names.contains(&"window"));
    Ok(())
}

#[test]
fn a_leaky_bucket_holds_its_rate_unless_told_and_a_delay_stays_within_the_burst() {
    let bucket: Result<AnyAlgorithm, _> = "leaky-bucket:rate=5/s".parse();
    assert_eq!(bucket.map(|b| b.limit()).ok(), Some(5));
    let err = "leaky-queue:rate=5/s,burst=2,delay=3"
        .parse::<AnyAlgorithm>()
        .expect_err("a delay beyond the burst");
    assert!(
        err.to_string()
            .contains("delay (3) cannot exceed burst (2)"),
        "{err}"
    );
}
