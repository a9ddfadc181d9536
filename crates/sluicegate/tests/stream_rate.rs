//! Throttle and debounce on hand-written timelines and random ones, on a manual clock with
//! tokio's time paused: every test moves both by hand, so nothing here sleeps for real or
//! depends on how fast the machine is.
#![cfg(feature = "stream")]
#![allow(clippy::unwrap_used)]

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use futures_core::Stream;
use futures_util::StreamExt;
use proptest::prelude::*;
use sluicegate::stream::{Debounce, Edge, Throttle};
use sluicegate::{Clock, ManualClock};

const MS: Duration = Duration::from_millis(1);

/// Moves the clock that decides and tokio's timer that wakes, together.
async fn step(clock: &ManualClock, by: Duration) {
    clock.advance(by);
    tokio::time::advance(by).await;
}

/// Moves both clocks to `ms` a millisecond at a time, letting woken tasks run at each.
async fn step_to(clock: &ManualClock, ms: u64) {
    while clock.now() < ms * 1000 {
        step(clock, MS).await;
        tokio::task::yield_now().await;
    }
    tokio::task::yield_now().await;
}

/// A waker that records whether it was woken.
#[derive(Default)]
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Flag {
    fn take(&self) -> bool {
        self.0.swap(false, Ordering::SeqCst)
    }
}

#[derive(Default)]
struct Feed {
    queue: VecDeque<u32>,
    closed: bool,
    waker: Option<Waker>,
}

/// The input: items the test pushes, pending when none is queued, ended once closed.
#[derive(Clone, Default)]
struct Input(Arc<Mutex<Feed>>);

impl Input {
    fn push(&self, item: u32) {
        let mut feed = self.0.lock().unwrap();
        feed.queue.push_back(item);
        if let Some(waker) = feed.waker.take() {
            waker.wake();
        }
    }

    fn close(&self) {
        let mut feed = self.0.lock().unwrap();
        feed.closed = true;
        if let Some(waker) = feed.waker.take() {
            waker.wake();
        }
    }
}

impl Stream for Input {
    type Item = u32;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<u32>> {
        let mut feed = self.0.lock().unwrap();
        match feed.queue.pop_front() {
            Some(item) => Poll::Ready(Some(item)),
            None if feed.closed => Poll::Ready(None),
            None => {
                feed.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// What came out of a timeline: `(ms, item)` in order, and when the output ended.
#[derive(Debug, PartialEq, Eq)]
struct Output {
    emitted: Vec<(u64, u32)>,
    ended_at: Option<u64>,
}

/// Plays `events` (`(ms, item)`, in time order) into the adapter `make` builds, closing the
/// input at `close_at`, one millisecond at a time up to `until`; at each millisecond it
/// pushes that time's items, then polls until the adapter has nothing more to say.
async fn play<S>(
    make: impl FnOnce(Input, ManualClock) -> S,
    events: &[(u64, u32)],
    close_at: u64,
    until: u64,
) -> Output
where
    S: Stream<Item = u32> + Unpin,
{
    let clock = ManualClock::new(0);
    let input = Input::default();
    let mut adapter = make(input.clone(), clock.clone());
    let flag = Arc::new(Flag::default());
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    let mut emitted = Vec::new();
    let mut next = events.iter().peekable();
    for now in 0..=until {
        if now > 0 {
            step(&clock, MS).await;
        }
        while let Some(&(_, item)) = next.next_if(|(at, _)| *at == now) {
            input.push(item);
        }
        if now == close_at {
            input.close();
        }
        loop {
            flag.take();
            match Pin::new(&mut adapter).poll_next(&mut cx) {
                Poll::Ready(Some(item)) => emitted.push((now, item)),
                Poll::Ready(None) => {
                    return Output {
                        emitted,
                        ended_at: Some(now),
                    };
                }
                // Pending after waking itself is a yield: it has more to do at this time.
                Poll::Pending if flag.take() => {}
                Poll::Pending => break,
            }
        }
    }
    Output {
        emitted,
        ended_at: None,
    }
}

fn throttle(
    edge: Edge,
    interval_ms: u64,
) -> impl FnOnce(Input, ManualClock) -> Throttle<Input, ManualClock> {
    move |input, clock| {
        Throttle::with_clock(input, Duration::from_millis(interval_ms), clock).edge(edge)
    }
}

fn debounce(
    quiet_ms: u64,
    max_wait_ms: Option<u64>,
) -> impl FnOnce(Input, ManualClock) -> Debounce<Input, ManualClock> {
    move |input, clock| {
        let debounce = Debounce::with_clock(input, Duration::from_millis(quiet_ms), clock);
        match max_wait_ms {
            Some(max_wait) => debounce.max_wait(Duration::from_millis(max_wait)),
            None => debounce,
        }
    }
}

fn output(emitted: &[(u64, u32)], ended_at: u64) -> Output {
    Output {
        emitted: emitted.to_vec(),
        ended_at: Some(ended_at),
    }
}

/// Two bursts and a straggler, against a 100 ms interval.
const BURSTS: &[(u64, u32)] = &[(0, 1), (10, 2), (50, 3), (120, 4), (130, 5), (300, 6)];

#[tokio::test(start_paused = true)]
async fn throttle_leading_passes_the_first_of_each_burst() {
    let out = play(throttle(Edge::Leading, 100), BURSTS, 400, 500).await;
    // 2 and 3 fall in 1's interval, 5 in 4's; 6 comes after 4's interval has closed.
    assert_eq!(out, output(&[(0, 1), (120, 4), (300, 6)], 400));
}

#[tokio::test(start_paused = true)]
async fn throttle_trailing_emits_the_last_of_each_interval_at_its_end() {
    let out = play(throttle(Edge::Trailing, 100), BURSTS, 400, 500).await;
    // 1 opens [0, 100) and 3 is its last; emitting 3 opens [100, 200), whose last is 5;
    // [200, 300) sees nothing, so 6 opens a fresh interval and waits it out.
    assert_eq!(out, output(&[(100, 3), (200, 5), (400, 6)], 400));
}

#[tokio::test(start_paused = true)]
async fn throttle_both_edges_is_lodash_default() {
    let out = play(throttle(Edge::Both, 100), BURSTS, 400, 500).await;
    // 6 is alone in its interval: emitted once, on the leading edge.
    assert_eq!(out, output(&[(0, 1), (100, 3), (200, 5), (300, 6)], 400));
}

#[tokio::test(start_paused = true)]
async fn throttle_item_at_an_interval_end_belongs_to_the_next_interval() {
    let events = [(0, 1), (50, 2), (100, 3), (200, 4)];
    let out = play(throttle(Edge::Both, 100), &events, 250, 400).await;
    // At 100, 2 is emitted first (opening [100, 200)), then 3 arrives inside it.
    assert_eq!(out, output(&[(0, 1), (100, 2), (200, 3), (300, 4)], 300));
}

#[tokio::test(start_paused = true)]
async fn throttle_end_of_input_keeps_the_interval_for_the_held_item() {
    let events = [(0, 1), (10, 2)];
    let out = play(throttle(Edge::Both, 100), &events, 20, 200).await;
    assert_eq!(out, output(&[(0, 1), (100, 2)], 100));
    // With nothing held, the output ends with the input.
    let out = play(throttle(Edge::Leading, 100), &events, 20, 200).await;
    assert_eq!(out, output(&[(0, 1)], 20));
}

#[tokio::test(start_paused = true)]
async fn throttle_of_zero_passes_everything() {
    let events = [(0, 1), (0, 2), (3, 3)];
    for edge in [Edge::Leading, Edge::Trailing, Edge::Both] {
        let out = play(throttle(edge, 0), &events, 5, 10).await;
        assert_eq!(out, output(&[(0, 1), (0, 2), (3, 3)], 5), "{edge:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn debounce_emits_after_quiet() {
    let events = [(0, 1), (30, 2), (60, 3), (200, 4), (220, 5)];
    let out = play(debounce(50, None), &events, 400, 500).await;
    assert_eq!(out, output(&[(110, 3), (270, 5)], 400));
}

#[tokio::test(start_paused = true)]
async fn debounce_never_quiet_emits_only_at_the_end() {
    // Every 30 ms, quiet 50 ms: nothing until the input ends, then the last item at once.
    let events: Vec<_> = (0..=10).map(|i| (30 * u64::from(i), i)).collect();
    let out = play(debounce(50, None), &events, 320, 500).await;
    assert_eq!(out, output(&[(320, 10)], 320));
}

#[tokio::test(start_paused = true)]
async fn debounce_max_wait_emits_the_latest_while_never_quiet() {
    let events: Vec<_> = (0..=10).map(|i| (30 * u64::from(i), i)).collect();
    let out = play(debounce(50, Some(100)), &events, 500, 600).await;
    // Bursts start at 0, 120 and 240; each emits its latest item 100 ms in (the last one
    // would be quiet only at 350).
    assert_eq!(out, output(&[(100, 3), (220, 7), (340, 10)], 500));
    // Without a burst, max_wait changes nothing.
    let out = play(debounce(50, Some(100)), &[(0, 1)], 500, 600).await;
    assert_eq!(out, output(&[(50, 1)], 500));
}

#[tokio::test(start_paused = true)]
async fn debounce_max_wait_below_quiet_counts_as_quiet() {
    let events = [(0, 1), (40, 2), (80, 3)];
    let short = play(debounce(50, Some(10)), &events, 300, 400).await;
    let equal = play(debounce(50, Some(50)), &events, 300, 400).await;
    assert_eq!(short, equal);
    assert_eq!(short, output(&[(50, 2), (130, 3)], 300));
}

#[tokio::test(start_paused = true)]
async fn debounce_end_of_input_flushes_at_once() {
    let out = play(debounce(50, None), &[(0, 1), (10, 2)], 20, 100).await;
    assert_eq!(out, output(&[(20, 2)], 20));
}

#[tokio::test(start_paused = true)]
async fn a_pending_item_is_woken_for_by_tokios_timer() {
    let clock = ManualClock::new(0);
    let input = Input::default();
    let mut throttle = Throttle::with_clock(input.clone(), 100 * MS, clock.clone());
    let flag = Arc::new(Flag::default());
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);

    input.push(1);
    input.push(2);
    assert_eq!(
        Pin::new(&mut throttle).poll_next(&mut cx),
        Poll::Ready(Some(1))
    );
    assert_eq!(Pin::new(&mut throttle).poll_next(&mut cx), Poll::Pending);
    flag.take();
    step(&clock, 99 * MS).await;
    assert!(!flag.take(), "woken before the interval's end");
    step(&clock, MS).await;
    assert!(flag.take(), "not woken at the interval's end");
    assert_eq!(
        Pin::new(&mut throttle).poll_next(&mut cx),
        Poll::Ready(Some(2))
    );
}

#[tokio::test(start_paused = true)]
async fn a_task_awaiting_the_adapter_gets_items_at_their_times() {
    let clock = ManualClock::new(0);
    let input = Input::default();
    let debounced = Debounce::with_clock(input.clone(), 50 * MS, clock.clone());
    let consumer = {
        let clock = clock.clone();
        tokio::spawn(async move {
            let mut debounced = debounced;
            let mut seen = Vec::new();
            while let Some(item) = debounced.next().await {
                seen.push((clock.now() / 1000, item));
            }
            (seen, clock.now() / 1000)
        })
    };
    for (at, item) in [(0, 1), (20, 2), (100, 3)] {
        step_to(&clock, at).await;
        input.push(item);
        // Lets the consumer pull it now: an item's time is when the adapter pulls it.
        tokio::task::yield_now().await;
    }
    step_to(&clock, 200).await;
    input.close();
    let (seen, ended) = consumer.await.unwrap();
    assert_eq!(seen, [(70, 2), (150, 3)]);
    assert_eq!(ended, 200);
}

#[tokio::test(start_paused = true)]
async fn ended_adapters_stay_ended() {
    use futures_core::FusedStream;
    let input = Input::default();
    input.push(1);
    input.close();
    let mut debounced = Debounce::with_clock(input, 50 * MS, ManualClock::new(0));
    assert!(!debounced.is_terminated());
    assert_eq!(debounced.next().await, Some(1));
    assert_eq!(debounced.next().await, None);
    assert!(debounced.is_terminated());
    assert_eq!(debounced.next().await, None);
}

/// Arrival times from gaps between items; items are numbered in arrival order.
fn timeline(gaps: &[u64]) -> Vec<(u64, u32)> {
    let mut at = 0;
    (0u32..)
        .zip(gaps)
        .map(|(item, gap)| {
            at += gap;
            (at, item)
        })
        .collect()
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

fn edges() -> impl Strategy<Value = Edge> {
    prop_oneof![Just(Edge::Leading), Just(Edge::Trailing), Just(Edge::Both)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn throttle_never_emits_two_items_closer_than_the_interval(
        edge in edges(),
        interval in 1u64..40,
        gaps in prop::collection::vec(0u64..60, 1..40),
        close_gap in 0u64..60,
    ) {
        let events = timeline(&gaps);
        let last = events.last().map_or(0, |e| e.0);
        let close_at = last + close_gap;
        let out = paused_runtime()
            .block_on(play(throttle(edge, interval), &events, close_at, close_at + interval + 1));

        // Ends, with the input or an interval after it for a held item.
        let ended = out.ended_at.unwrap();
        prop_assert!(ended >= close_at && ended <= close_at.max(last + interval));
        for pair in out.emitted.windows(2) {
            prop_assert!(pair[1].0 - pair[0].0 >= interval, "{:?}", out.emitted);
            // In input order, each item at most once.
            prop_assert!(pair[0].1 < pair[1].1, "{:?}", out.emitted);
        }
        for &(at, item) in &out.emitted {
            prop_assert!(at >= events[item as usize].0);
        }
        // The leading edge passes the first item at once; the trailing edge never loses the
        // last one, even when the input ends before its interval does.
        let first = out.emitted.first().copied();
        if edge != Edge::Trailing {
            prop_assert_eq!(first, Some(events[0]));
        }
        if edge != Edge::Leading {
            prop_assert_eq!(out.emitted.last().map(|e| e.1), Some(events.len() as u32 - 1));
        }
        if edge == Edge::Leading {
            // Leading-only items pass the moment they arrive, or not at all.
            for &(at, item) in &out.emitted {
                prop_assert_eq!(at, events[item as usize].0);
            }
        }
    }

    #[test]
    fn debounce_emits_exactly_the_items_followed_by_quiet(
        quiet in 1u64..40,
        gaps in prop::collection::vec(0u64..60, 1..40),
        close_gap in 0u64..60,
    ) {
        let events = timeline(&gaps);
        let last = events.len() - 1;
        let close_at = events[last].0 + close_gap;
        let out = paused_runtime()
            .block_on(play(debounce(quiet, None), &events, close_at, close_at + quiet + 1));

        // An item is emitted, `quiet` after it arrived, exactly when the next one comes at
        // least `quiet` later: never while items keep coming faster. The last one is
        // emitted when the input ends, if that comes first.
        let expected: Vec<_> = events
            .iter()
            .enumerate()
            .filter(|&(i, &(at, _))| i == last || events[i + 1].0 - at >= quiet)
            .map(|(i, &(at, item))| {
                let due = at + quiet;
                (if i == last { due.min(close_at) } else { due }, item)
            })
            .collect();
        prop_assert_eq!(out, Output { emitted: expected, ended_at: Some(close_at) });
    }

    #[test]
    fn debounce_max_wait_bounds_how_long_an_item_goes_unanswered(
        quiet in 1u64..40,
        extra in 0u64..40,
        gaps in prop::collection::vec(0u64..60, 1..40),
        close_gap in 0u64..100,
    ) {
        let max_wait = quiet + extra;
        let events = timeline(&gaps);
        let close_at = events[events.len() - 1].0 + close_gap;
        let out = paused_runtime()
            .block_on(play(debounce(quiet, Some(max_wait)), &events, close_at, close_at + 1));

        prop_assert_eq!(out.ended_at, Some(close_at));
        for pair in out.emitted.windows(2) {
            prop_assert!(pair[0].1 < pair[1].1, "{:?}", out.emitted);
        }
        for &(at, item) in &events {
            // Within max_wait of any arrival, it or a later item is emitted.
            prop_assert!(
                out.emitted.iter().any(|&(e_at, e_item)| e_item >= item && e_at <= at + max_wait),
                "{item} at {at}: {:?}",
                out.emitted
            );
        }
        for &(at, item) in &out.emitted {
            // Always the latest item: the latest before then when its time comes, or the
            // latest of all when the input ends.
            let before = events.iter().rfind(|e| e.0 < at).map(|e| e.1);
            let until = events.iter().rfind(|e| e.0 <= at).map(|e| e.1);
            prop_assert!(before == Some(item) || until == Some(item), "{item} at {at}");
        }
    }
}
