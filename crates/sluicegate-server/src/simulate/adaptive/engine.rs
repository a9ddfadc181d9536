//! The discrete-event simulation: clients, each with a limit in front, one M/M/c server
//! behind them all.
//!
//! Time is integer microseconds and moves only from event to event, taken from one binary
//! heap, so a run is a pure function of its scenario and seed: no threads, no wall clock.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, LogNormal};
use serde::Serialize;
use sluicegate::adaptive::{AdaptiveLimiter, Controller, Outcome, Permit};
use sluicegate::{ManualClock, Micros};

use crate::simulate::adaptive::limits::LimitsSpec;
use crate::simulate::adaptive::server::ServerSpec;
use crate::simulate::traffic::TrafficSpec;

const SECOND: Micros = 1_000_000;

/// Everything a run depends on besides the limit.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The server behind the limit.
    pub server: ServerSpec,
    /// When the first client's requests arrive (one request each; keys and permits are not
    /// used).
    pub traffic: TrafficSpec,
    /// More arrivals: on the first client (a spike), or on clients of their own, each with a
    /// limit of its own in front of the same server.
    pub loads: Vec<Load>,
    /// How long a client waits for its answer before it gives up.
    pub client_timeout: Micros,
    /// Seeds the arrivals, the service times and the controller.
    pub seed: u64,
    /// The bounds every adaptive controller is given unless its own spec sets them.
    pub limits: Option<LimitsSpec>,
}

impl Scenario {
    /// How many clients there are, each with a limit of its own: the first, and one more
    /// per client that a [`Load`] names.
    pub fn clients(&self) -> usize {
        self.loads
            .iter()
            .map(|l| l.client + 1)
            .max()
            .unwrap_or(1)
            .max(1)
    }

    /// When the last arrival may come, in microseconds.
    pub fn duration(&self) -> Micros {
        self.loads
            .iter()
            .map(|l| l.start.saturating_add(l.traffic.duration()))
            .fold(self.traffic.duration(), Micros::max)
    }
}

/// Arrivals added to a scenario: `traffic` from `start`, on client `client` (0: the first).
#[derive(Debug, Clone)]
pub struct Load {
    /// The client whose limit the requests meet.
    pub client: usize,
    /// When they arrive, counted from `start`.
    pub traffic: TrafficSpec,
    /// When the traffic begins, in microseconds.
    pub start: Micros,
}

/// What stands between the clients and the server: admits a request or rejects it at once (no
/// queue), and hears how each admitted request went.
pub trait Gate {
    /// What an admitted request holds until it is answered.
    type Ticket;

    /// Admits a request arriving at `now`, or rejects it.
    fn try_admit(&mut self, now: Micros) -> Option<Self::Ticket>;

    /// The server answered an admitted request at `now`: [`Outcome::Ok`] if its client still
    /// waited, [`Outcome::Dropped`] for an error (a rejection, a failure), else
    /// [`Outcome::Timeout`].
    fn finish(&mut self, now: Micros, ticket: Self::Ticket, outcome: Outcome);

    /// The current limit, `None` for none.
    fn limit(&self) -> Option<u32>;
}

/// The library's limiter, timing its permits on the simulation's clock.
type SimulatedLimiter = AdaptiveLimiter<Box<dyn Controller>, ManualClock>;

/// Sluicegate's [`AdaptiveLimiter`] on a manual clock that follows the simulation, with
/// `try_acquire`; or no limit at all.
pub struct LimiterGate {
    limiter: Option<(SimulatedLimiter, ManualClock)>,
}

impl LimiterGate {
    /// A gate limited by `controller`, or open to everything for `None`.
    pub fn new(controller: Option<Box<dyn Controller>>) -> LimiterGate {
        LimiterGate {
            limiter: controller.map(|controller| {
                let clock = ManualClock::new(0);
                (
                    AdaptiveLimiter::with_clock(controller, clock.clone()),
                    clock,
                )
            }),
        }
    }
}

impl Gate for LimiterGate {
    type Ticket = Option<Permit>;

    fn try_admit(&mut self, now: Micros) -> Option<Option<Permit>> {
        match &self.limiter {
            None => Some(None),
            Some((limiter, clock)) => {
                clock.set(now);
                limiter.try_acquire().map(Some)
            }
        }
    }

    fn finish(&mut self, now: Micros, ticket: Option<Permit>, outcome: Outcome) {
        if let (Some((_, clock)), Some(permit)) = (&self.limiter, ticket) {
            clock.set(now);
            permit.complete(outcome);
        }
    }

    fn limit(&self) -> Option<u32> {
        self.limiter.as_ref().map(|(limiter, _)| limiter.limit())
    }
}

/// One simulated second, as printed: the state at its end and counts over it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Second {
    /// The second's end, in seconds since the start.
    pub t: u64,
    /// The limit at the end (`None` with no limit); the first client's when there are several.
    pub limit: Option<u32>,
    /// With several clients, each one's limit at the end.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<Option<u32>>,
    /// Requests admitted and not yet answered, at the end.
    pub in_flight: u32,
    /// The median latency of the requests the server answered in the second, if any.
    pub p50_ms: Option<f64>,
    /// Their 99th percentile (nearest rank).
    pub p99_ms: Option<f64>,
    /// Requests answered while their client still waited.
    pub goodput: u64,
    /// Requests the limit turned away.
    pub rejected: u64,
    /// Clients that gave up, answered later or never.
    pub timed_out: u64,
    /// Errors the server answered (a full queue's rejections, random failures); only for a
    /// server that can answer them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<u64>,
    /// Requests that arrived.
    pub arrivals: u64,
}

/// A whole run: each second, and latencies over the run.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// Every second, in order.
    pub seconds: Vec<Second>,
    /// The median latency of every answered request, in milliseconds.
    pub p50_ms: Option<f64>,
    /// The 99th percentile of every answered request, in milliseconds.
    pub p99_ms: Option<f64>,
    /// After the first drop of the workers to half or less: the 99th percentile of the
    /// requests answered from 10 s after it to the next change (or the end), in
    /// milliseconds; `None` without such a drop, or with no answer then.
    pub settled_p99_ms: Option<f64>,
}

impl Run {
    /// Requests answered in time, over the run.
    pub fn goodput(&self) -> u64 {
        self.seconds.iter().map(|s| s.goodput).sum()
    }
}

/// What happens at an event. The order of the variants is the order of events at the same
/// microsecond: a second is closed before anything at its end is counted in the next, workers
/// change before the queue is served, and an answer at the very moment its client gives up
/// still counts (a client waits `client_timeout`, inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum What {
    Tick,
    Workers(u32),
    Answer(usize),
    GiveUp(usize),
    /// An arrival of the load at this index (0: the scenario's `traffic`).
    Arrival(usize),
}

/// An event in the heap: earliest first, then by kind, then in the order scheduled.
#[derive(Debug, PartialEq, Eq)]
struct Event {
    t: Micros,
    what: What,
    seq: u64,
}

impl Ord for Event {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: `BinaryHeap` pops its greatest.
        (other.t, rank(other.what), other.seq).cmp(&(self.t, rank(self.what), self.seq))
    }
}

impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

fn rank(what: What) -> u8 {
    match what {
        What::Tick => 0,
        What::Workers(_) => 1,
        What::Answer(_) => 2,
        What::GiveUp(_) => 3,
        What::Arrival(_) => 4,
    }
}

/// A request from arrival until both its answer and its client's deadline have passed (its
/// slot is reused only then, so a late event never finds another request in it).
struct Request<T> {
    client: usize,
    arrival: Micros,
    service: Micros,
    /// The answer is an error: a random failure, or a rejection by a full queue.
    error: bool,
    /// Rejected by a full queue: it never held a worker.
    rejected: bool,
    ticket: Option<T>,
    answered: bool,
    gave_up: bool,
}

/// The event heap and its sequence numbers.
struct Events {
    heap: BinaryHeap<Event>,
    seq: u64,
}

impl Events {
    fn push(&mut self, t: Micros, what: What) {
        self.seq += 1;
        self.heap.push(Event {
            t,
            what,
            seq: self.seq,
        });
    }
}

/// Counts over the current second.
#[derive(Default)]
struct Tally {
    latencies: Vec<Micros>,
    goodput: u64,
    rejected: u64,
    timed_out: u64,
    errors: u64,
    arrivals: u64,
}

/// Where requests come from: each load's arrival times, shifted by its start.
struct Sources<'a> {
    loads: Vec<(usize, Micros, Box<dyn Iterator<Item = Micros> + 'a>)>,
}

impl<'a> Sources<'a> {
    fn new(scenario: &'a Scenario) -> Sources<'a> {
        let mut loads: Vec<(usize, Micros, Box<dyn Iterator<Item = Micros> + 'a>)> = vec![(
            0,
            0,
            Box::new(scenario.traffic.arrival_times(scenario.seed)),
        )];
        for (index, load) in scenario.loads.iter().enumerate() {
            // Each load its own stream; the first keeps the scenario's seed as it is.
            let seed = scenario.seed ^ (index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            loads.push((
                load.client,
                load.start,
                Box::new(load.traffic.arrival_times(seed)),
            ));
        }
        Sources { loads }
    }

    /// The next arrival of load `index`, if any.
    fn next(&mut self, index: usize) -> Option<Micros> {
        let (_, start, times) = self.loads.get_mut(index)?;
        times.next().map(|t| t.saturating_add(*start))
    }

    fn client(&self, index: usize) -> usize {
        self.loads.get(index).map_or(0, |(client, _, _)| *client)
    }
}

/// Draws each arrival's service time and whether its answer fails, from streams of their
/// own, one draw per arrival whether admitted or not, so that every gate meets the same
/// requests with the same work (common random numbers).
struct Work {
    rng: ChaCha8Rng,
    fail_rng: ChaCha8Rng,
    exponential: Option<Exp<f64>>,
    lognormal: Option<LogNormal<f64>>,
    mean: Micros,
    fail: f64,
}

impl Work {
    fn new(server: &ServerSpec, seed: u64) -> Work {
        Work {
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5e41_1ce0_d15c_0a11),
            fail_rng: ChaCha8Rng::seed_from_u64(seed ^ 0x0fa1_1ed0_0b5e_55ed),
            exponential: Exp::new(1.0 / server.service() as f64).ok(),
            lognormal: server
                .lognormal()
                .and_then(|(mu, sigma)| LogNormal::new(mu, sigma).ok()),
            mean: server.service(),
            fail: server.fail(),
        }
    }

    /// The next request's service time and whether it fails.
    fn draw(&mut self) -> (Micros, bool) {
        let service = match (&self.lognormal, &self.exponential) {
            (Some(lognormal), _) => lognormal.sample(&mut self.rng),
            (None, Some(exp)) => exp.sample(&mut self.rng),
            (None, None) => self.mean as f64,
        };
        let fails = self.fail > 0.0 && self.fail_rng.random::<f64>() < self.fail;
        ((service.round() as Micros).max(1), fails)
    }
}

/// Runs `scenario` with `gates` in front of the server, one per client (see
/// [`Scenario::clients`]; a client without a gate of its own goes through the last one).
pub fn simulate<G: Gate>(scenario: &Scenario, gates: &mut [G]) -> Run {
    let server = &scenario.server;
    let end = scenario.duration().div_ceil(SECOND) * SECOND;
    let mut sources = Sources::new(scenario);
    let mut work = Work::new(server, scenario.seed);
    let last_gate = gates.len().saturating_sub(1);
    let errors = server.can_fail();

    let mut events = Events {
        heap: BinaryHeap::new(),
        seq: 0,
    };
    for second in 1..=end / SECOND {
        events.push(second * SECOND, What::Tick);
    }
    for (t, workers) in server.changes() {
        events.push(*t, What::Workers(*workers));
    }
    for index in 0..sources.loads.len() {
        if let Some(t) = sources.next(index) {
            events.push(t, What::Arrival(index));
        }
    }

    let mut requests: Vec<Request<G::Ticket>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut queue: VecDeque<usize> = VecDeque::new();
    let mut workers = server.workers();
    let mut busy: u32 = 0;
    let mut in_flight: u32 = 0;
    let mut tally = Tally::default();
    let mut all_latencies: Vec<Micros> = Vec::new();
    let settle = settling_span(server);
    let mut settled: Vec<Micros> = Vec::new();
    let mut seconds = Vec::with_capacity(usize::try_from(end / SECOND).unwrap_or(0));

    while let Some(Event { t: now, what, .. }) = events.heap.pop() {
        match what {
            What::Tick => {
                let limits: Vec<Option<u32>> = gates.iter().map(Gate::limit).collect();
                let mut second = close_second(now, &limits, in_flight, &mut tally);
                second.errors = second.errors.filter(|_| errors);
                seconds.push(second);
                if now >= end {
                    break;
                }
            }
            What::Workers(count) => {
                workers = count;
                while busy < workers {
                    let Some(slot) = queue.pop_front() else { break };
                    busy += 1;
                    events.push(now + requests[slot].service, What::Answer(slot));
                }
            }
            What::Arrival(index) => {
                if let Some(t) = sources.next(index) {
                    events.push(t, What::Arrival(index));
                }
                tally.arrivals += 1;
                let (service, fails) = work.draw();
                let client = sources.client(index).min(last_gate);
                let Some(gate) = gates.get_mut(client) else {
                    continue;
                };
                let Some(ticket) = gate.try_admit(now) else {
                    tally.rejected += 1;
                    continue;
                };
                in_flight += 1;
                let full =
                    busy >= workers && server.queue().is_some_and(|q| queue.len() >= q as usize);
                let request = Request {
                    client,
                    arrival: now,
                    service,
                    error: fails || full,
                    rejected: full,
                    ticket: Some(ticket),
                    answered: false,
                    gave_up: false,
                };
                let slot = match free.pop() {
                    Some(slot) => {
                        requests[slot] = request;
                        slot
                    }
                    None => {
                        requests.push(request);
                        requests.len() - 1
                    }
                };
                events.push(now + scenario.client_timeout, What::GiveUp(slot));
                if full {
                    events.push(now + server.reject(), What::Answer(slot));
                } else if busy < workers {
                    busy += 1;
                    events.push(now + service, What::Answer(slot));
                } else {
                    queue.push_back(slot);
                }
            }
            What::Answer(slot) => {
                in_flight -= 1;
                let request = &mut requests[slot];
                let held_worker = !request.rejected;
                request.answered = true;
                let latency = now - request.arrival;
                let outcome = if request.error {
                    tally.errors += 1;
                    Outcome::Dropped
                } else {
                    tally.latencies.push(latency);
                    all_latencies.push(latency);
                    if settle.is_some_and(|(from, to)| (from..to).contains(&now)) {
                        settled.push(latency);
                    }
                    if request.gave_up {
                        Outcome::Timeout
                    } else {
                        tally.goodput += 1;
                        Outcome::Ok
                    }
                };
                if request.gave_up {
                    // Its slot waited only for this answer.
                    free.push(slot);
                }
                if let (Some(ticket), Some(gate)) =
                    (request.ticket.take(), gates.get_mut(request.client))
                {
                    gate.finish(now, ticket, outcome);
                }
                if held_worker {
                    busy -= 1;
                    if busy < workers {
                        if let Some(next) = queue.pop_front() {
                            busy += 1;
                            events.push(now + requests[next].service, What::Answer(next));
                        }
                    }
                }
            }
            What::GiveUp(slot) => {
                let request = &mut requests[slot];
                if request.answered {
                    free.push(slot);
                } else {
                    // The server does not know: the request stays queued, and its work is
                    // wasted when it is done. This is how an unlimited server collapses.
                    request.gave_up = true;
                    tally.timed_out += 1;
                }
            }
        }
    }
    Run {
        seconds,
        p50_ms: percentile_ms(&mut all_latencies, 0.5),
        p99_ms: percentile_ms(&mut all_latencies, 0.99),
        settled_p99_ms: percentile_ms(&mut settled, 0.99),
    }
}

/// From 10 s after the first drop of the workers to half or less to the next change (or for
/// ever): when a limit should have drained the queue the drop left.
fn settling_span(server: &ServerSpec) -> Option<(Micros, Micros)> {
    let mut workers = server.workers();
    let changes = server.changes();
    let index = changes.iter().position(|(_, w)| {
        let dropped = *w * 2 <= workers;
        workers = *w;
        dropped
    })?;
    let from = changes[index].0.saturating_add(10 * SECOND);
    let to = changes.get(index + 1).map_or(Micros::MAX, |(t, _)| *t);
    Some((from, to))
}

/// The second ending at `now`; `errors` is always filled in (the caller drops it for a server
/// that cannot fail).
fn close_second(now: Micros, limits: &[Option<u32>], in_flight: u32, tally: &mut Tally) -> Second {
    let mut done = std::mem::take(tally);
    // The vector's memory is reused for the next second.
    let second = Second {
        t: now / SECOND,
        limit: limits.first().copied().flatten(),
        limits: if limits.len() > 1 {
            limits.to_vec()
        } else {
            Vec::new()
        },
        in_flight,
        p50_ms: percentile_ms(&mut done.latencies, 0.5),
        p99_ms: percentile_ms(&mut done.latencies, 0.99),
        goodput: done.goodput,
        rejected: done.rejected,
        timed_out: done.timed_out,
        errors: Some(done.errors),
        arrivals: done.arrivals,
    };
    done.latencies.clear();
    tally.latencies = done.latencies;
    second
}

/// The nearest-rank percentile `p` of `latencies`, in milliseconds (reorders them).
fn percentile_ms(latencies: &mut [Micros], p: f64) -> Option<f64> {
    if latencies.is_empty() {
        return None;
    }
    let rank = ((p * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len());
    let (_, value, _) = latencies.select_nth_unstable(rank - 1);
    Some(*value as f64 / 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(server: &str, traffic: &str, timeout: Micros) -> Result<Scenario, String> {
        Ok(Scenario {
            server: ServerSpec::parse(server)?,
            traffic: TrafficSpec::parse(traffic)?,
            loads: Vec::new(),
            client_timeout: timeout,
            seed: 1,
            limits: None,
        })
    }

    /// A gate with a fixed limit and a record of every outcome.
    struct Counting {
        limit: u32,
        in_flight: u32,
        outcomes: Vec<(Micros, Outcome)>,
    }

    impl Gate for Counting {
        type Ticket = Micros;

        fn try_admit(&mut self, now: Micros) -> Option<Micros> {
            (self.in_flight < self.limit).then(|| {
                self.in_flight += 1;
                now
            })
        }

        fn finish(&mut self, now: Micros, start: Micros, outcome: Outcome) {
            self.in_flight -= 1;
            self.outcomes.push((now - start, outcome));
        }

        fn limit(&self) -> Option<u32> {
            Some(self.limit)
        }
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut values: Vec<Micros> = (1..=100).rev().map(|ms| ms * 1000).collect();
        assert_eq!(percentile_ms(&mut values, 0.5), Some(50.0));
        assert_eq!(percentile_ms(&mut values, 0.99), Some(99.0));
        assert_eq!(percentile_ms(&mut [7_500], 0.99), Some(7.5));
        assert_eq!(percentile_ms(&mut [], 0.5), None);
    }

    #[test]
    fn every_arrival_is_accounted_for() -> Result<(), String> {
        // 2x overload with a limit: every arrival is rejected, answered in time, timed out,
        // or still in flight at the end.
        let scenario = scenario(
            "mmc:workers=4,service=10ms",
            "poisson:rate=800/s,duration=20s",
            100_000,
        )?;
        let mut gate = Counting {
            limit: 12,
            in_flight: 0,
            outcomes: Vec::new(),
        };
        let run = simulate(&scenario, std::slice::from_mut(&mut gate));
        assert_eq!(run.seconds.len(), 20);
        let sum = |f: fn(&Second) -> u64| run.seconds.iter().map(f).sum::<u64>();
        let last = run.seconds.last().map_or(0, |s| u64::from(s.in_flight));
        let late = gate
            .outcomes
            .iter()
            .filter(|(_, o)| *o == Outcome::Timeout)
            .count() as u64;
        // Timed-out clients are either answered late or still in flight at the end.
        assert!(sum(|s| s.timed_out) >= late);
        assert!(sum(|s| s.timed_out) <= late + last);
        assert_eq!(
            sum(|s| s.arrivals),
            sum(|s| s.rejected) + sum(|s| s.goodput) + late + last
        );
        // Each answer's latency decides its outcome, the client's wait included.
        for (latency, outcome) in &gate.outcomes {
            assert_eq!(*outcome == Outcome::Ok, *latency <= 100_000, "{latency}");
        }
        // Never more in flight than the limit, and the server kept busy: near 400/s.
        assert!(run.seconds.iter().all(|s| s.in_flight <= 12));
        let goodput = run.goodput() as f64 / 20.0;
        assert!((360.0..=420.0).contains(&goodput), "{goodput}");
        Ok(())
    }

    #[test]
    fn a_full_queue_rejects_at_once_without_a_worker() -> Result<(), String> {
        // Ten at once on one worker with room for two: one served, two queued, seven turned
        // away after the 1 ms rejection, as errors, none of them holding the worker.
        let scenario = scenario(
            "mmc:workers=1,service=10ms,queue=2,reject=1ms",
            "burst:size=10,every=10s,duration=1s",
            10 * SECOND,
        )?;
        let mut gate = Counting {
            limit: 100,
            in_flight: 0,
            outcomes: Vec::new(),
        };
        let run = simulate(&scenario, std::slice::from_mut(&mut gate));
        let dropped: Vec<_> = gate
            .outcomes
            .iter()
            .filter(|(_, o)| *o == Outcome::Dropped)
            .collect();
        assert_eq!(dropped.len(), 7);
        assert!(dropped.iter().all(|(latency, _)| *latency == 1_000));
        assert_eq!(run.seconds[0].errors, Some(7));
        assert_eq!(run.seconds[0].goodput, 3);
        // Errors are not answers: the latencies are the three served ones.
        assert!(run.p50_ms.is_some_and(|p| p > 1.0));
        Ok(())
    }

    #[test]
    fn a_lone_request_takes_its_service_time() -> Result<(), String> {
        // One request at t = 0 on an idle server: answered after its own service time, which
        // is what the run reports as both percentiles.
        let scenario = scenario(
            "mmc:workers=1,service=50ms",
            "burst:size=1,every=10s,duration=1s",
            10 * SECOND,
        )?;
        let mut gate = Counting {
            limit: 1,
            in_flight: 0,
            outcomes: Vec::new(),
        };
        let run = simulate(&scenario, std::slice::from_mut(&mut gate));
        let [(latency, Outcome::Ok)] = gate.outcomes[..] else {
            return Err(format!("{:?}", gate.outcomes));
        };
        assert_eq!(run.p50_ms, Some(latency as f64 / 1e3));
        assert_eq!(run.seconds[0].goodput, 1);
        assert_eq!(run.seconds[0].arrivals, 1);
        Ok(())
    }
}
