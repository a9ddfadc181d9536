//! The fuzz tests' runner, shared by the workspace's `fuzz*` test files (each includes this
//! file with `#[path]`): proptest's [`TestRunner`] with
//!
//! - the number of cases from `PROPTEST_CASES` (proptest's own variable; 256 without it, the
//!   short pass CI runs; `scripts/fuzz.sh` asks for millions);
//! - a watchdog against hangs: a case still running after [`HANG_BOUND`] is printed and the
//!   process aborted, so a hang fails the run with its input instead of stalling it (a bound
//!   far above any case's time, not a timing assertion);
//! - a closing line, `fuzz TARGET: N inputs in S s (R inputs/s), A accepted`, that
//!   `scripts/fuzz.sh` reads (shown with `--nocapture`): A counts the inputs a test marked
//!   with [`accepted`] (a rule file that loaded, a request that was answered), to show how
//!   deep the inputs reach.

#![allow(dead_code)]

use std::cell::Cell;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};

/// How long one case may run before it counts as a hang: hundreds of times what the slowest
/// case takes in a debug build on a loaded machine.
pub(crate) const HANG_BOUND: Duration = Duration::from_secs(60);

/// The runner's settings: proptest's defaults (which read `PROPTEST_CASES`), no regression
/// files (failing inputs are kept as regular tests instead), shrinking bounded in time.
pub(crate) fn config() -> Config {
    Config {
        failure_persistence: None,
        max_shrink_time: 120_000,
        ..Config::default()
    }
}

thread_local! {
    /// Inputs marked [`accepted`] by the test running on this thread.
    static ACCEPTED: Cell<u64> = const { Cell::new(0) };
}

/// Marks the current input as accepted by the code under test (counted in the closing line).
pub(crate) fn accepted() {
    ACCEPTED.with(|n| n.set(n.get() + 1));
}

/// The case being run, for the watchdog: when it started, and the input.
type Current<T> = Arc<Mutex<Option<(Instant, T)>>>;

/// Runs `test` on `config().cases` inputs drawn from `strategy`, under the watchdog; panics
/// with the smallest failing input if one fails.
pub(crate) fn fuzz<S>(
    target: &str,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S: Strategy,
    S::Value: Clone + Debug + Send + 'static,
{
    fuzz_with(target, config(), strategy, test);
}

/// [`fuzz`] with other settings (fewer cases for tests over real sockets).
pub(crate) fn fuzz_with<S>(
    target: &str,
    config: Config,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S: Strategy,
    S::Value: Clone + Debug + Send + 'static,
{
    let current: Current<S::Value> = Arc::new(Mutex::new(None));
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = spawn_watchdog(target.to_owned(), Arc::clone(&current), Arc::clone(&done));
    let inputs = AtomicU64::new(0);
    ACCEPTED.with(|n| n.set(0));
    let started = Instant::now();
    let mut runner = TestRunner::new(config);
    let outcome = runner.run(&strategy, |input| {
        inputs.fetch_add(1, Ordering::Relaxed);
        *lock(&current) = Some((Instant::now(), input.clone()));
        let result = test(input);
        *lock(&current) = None;
        result
    });
    let elapsed = started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let _ = watchdog.join();
    let inputs = inputs.load(Ordering::Relaxed);
    eprintln!(
        "fuzz {target}: {inputs} inputs in {elapsed:.1} s ({:.0} inputs/s), {} accepted",
        inputs as f64 / elapsed.max(1e-9),
        ACCEPTED.with(Cell::get)
    );
    match outcome {
        Ok(()) => {}
        Err(TestError::Fail(reason, input)) => {
            panic!("fuzz {target} failed: {reason}\nsmallest failing input: {input:#?}")
        }
        Err(TestError::Abort(reason)) => panic!("fuzz {target} aborted: {reason}"),
    }
}

fn spawn_watchdog<T: Debug + Send + 'static>(
    target: String,
    current: Current<T>,
    done: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !done.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
            if let Some((since, input)) = &*lock(&current) {
                if since.elapsed() > HANG_BOUND {
                    eprintln!(
                        "fuzz {target}: a case ran for more than {}s (a hang); its input:\n{input:#?}",
                        HANG_BOUND.as_secs()
                    );
                    std::process::abort();
                }
            }
        }
    })
}

/// The lock, also after a panic in a case (which proptest catches, then shrinks).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A `prop_assert!` with a message: fails the case with `message` unless `condition`.
pub(crate) fn check(
    condition: bool,
    message: impl FnOnce() -> String,
) -> Result<(), TestCaseError> {
    if condition {
        Ok(())
    } else {
        Err(TestCaseError::fail(message()))
    }
}
