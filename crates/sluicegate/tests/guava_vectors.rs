//! `SmoothBursty` and `SmoothWarmup` against Guava's `RateLimiter`, to the microsecond.
//!
//! Scripts are lines of `bursty RATE MAX_BURST_SECONDS` / `warmup RATE WARMUP_MICROS
//! COLD_FACTOR` (a new limiter, created at the script's time zero), `sleep MICROS`, `rate RATE`
//! (`setRate`), `acquire N = WAIT`, `try N TIMEOUT_MICROS = WAIT|deny` and `check N =
//! 0|deny` (`tryAcquire(n)`). As in Guava's tests, where `acquire` sleeps on a fake stopwatch,
//! time moves on by the wait of every granted request. Each script is replayed through the pure
//! `decide` with an explicit `now` (from time zero and from a Unix-like time) and through a
//! `DirectLimiter` on a `ManualClock`.
//!
//! `data/guava_traces.txt` was recorded from Guava 31.1's own classes by
//! `data/guava-oracle/Oracle.java` (see the commands at the top of that file), which also
//! confirms the hand-written vectors here and in `data/guava_rate_limiter_test.txt`.

use std::error::Error;
use std::num::NonZeroU64;
use std::time::Duration;

use proptest::prelude::*;
use sluicegate::state::SmoothState;
use sluicegate::state_machine::Op;
use sluicegate::{
    Algorithm, Clock, ConfigError, Decision, DirectLimiter, KeyedLimiter, ManualClock, Micros,
    SmoothBursty, SmoothWarmup,
};

type TestResult = Result<(), Box<dyn Error>>;

const ACQUIRE: Op = Op::Reserve { max_wait: None };

/// A limiter that can be rebuilt at another rate (Guava's `setRate`).
trait Rerate: Algorithm<State = SmoothState> + Sized {
    fn rerate(&self, permits_per_second: f64) -> Result<Self, ConfigError>;
}

impl Rerate for SmoothBursty {
    fn rerate(&self, permits_per_second: f64) -> Result<Self, ConfigError> {
        self.with_rate(permits_per_second)
    }
}

impl Rerate for SmoothWarmup {
    fn rerate(&self, permits_per_second: f64) -> Result<Self, ConfigError> {
        self.with_rate(permits_per_second)
    }
}

/// Bit-for-bit equality, so that a NaN or a -0.0 cannot hide a change.
fn same_state(a: &SmoothState, b: &SmoothState) -> bool {
    a.created_at == b.created_at
        && a.next_free_ticket == b.next_free_ticket
        && a.stored_permits.to_bits() == b.stored_permits.to_bits()
}

fn permits(n: u64) -> Result<NonZeroU64, Box<dyn Error>> {
    Ok(NonZeroU64::new(n).ok_or("permits must be above zero")?)
}

/// One way of running a limiter: answers requests at its own "now", which moves on by the
/// wait of every granted request (the caller sleeps), and by `sleep`.
trait Driver {
    fn decide(&mut self, permits: NonZeroU64, op: Op) -> Result<Decision, Box<dyn Error>>;
    fn sleep(&mut self, micros: u64);
    fn set_rate(&mut self, permits_per_second: f64) -> Result<(), ConfigError>;
    fn now(&self) -> Micros;
}

/// The pure state machine with an explicit `now`.
struct Pure<A> {
    algorithm: A,
    state: SmoothState,
    now: Micros,
}

impl<A: Rerate> Pure<A> {
    fn new(algorithm: A, created_at: Micros) -> Self {
        Pure {
            state: algorithm.initial_state(created_at),
            algorithm,
            now: created_at,
        }
    }
}

impl<A: Rerate> Driver for Pure<A> {
    fn decide(&mut self, permits: NonZeroU64, op: Op) -> Result<Decision, Box<dyn Error>> {
        let before = self.state;
        let decision = self
            .algorithm
            .decide(&mut self.state, self.now, permits, op)?;
        if !decision.allowed() || !op.consumes() {
            assert!(same_state(&before, &self.state), "{op:?} changed the state");
        }
        if decision.allowed() {
            self.now = self.now.saturating_add(micros(decision.wait()));
        }
        Ok(decision)
    }

    fn sleep(&mut self, micros: u64) {
        self.now = self.now.saturating_add(micros);
    }

    fn set_rate(&mut self, permits_per_second: f64) -> Result<(), ConfigError> {
        let new = self.algorithm.rerate(permits_per_second)?;
        self.algorithm.carry_over(&new, &mut self.state, self.now);
        self.algorithm = new;
        Ok(())
    }

    fn now(&self) -> Micros {
        self.now
    }
}

/// A `DirectLimiter` on a `ManualClock`.
struct Direct<A: Algorithm> {
    limiter: DirectLimiter<A, ManualClock>,
}

impl<A: Rerate> Direct<A> {
    fn new(algorithm: A, created_at: Micros) -> Self {
        Direct {
            limiter: DirectLimiter::with_clock(algorithm, ManualClock::new(created_at)),
        }
    }
}

impl<A: Rerate> Driver for Direct<A> {
    fn decide(&mut self, permits: NonZeroU64, op: Op) -> Result<Decision, Box<dyn Error>> {
        let before = self.limiter.state();
        let decision = self.limiter.decide(permits, op)?;
        if !decision.allowed() {
            assert!(
                same_state(&before, &self.limiter.state()),
                "a denial changed the state"
            );
        }
        if decision.allowed() {
            self.limiter.clock().advance(decision.wait());
        }
        Ok(decision)
    }

    fn sleep(&mut self, micros: u64) {
        self.limiter.clock().advance_micros(micros);
    }

    fn set_rate(&mut self, permits_per_second: f64) -> Result<(), ConfigError> {
        let new = self.limiter.algorithm().rerate(permits_per_second)?;
        self.limiter.set_algorithm(new);
        Ok(())
    }

    fn now(&self) -> Micros {
        self.limiter.clock().now()
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// How a script is replayed.
#[derive(Debug, Clone, Copy)]
struct Mode {
    direct: bool,
    /// The clock reading at the script's time zero.
    origin: Micros,
    /// Replay `try N 0` as [`Op::Check`] instead of a reservation with no wait allowed.
    zero_timeout_as_check: bool,
}

const MODES: [Mode; 4] = [
    Mode {
        direct: false,
        origin: 0,
        zero_timeout_as_check: false,
    },
    Mode {
        direct: false,
        origin: 1_700_000_000_000_000,
        zero_timeout_as_check: true,
    },
    Mode {
        direct: true,
        origin: 0,
        zero_timeout_as_check: true,
    },
    Mode {
        direct: true,
        origin: 1_700_000_000_000_000,
        zero_timeout_as_check: false,
    },
];

fn driver<A: Rerate + 'static>(algorithm: A, mode: Mode) -> Box<dyn Driver> {
    if mode.direct {
        Box::new(Direct::new(algorithm, mode.origin))
    } else {
        Box::new(Pure::new(algorithm, mode.origin))
    }
}

/// Replays `script` and returns how many expectations it checked; a mismatch is an error
/// naming the line.
fn replay(script: &str, mode: Mode) -> Result<usize, Box<dyn Error>> {
    let mut limiter: Option<Box<dyn Driver>> = None;
    let mut checked = 0;
    for (index, line) in script.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = || format!("line {} `{line}` ({mode:?})", index + 1);
        let (command, expected) = match line.split_once(" = ") {
            Some((command, expected)) => (command, Some(expected)),
            None => (line, None),
        };
        let words: Vec<&str> = command.split_whitespace().collect();
        let decision = match words.as_slice() {
            ["bursty", rate, burst] => {
                limiter = Some(driver(
                    SmoothBursty::new(rate.parse()?, burst.parse()?)?,
                    mode,
                ));
                None
            }
            ["warmup", rate, warmup, cold] => {
                let warmup = Duration::from_micros(warmup.parse()?);
                limiter = Some(driver(
                    SmoothWarmup::new(rate.parse()?, warmup, cold.parse()?)?,
                    mode,
                ));
                None
            }
            [command, rest @ ..] => {
                let limiter = limiter
                    .as_mut()
                    .ok_or_else(|| format!("{}: no limiter", at()))?;
                match (*command, rest) {
                    ("sleep", [us]) => {
                        limiter.sleep(us.parse()?);
                        None
                    }
                    ("rate", [rate]) => {
                        limiter.set_rate(rate.parse()?)?;
                        None
                    }
                    ("acquire", [n]) => Some(limiter.decide(permits(n.parse()?)?, ACQUIRE)?),
                    ("check", [n]) => Some(limiter.decide(permits(n.parse()?)?, Op::Check)?),
                    ("try", [n, timeout]) => {
                        let max_wait: u64 = timeout.parse()?;
                        let op = if max_wait == 0 && mode.zero_timeout_as_check {
                            Op::Check
                        } else {
                            Op::Reserve {
                                max_wait: Some(max_wait),
                            }
                        };
                        Some(limiter.decide(permits(n.parse()?)?, op)?)
                    }
                    _ => return Err(format!("{}: unknown command", at()).into()),
                }
            }
            [] => None,
        };
        match (decision, expected) {
            (Some(decision), Some(expected)) => {
                let got = if decision.allowed() {
                    micros(decision.wait()).to_string()
                } else {
                    "deny".to_owned()
                };
                if got != expected {
                    return Err(format!("{}: got {got}", at()).into());
                }
                checked += 1;
            }
            (None, None) => {}
            _ => return Err(format!("{}: expectation without a request", at()).into()),
        }
    }
    Ok(checked)
}

/// The number of expectations in `script`.
fn expectations(script: &str) -> usize {
    script.lines().filter(|line| line.contains(" = ")).count()
}

fn replay_all_modes(script: &str) -> Result<usize, Box<dyn Error>> {
    let mut checked = 0;
    for mode in MODES {
        checked = replay(script, mode)?;
    }
    Ok(checked)
}

/// DESIGN.md section 9, waits in microseconds (Guava prints them in seconds: R0.20 = 200000).
const DESIGN_SECTION_9: &str = "
# create(5.0): acquire x3 -> R0.00 R0.20 R0.20
bursty 5.0 1.0
acquire 1 = 0
acquire 1 = 200000
acquire 1 = 200000

# create(5.0): acquire; sleep 200ms; acquire; acquire -> R0.00 U0.20 R0.00 R0.20
bursty 5.0 1.0
acquire 1 = 0
sleep 200000
acquire 1 = 0
acquire 1 = 200000

# create(5.0): sleep 1000ms x2; acquire(1) acquire(1) acquire(3) acquire(1) acquire(1)
bursty 5.0 1.0
sleep 1000000
sleep 1000000
acquire 1 = 0
acquire 1 = 0
acquire 3 = 0
acquire 1 = 0
acquire 1 = 200000

# create(1.0): acquire(1) acquire(1); setRate(2.0); acquire(1) acquire(2) acquire(4) acquire(1)
bursty 1.0 1.0
acquire 1 = 0
acquire 1 = 1000000
rate 2.0
acquire 1 = 1000000
acquire 2 = 500000
acquire 4 = 1000000
acquire 1 = 2000000

# warm-up create(2.0, 4s, cold 3): 8 x acquire, sleep 0.5s + 4s, 8 x, sleep 0.5s + 2s, 8 x
warmup 2.0 4000000 3.0
acquire 1 = 0
acquire 1 = 1375000
acquire 1 = 1125000
acquire 1 = 875000
acquire 1 = 625000
acquire 1 = 500000
acquire 1 = 500000
acquire 1 = 500000
sleep 500000
sleep 4000000
acquire 1 = 0
acquire 1 = 1375000
acquire 1 = 1125000
acquire 1 = 875000
acquire 1 = 625000
acquire 1 = 500000
acquire 1 = 500000
acquire 1 = 500000
sleep 500000
sleep 2000000
acquire 1 = 0
acquire 1 = 500000
acquire 1 = 500000
acquire 1 = 500000
acquire 1 = 500000
acquire 1 = 500000
acquire 1 = 500000
acquire 1 = 500000

# warm-up create(5.0, 4s, cold 10): 8 x acquire
warmup 5.0 4000000 10.0
acquire 1 = 0
acquire 1 = 1752500
acquire 1 = 1257500
acquire 1 = 762500
acquire 1 = 300227
acquire 1 = 200000
acquire 1 = 200000
acquire 1 = 200000
";

#[test]
fn design_section_9_vectors() -> TestResult {
    assert_eq!(
        replay_all_modes(DESIGN_SECTION_9)?,
        expectations(DESIGN_SECTION_9)
    );
    Ok(())
}

/// More of Guava's `RateLimiterTest`: weights, `tryAcquire` with and without timeouts,
/// `setRate` on warming-up limiters, cold factors 1 and 10, `Double.MIN_VALUE`.
#[test]
fn rate_limiter_test_vectors() -> TestResult {
    let script = include_str!("data/guava_rate_limiter_test.txt");
    assert_eq!(replay_all_modes(script)?, expectations(script));
    Ok(())
}

#[test]
fn traces_recorded_from_guava() -> TestResult {
    let traces = include_str!("data/guava_traces.txt");
    assert!(expectations(traces) > 500, "the trace file looks truncated");
    assert_eq!(replay_all_modes(traces)?, expectations(traces));
    Ok(())
}

/// A small deterministic generator, standing in for the `java.util.Random` of Guava's tests.
struct XorShift(u64);

impl XorShift {
    /// A number in `0..bound` (`bound > 0`), like `Random.nextInt(bound)`.
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

/// Guava's `measureTotalTimeMillis`: acquires `permits` in random pieces, then one more permit
/// to pay for the last piece, and returns the time that took in whole milliseconds.
fn measure_total_time_millis(
    limiter: &mut dyn Driver,
    permits: u64,
    random: &mut XorShift,
) -> Result<u64, Box<dyn Error>> {
    let start = limiter.now();
    let mut left = permits;
    while left > 0 {
        let next = random.below(left).max(1);
        left -= next;
        assert!(limiter.decide(self::permits(next)?, ACQUIRE)?.allowed());
    }
    assert!(limiter.decide(NonZeroU64::MIN, ACQUIRE)?.allowed());
    Ok((limiter.now() - start) / 1_000)
}

/// Guava's testWeNeverGetABurstMoreThanOneSec: whatever the rate changes, a burst is at most
/// one second's worth of permits.
#[test]
fn we_never_get_a_burst_more_than_one_second() -> TestResult {
    for seed in 1..=20 {
        let mut random = XorShift(seed);
        let mut limiter = Pure::new(SmoothBursty::per_second(1.0)?, 0);
        for rate in [1000u64, 1, 10, 1_000_000, 10, 1] {
            limiter.sleep(rate * 1_000_000);
            limiter.set_rate(rate as f64)?;
            let burst = measure_total_time_millis(&mut limiter, rate, &mut random)?;
            assert!(burst <= 1000, "rate {rate}: a burst took {burst}ms");
            let after = measure_total_time_millis(&mut limiter, rate, &mut random)?;
            assert!(after >= 1000, "rate {rate}: after the burst took {after}ms");
        }
    }
    Ok(())
}

/// Guava's testTimeToWarmUpIsHonouredEvenWithWeights: the permits of the warm-up take exactly
/// the warm-up period, however they are split into requests.
#[test]
fn time_to_warm_up_is_honoured_even_with_weights() -> TestResult {
    let warmup_permits = 10;
    let mut random = XorShift(0x5eed);
    for _trial in 0..100 {
        for cold_factor in [2.0, 3.0, 10.0] {
            for qps in [4.0, 2.0, 1.0, 0.5, 0.1] {
                // Java: (long) ((1 + coldFactor) * warmupPermits / (2.0 * qps) * 1000.0)
                let warmup_millis =
                    ((1.0 + cold_factor) * warmup_permits as f64 / (2.0 * qps) * 1000.0) as u64;
                let warmup = Duration::from_millis(warmup_millis);
                let mut limiter = Pure::new(SmoothWarmup::new(qps, warmup, cold_factor)?, 0);
                let took = measure_total_time_millis(&mut limiter, warmup_permits, &mut random)?;
                assert_eq!(took, warmup_millis, "qps {qps}, cold factor {cold_factor}");
            }
        }
    }
    Ok(())
}

#[test]
fn keyed_limiters_keep_a_guava_limiter_per_key() -> TestResult {
    let clock = ManualClock::new(0);
    let limiter = KeyedLimiter::with_clock(SmoothBursty::per_second(1.0)?, clock.clone());
    assert!(limiter.check(&"alice")?.allowed());
    assert!(!limiter.check(&"alice")?.allowed());
    assert!(limiter.check(&"bob")?.allowed());
    clock.advance(Duration::from_secs(2));
    limiter.retain_recent();
    assert!(limiter.is_empty(), "rested keys are dropped");
    // A key seen again has saved one permit since the limiter's creation, plus the free one.
    for _ in 0..2 {
        assert!(limiter.check(&"alice")?.allowed());
    }
    assert!(!limiter.check(&"alice")?.allowed());
    Ok(())
}

#[test]
fn infinite_rates_are_rejected() {
    // Guava accepts `Double.POSITIVE_INFINITY` (its testInfinity_* cases); sluicegate does not.
    assert!(SmoothBursty::per_second(f64::INFINITY).is_err());
    assert!(SmoothWarmup::new(f64::INFINITY, Duration::from_secs(10), 3.0).is_err());
}

/// A smooth limiter as the properties below draw it.
#[derive(Debug, Clone)]
enum Params {
    Bursty {
        rate: f64,
        burst_seconds: f64,
    },
    Warmup {
        rate: f64,
        warmup_micros: u64,
        cold_factor: f64,
    },
}

fn params(rates: std::ops::Range<f64>) -> impl Strategy<Value = Params> {
    prop_oneof![
        (rates.clone(), 0.0..10.0f64).prop_map(|(rate, burst_seconds)| Params::Bursty {
            rate,
            burst_seconds
        }),
        (rates, 1..10_000_000u64, 1.0..10.0f64).prop_map(|(rate, warmup_micros, cold_factor)| {
            Params::Warmup {
                rate,
                warmup_micros,
                cold_factor,
            }
        }),
    ]
}

/// One request, pause or rate change.
#[derive(Debug, Clone)]
enum Step {
    Sleep(u64),
    Check(u64),
    Peek(u64),
    Try(u64, u64),
    /// `acquire`, returning at once: several callers may hold reservations at the same time.
    Reserve(u64),
    /// `acquire`, sleeping the wait.
    Acquire(u64),
    SetRate(f64),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let weight = prop_oneof![4 => Just(1u64), 2 => 2..10u64, 1 => 10..1000u64];
    let step = prop_oneof![
        3 => (0..3_000_000u64).prop_map(Step::Sleep),
        3 => weight.clone().prop_map(Step::Check),
        2 => weight.clone().prop_map(Step::Peek),
        3 => (weight.clone(), 0..2_000_000u64).prop_map(|(n, t)| Step::Try(n, t)),
        2 => weight.clone().prop_map(Step::Reserve),
        3 => weight.prop_map(Step::Acquire),
        1 => (0.1..2000.0f64).prop_map(Step::SetRate),
    ];
    prop::collection::vec(step, 1..100)
}

/// The decision's own promises about the state it leaves: `remaining` is 0 exactly when the next
/// check must wait, and the state is fresh `reset_after` from now (and not 2µs before).
fn check_decision_fields<A: Rerate>(
    algorithm: &A,
    state: &SmoothState,
    now: Micros,
    decision: &Decision,
) -> TestResult {
    let mut probe = *state;
    let next = algorithm.decide(&mut probe, now, NonZeroU64::MIN, Op::Check)?;
    assert_eq!(decision.remaining() > 0, next.allowed(), "{decision:?}");
    assert!(decision.remaining() <= decision.limit());
    let reset = micros(decision.reset_after());
    assert!(algorithm.is_fresh(state, now + reset), "{decision:?}");
    if reset >= 2 {
        assert!(!algorithm.is_fresh(state, now + reset - 2), "{decision:?}");
    }
    Ok(())
}

fn check_properties<A: Rerate>(algorithm: A, steps: &[Step]) -> TestResult {
    let mut limiter = Pure::new(algorithm, 0);
    let mut last_start: Micros = 0;
    for step in steps {
        let now = limiter.now;
        let before = limiter.state;
        let decide = |n: u64, op: Op| -> Result<(SmoothState, Decision), Box<dyn Error>> {
            let mut next = before;
            let decision = limiter.algorithm.decide(&mut next, now, permits(n)?, op)?;
            Ok((next, decision))
        };
        match *step {
            Step::Sleep(micros) => limiter.sleep(micros),
            Step::SetRate(rate) => limiter.set_rate(rate)?,
            Step::Peek(n) => {
                let (after, peeked) = decide(n, Op::Peek)?;
                assert!(same_state(&before, &after), "a peek changed the state");
                // A peek answers as the check would, but its `remaining` is what is there now,
                // whatever the request's size: a check of one passes exactly when it is not 0.
                let checked = decide(n, Op::Check)?.1;
                let answer = |d: &Decision| {
                    (
                        d.allowed(),
                        d.limit(),
                        d.reset_after(),
                        d.retry_after(),
                        d.wait(),
                    )
                };
                assert_eq!(answer(&peeked), answer(&checked));
                assert_eq!(peeked.remaining(), decide(1, Op::Peek)?.1.remaining());
                assert_eq!(peeked.remaining() > 0, decide(1, Op::Check)?.1.allowed());
                assert!(peeked.remaining() >= checked.remaining());
            }
            Step::Check(n) | Step::Try(n, _) => {
                let (op, max_wait) = match *step {
                    Step::Try(_, t) => (Op::Reserve { max_wait: Some(t) }, t),
                    _ => (Op::Check, 0),
                };
                let (after, decision) = decide(n, op)?;
                let wait = micros(decision.wait());
                if decision.allowed() {
                    assert!(wait <= max_wait);
                    assert!(now + wait >= last_start);
                    last_start = now + wait;
                } else {
                    assert!(same_state(&before, &after), "a denial changed the state");
                    // The earliest time the same request, with the same timeout, could pass.
                    let retry = micros(decision.retry_after().unwrap_or_default());
                    assert!(retry > 0);
                    let ticket_in = i128::from(before.next_free_ticket) - i128::from(now);
                    assert_eq!(i128::from(retry), ticket_in - i128::from(max_wait));
                }
                check_decision_fields(&limiter.algorithm, &after, now, &decision)?;
                limiter.state = after;
                limiter.now = now + wait;
            }
            Step::Reserve(n) | Step::Acquire(n) => {
                let peeked = decide(n, Op::Peek)?.1;
                let (after, decision) = decide(n, ACQUIRE)?;
                assert!(decision.allowed());
                // The wait is the time until the next free ticket, which a peek reports.
                assert_eq!(decision.wait(), peeked.retry_after().unwrap_or_default());
                // Reservations start in the order they were made.
                let start = now + micros(decision.wait());
                assert!(start >= last_start);
                last_start = start;
                check_decision_fields(&limiter.algorithm, &after, now, &decision)?;
                limiter.state = after;
                if matches!(step, Step::Acquire(_)) {
                    limiter.now = start;
                }
            }
        }
    }
    Ok(())
}

fn build(params: &Params) -> Result<Result<SmoothBursty, SmoothWarmup>, ConfigError> {
    Ok(match *params {
        Params::Bursty {
            rate,
            burst_seconds,
        } => Ok(SmoothBursty::new(rate, burst_seconds)?),
        Params::Warmup {
            rate,
            warmup_micros,
            cold_factor,
        } => Err(SmoothWarmup::new(
            rate,
            Duration::from_micros(warmup_micros),
            cold_factor,
        )?),
    })
}

fn long_run(params: &Params, weights: &[u64]) -> TestResult {
    let (mut limiter, stable, extra): (Box<dyn Driver>, f64, f64) = match build(params)? {
        Ok(bursty) => {
            let stable = 1e6 / bursty.permits_per_second();
            (Box::new(Pure::new(bursty, 0)), stable, 0.0)
        }
        Err(warmup) => {
            let stable = 1e6 / warmup.permits_per_second();
            // Draining a cold limiter costs the warm-up period above the threshold and half
            // of it below (Guava's trapezoid and rectangle).
            let cold_cost = 1.5 * micros(warmup.warmup()) as f64;
            let extra = cold_cost - warmup.max_permits() * stable;
            (Box::new(Pure::new(warmup, 0)), stable, extra)
        }
    };
    for &n in weights {
        assert!(limiter.decide(permits(n)?, ACQUIRE)?.allowed());
    }
    let total: u64 = weights.iter().sum();
    let paid_for = (total - weights.last().copied().unwrap_or_default()) as f64;
    let elapsed = limiter.now() as f64;
    let expected = paid_for * stable + extra;
    // Up to a microsecond lost to each of Guava's two truncations per request.
    let slack = 2.0 * weights.len() as f64 + 1.0;
    assert!(elapsed <= expected + 1.0, "{elapsed} > {expected}");
    assert!(
        elapsed >= expected - slack,
        "{elapsed} < {expected} - {slack}"
    );
    let rate = paid_for / (elapsed - extra) * 1e6;
    let set_rate = 1e6 / stable;
    assert!(
        (rate - set_rate).abs() <= set_rate * 1e-3,
        "{rate} vs {set_rate}"
    );
    Ok(())
}

fn fail(error: Box<dyn Error>) -> TestCaseError {
    TestCaseError::fail(error.to_string())
}

proptest! {
    /// Denials and peeks change nothing, a peek answers as a check would, waits are what the
    /// next free ticket says, reservations start in order, and the decision fields hold.
    #[test]
    fn decisions_keep_their_promises(params in params(0.1..2000.0), steps in steps()) {
        match build(&params).map_err(|e| fail(e.into()))? {
            Ok(bursty) => check_properties(bursty, &steps).map_err(fail)?,
            Err(warmup) => check_properties(warmup, &steps).map_err(fail)?,
        }
    }

    /// Busy from creation, a bursty limiter never saves a permit, so every request but the last
    /// has been paid for at the stable interval (less under a microsecond per truncation); a
    /// warming-up one pays on top, once, what its cold permits cost above the stable interval.
    /// Either way the long-run rate is the set rate.
    #[test]
    fn long_runs_converge_to_the_rate(
        params in params(0.5..200.0),
        weights in prop::collection::vec(1..20u64, 2000..3000),
    ) {
        long_run(&params, &weights).map_err(fail)?;
    }
}
