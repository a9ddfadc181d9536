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
//! `data/guava-oracle/Oracle.java` (see the commands at the top of that file).

use std::error::Error;
use std::num::NonZeroU64;
use std::time::Duration;

use sluicegate::{
    Algorithm, ConfigError, Decision, DirectLimiter, ManualClock, Micros, Op, SmoothBursty,
    SmoothState, SmoothWarmup,
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
        if !decision.allowed || !op.consumes() {
            assert!(same_state(&before, &self.state), "{op:?} changed the state");
        }
        if decision.allowed {
            self.now = self.now.saturating_add(micros(decision.wait));
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
        if !decision.allowed {
            assert!(
                same_state(&before, &self.limiter.state()),
                "a denial changed the state"
            );
        }
        if decision.allowed {
            self.limiter.clock().advance(decision.wait);
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
                let got = if decision.allowed {
                    micros(decision.wait).to_string()
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

/// More of Guava's `RateLimiterTest`, with its printed waits in the comments.
const RATE_LIMITER_TEST: &str = "
# testSimpleAcquireEarliestAvailableIsInPast
bursty 5.0 1.0
acquire 1 = 0
sleep 400000
acquire 1 = 0
acquire 1 = 0
acquire 1 = 200000

# testImmediateTryAcquire: create(1): tryAcquire() true, then false
bursty 1.0 1.0
check 1 = 0
check 1 = deny

# testDoubleMinValueCanAcquireExactlyOnce: the interval is infinite, the ticket saturates
bursty 4.9E-324 1.0
check 1 = 0
check 1 = deny
sleep 2147483647000
check 1 = deny

# testTryAcquire_noWaitAllowed
bursty 5.0 1.0
try 1 0 = 0
try 1 0 = deny
try 1 0 = deny
sleep 100000
try 1 0 = deny

# testTryAcquire_someWaitAllowed
bursty 5.0 1.0
try 1 0 = 0
try 1 200000 = 200000
try 1 100000 = deny
sleep 100000
try 1 100000 = 100000

# testTryAcquire_overflow: a timeout of Long.MAX_VALUE microseconds
bursty 5.0 1.0
try 1 0 = 0
sleep 100000
try 1 9223372036854775807 = 100000

# testTryAcquire_negative (negative timeouts count as zero: here, checks)
bursty 5.0 1.0
try 5 0 = 0
sleep 900000
check 1 = deny
sleep 100000
check 1 = 0

# testSimpleWeights
bursty 1.0 1.0
acquire 1 = 0
acquire 1 = 1000000
acquire 2 = 1000000
acquire 4 = 2000000
acquire 8 = 4000000
acquire 1 = 8000000

# testWarmUpWithColdFactor: R0.00, R1.75, R1.26, R0.76, R0.30, R0.20, R0.20, R0.20 ...
warmup 5.0 4000000 10.0
acquire 1 = 0
acquire 1 = 1752500
acquire 1 = 1257500
acquire 1 = 762500
acquire 1 = 300227
acquire 1 = 200000
acquire 1 = 200000
acquire 1 = 200000
sleep 200000
sleep 4000000
acquire 1 = 0
acquire 1 = 1752500
acquire 1 = 1257500
acquire 1 = 762500
acquire 1 = 300227
acquire 1 = 200000
acquire 1 = 200000
acquire 1 = 200000
sleep 200000
sleep 1000000
acquire 1 = 0
acquire 1 = 200000
acquire 1 = 200000
acquire 1 = 200000
acquire 1 = 200000
acquire 1 = 200000
acquire 1 = 200000
acquire 1 = 200000

# testWarmUpWithColdFactor1: a cold factor of 1 is no warm-up at all
warmup 5.0 4000000 1.0
acquire 1 = 0
acquire 1 = 200000
acquire 1 = 200000
acquire 1 = 200000
acquire 1 = 200000
acquire 1 = 200000
acquire 1 = 200000
acquire 1 = 200000
sleep 340000
acquire 1 = 0
acquire 1 = 200000
acquire 1 = 200000
acquire 1 = 200000
acquire 1 = 200000
acquire 1 = 200000
acquire 1 = 200000
acquire 1 = 200000

# testWarmUpAndUpdate: R0.00, R1.38, R1.13, R0.88, R0.63, R0.50, R0.50, R0.50; U4.50;
# R0.00, R1.38, R1.13; setRate(4); R0.88; R0.34, R0.28, R0.25, R0.25; U4.25;
# R0.00, R0.72, R0.66, R0.59, R0.53, R0.47, R0.41, R0.34, R0.28, R0.25, R0.25
warmup 2.0 4000000 3.0
acquire 1 = 0
acquire 1 = 1375000
acquire 1 = 1125000
acquire 1 = 875000
acquire 1 = 625000
acquire 1 = 500000
acquire 1 = 500000
acquire 1 = 500000
sleep 4500000
acquire 1 = 0
acquire 1 = 1375000
acquire 1 = 1125000
rate 4.0
acquire 1 = 875000
acquire 1 = 343750
acquire 1 = 281250
acquire 1 = 250000
acquire 1 = 250000
sleep 4250000
acquire 1 = 0
acquire 1 = 718750
acquire 1 = 656250
acquire 1 = 593750
acquire 1 = 531250
acquire 1 = 468750
acquire 1 = 406250
acquire 1 = 343750
acquire 1 = 281250
acquire 1 = 250000
acquire 1 = 250000

# testWarmUpAndUpdateWithColdFactor: R0.00, R1.75, R1.26, R0.76, R0.30, R0.20 x3; U4.20;
# R0.00, R1.75, R1.26; setRate(10); R0.76; R0.20, R0.10, R0.10, R0.10; U4.10;
# R0.00, R0.94, R0.81, R0.69, R0.57, R0.44, R0.32, R0.20, R0.10, R0.10, R0.10
warmup 5.0 4000000 10.0
acquire 1 = 0
acquire 1 = 1752500
acquire 1 = 1257500
acquire 1 = 762500
acquire 1 = 300227
acquire 1 = 200000
acquire 1 = 200000
acquire 1 = 200000
sleep 4200000
acquire 1 = 0
acquire 1 = 1752500
acquire 1 = 1257500
rate 10.0
acquire 1 = 762500
acquire 1 = 195625
acquire 1 = 104602
acquire 1 = 100000
acquire 1 = 100000
sleep 4100000
acquire 1 = 0
acquire 1 = 938125
acquire 1 = 814375
acquire 1 = 690625
acquire 1 = 566875
acquire 1 = 443125
acquire 1 = 319375
acquire 1 = 195625
acquire 1 = 104602
acquire 1 = 100000
acquire 1 = 100000
";

#[test]
fn design_section_9_vectors() -> TestResult {
    assert_eq!(
        replay_all_modes(DESIGN_SECTION_9)?,
        expectations(DESIGN_SECTION_9)
    );
    Ok(())
}

#[test]
fn rate_limiter_test_vectors() -> TestResult {
    assert_eq!(
        replay_all_modes(RATE_LIMITER_TEST)?,
        expectations(RATE_LIMITER_TEST)
    );
    Ok(())
}

#[test]
fn traces_recorded_from_guava() -> TestResult {
    let traces = include_str!("data/guava_traces.txt");
    assert!(expectations(traces) > 500, "the trace file looks truncated");
    assert_eq!(replay_all_modes(traces)?, expectations(traces));
    Ok(())
}
