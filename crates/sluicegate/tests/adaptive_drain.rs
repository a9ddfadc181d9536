//! After the service loses capacity, the recommended controllers bring the limit down so that
//! the queue drains, and keep it down: a deterministic trace of callers in a closed loop
//! before a service whose workers drop from 10 to 1. From 10 s after the drop the p99 must be under twice the unloaded one (the
//! benchmark's target, `scripts/bench-adaptive.sh`), the limit must not creep back up, and
//! the one worker left must stay busy.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use sluicegate::Micros;
use sluicegate::adaptive::{Controller, Gradient2, Percentile, Sample};

const MS: Micros = 1_000;
const SECOND: Micros = 1_000_000;
/// The mean service time.
const MEAN_SERVICE: f64 = 20_000.0;

/// The `n`th request's service time: exponential of mean 20 ms, drawn from `n` by a fixed
/// hash (SplitMix64), so the trace is the same on every run without a random source.
fn service(n: u64) -> Micros {
    let mut z = n.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    // Uniform in (0, 1]: never 0, whose logarithm is infinite.
    let uniform = ((z >> 11) + 1) as f64 / (1u64 << 53) as f64;
    (-MEAN_SERVICE * uniform.ln()) as Micros
}

/// One second of the trace.
#[derive(Debug, Clone, Copy, Default)]
struct Second {
    answers: u64,
    latency_sum: Micros,
    /// The limit at the end of the second.
    limit: u32,
}

/// The callers: `count` of them, the `c`th sending its first request at `c * stagger`, then
/// each its next `think` after its previous one was answered or turned away.
#[derive(Debug, Clone, Copy)]
struct Callers {
    count: usize,
    think: Micros,
    stagger: Micros,
}

/// Runs `controller` for `seconds` between `callers` and a first-come-first-served service
/// with `workers(t)` workers (at most 10), each request taking [`service`] of its number: each
/// second, and the latencies answered from `settled_from` on.
fn run(
    controller: &mut dyn Controller,
    callers: Callers,
    workers: impl Fn(Micros) -> usize,
    seconds: usize,
    settled_from: Micros,
) -> (Vec<Second>, Vec<Micros>) {
    // When each worker is next free; when each caller tries next (time, caller); the answers
    // due (time, start, in flight at grant, caller).
    let mut free_at: Vec<Micros> = vec![0; 10];
    let mut tries: BinaryHeap<Reverse<(Micros, usize)>> = (0..callers.count)
        .map(|c| Reverse((c as Micros * callers.stagger, c)))
        .collect();
    let mut due: BinaryHeap<Reverse<(Micros, Micros, u32, usize)>> = BinaryHeap::new();
    let mut in_flight: u32 = 0;
    let mut served = 0u64;
    let mut trace = vec![Second::default(); seconds];
    let mut settled = Vec::new();
    let end = seconds as Micros * SECOND;
    loop {
        let next_try = tries.peek().map(|Reverse((t, _))| *t);
        let next_answer = due.peek().map(|Reverse((t, ..))| *t);
        // Answers first at the same microsecond: a worker frees before a caller tries.
        let answer_first = match (next_try, next_answer) {
            (Some(t), Some(a)) => a <= t,
            (None, Some(_)) => true,
            _ => false,
        };
        if answer_first {
            let Some(Reverse((now, start, granted_at, caller))) = due.pop() else {
                break;
            };
            if now >= end {
                break;
            }
            in_flight -= 1;
            let latency = now - start;
            let limit = controller.on_sample(now, Sample::ok(start, latency, granted_at));
            if now >= settled_from {
                settled.push(latency);
            }
            if let Some(second) = trace.get_mut((now / SECOND) as usize) {
                second.answers += 1;
                second.latency_sum += latency;
                second.limit = limit;
            }
            tries.push(Reverse((now + callers.think, caller)));
            continue;
        }
        let Some(Reverse((now, caller))) = tries.pop() else {
            break;
        };
        if now >= end {
            break;
        }
        if in_flight >= controller.limit() {
            tries.push(Reverse((now + callers.think, caller)));
            continue;
        }
        in_flight += 1;
        let usable = workers(now).clamp(1, free_at.len());
        let (worker, free) = free_at[..usable]
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|(_, free)| *free)
            .unwrap_or((0, now));
        let done = free.max(now) + service(served);
        served += 1;
        free_at[worker] = done;
        due.push(Reverse((done, now, in_flight, caller)));
    }
    (trace, settled)
}

/// 50 callers, each sending a request 180 ms after its last answer or refusal (about 250 a
/// second, half what 10 workers answer, five times what one does), on 10 workers until 30 s,
/// then 1; checks the trace from 10 s after the drop.
fn drains(name: &str, controller: &mut dyn Controller) {
    let drop = 30 * SECOND;
    let callers = Callers {
        count: 50,
        think: 180 * MS,
        stagger: 0,
    };
    let (trace, mut settled) = run(
        controller,
        callers,
        |t| if t < drop { 10 } else { 1 },
        120,
        drop + 10 * SECOND,
    );
    settled.sort_unstable();
    let p99 = settled[(settled.len() * 99).div_ceil(100) - 1];
    // Unloaded, an answer takes its service time: an exponential's p99 is ln(100) times its
    // mean, 92 ms.
    let unloaded_p99 = (MEAN_SERVICE * 100f64.ln()) as Micros;
    assert!(
        p99 < 2 * unloaded_p99,
        "{name}: p99 {} ms from 10 s after the drop; limits {:?}",
        p99 / MS,
        trace.iter().map(|s| s.limit).collect::<Vec<_>>()
    );
    // The one worker kept busy: at least 80% of the 50 answers a second it can give.
    let answers = settled.len() as u64;
    assert!(answers >= 40 * 80, "{name}: {answers} answers in 80 s");
    let settled_limit = trace[40..60].iter().map(|s| s.limit).max().unwrap_or(0);
    let last = trace[100..].iter().map(|s| s.limit).max().unwrap_or(0);
    assert!(
        last <= settled_limit.max(2),
        "{name}: the limit crept from {settled_limit} to {last}"
    );
}

#[test]
fn gradient2_drains_the_queue_after_capacity_drops() {
    drains("gradient2", &mut Gradient2::default());
}

#[test]
fn percentile_drains_the_queue_after_capacity_drops() {
    drains("percentile", &mut Percentile::default());
}

#[test]
fn gradient2_does_not_learn_a_standing_queue_as_normal() {
    // Ten workers, and callers joining ten a second up to 200, each back 300 ms after an
    // answer or a refusal: quiet at first, then more than the workers can answer (about 600
    // a second against 500) for five minutes. The no-load estimate is learnt while the
    // service is quiet and nothing of the standing queue after: the limit keeps the workers
    // busy and the queue near the tolerance (latency about 1.5 times the service's, under
    // twice), and the latency does not creep up.
    let mut gradient2 = Gradient2::default();
    let callers = Callers {
        count: 200,
        think: 300 * MS,
        stagger: 100 * MS,
    };
    let (trace, _) = run(&mut gradient2, callers, |_| 10, 330, Micros::MAX);
    let mean_ms = |seconds: &[Second]| {
        let sum: Micros = seconds.iter().map(|s| s.latency_sum).sum();
        let answers: u64 = seconds.iter().map(|s| s.answers).sum();
        sum as f64 / answers.max(1) as f64 / MS as f64
    };
    for minute in trace[30..].chunks(60) {
        let mean = mean_ms(minute);
        assert!(mean <= 2.0 * MEAN_SERVICE / 1e3, "a minute at {mean:.1} ms");
        assert!(minute.iter().all(|s| s.answers >= 400), "{minute:?}");
    }
    let (early, late) = (mean_ms(&trace[30..90]), mean_ms(&trace[270..330]));
    assert!(late <= early * 1.15, "from {early:.1} ms to {late:.1} ms");
    // The workers kept busy: 95% of their 500 answers a second.
    let answers: u64 = trace[30..].iter().map(|s| s.answers).sum();
    assert!(answers >= 475 * 300, "{answers}");
}
