//! Batching of one-limit decisions on a single Redis server: the calls that queue up while
//! earlier ones are in flight go to Redis together, in one call of `lua/batch.lua`, which
//! decides each, in the order they were queued, exactly as its own call would. Calling a Redis
//! Function costs the server about as much as the work of a decision, so under load a batch
//! nearly halves Redis's time per decision. A call that finds a free slot goes out at once,
//! alone, through its own entry point: batching never makes a quiet limiter wait for a batch
//! to fill.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Value};
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::compact::Compact;
use crate::connection::Link;
use crate::error::RedisLimitError;
use sluicegate::store::Now;

use crate::reply::{is_error_reply, script_error};
use crate::scripts::{Entry, OneEntry};

/// Calls a batcher keeps in flight at once. While they are out, new decisions queue up and
/// leave together in the next one. With three, Redis has one call to run while the client
/// turns another round and the third waits: at 64 decisions in flight that gave 10% more
/// decisions per second than two (batches of 22 against 30), and four no more than three.
const CALLS_IN_FLIGHT: usize = 3;

/// Values per decision of an op other than a check in a batch's flat reply (`lua/batch.lua`):
/// its entry point's reply after the time. An error is padded to as long. A check takes one
/// value or three ([`CheckReply`]).
const FULL_REPLY_LEN: usize = 5;

/// A check's verdict in a batch's reply: allowed (else the retry in µs, or denied for good).
const VERDICT_ALLOWED: i64 = -1;

/// One decision of a one-limit entry point.
#[derive(Debug)]
pub(crate) struct OneCall {
    pub(crate) entry: OneEntry,
    pub(crate) key: Vec<u8>,
    pub(crate) now: Now,
    pub(crate) op: &'static str,
    pub(crate) permits: u64,
    /// The limit's parameters, joined by `:` (see `one_params` in `lua/prelude.lua`).
    pub(crate) params: Vec<u8>,
    /// What a check's one-value reply stands for ([`Compact`]).
    pub(crate) compact: Compact,
}

impl OneCall {
    /// Its own entry point's reply, from a call of its own: `[now, allowed, remaining, reset,
    /// retry, wait]`, or an error's.
    pub(crate) async fn send_alone(&self, store: &Link) -> Answer {
        let reply = store
            .call(self.entry.entry(), |cmd| {
                cmd.arg(1).arg(&self.key);
                self.fill_args(cmd);
            })
            .await?;
        self.widen_alone(reply)
    }

    /// A check's reply of two values, its time and one value ([`Compact`]), as the six its
    /// entry point answers otherwise; any other reply as it is.
    fn widen_alone(&self, reply: Vec<Value>) -> Answer {
        let [Value::Int(now), Value::Int(value)] = reply[..] else {
            return Ok(reply);
        };
        self.is_check()
            .then(|| self.compact.widen(now, value, self.permits))
            .flatten()
            .ok_or_else(|| {
                RedisLimitError::UnexpectedReply(format!(
                    "the one value {value} at {now} in reply to a {} of {}",
                    self.op, self.permits
                ))
            })
    }

    /// The arguments of a run of `len` decisions like this one in a batch.
    fn fill_run(&self, cmd: &mut Cmd, len: usize) {
        cmd.arg(self.entry.batch_code());
        self.fill_args(cmd);
        cmd.arg(len);
    }

    /// Whether a batch's reply answers this decision as a check ([`CheckReply`]).
    fn is_check(&self) -> bool {
        self.op == "check"
    }

    /// Whether the two differ in their keys alone, so one run of a batch holds both.
    fn same_args(&self, other: &OneCall) -> bool {
        self.entry == other.entry
            && self.now == other.now
            && self.op == other.op
            && self.permits == other.permits
            && self.params == other.params
    }

    fn fill_args(&self, cmd: &mut Cmd) {
        match self.now {
            Now::Store => cmd.arg(""),
            Now::At(micros) => cmd.arg(micros),
        };
        cmd.arg(self.op).arg(self.permits).arg(&self.params);
    }
}

pub(crate) type Answer = Result<Vec<Value>, RedisLimitError>;

struct Queued {
    call: OneCall,
    answer: oneshot::Sender<Answer>,
}

/// The sending side of a store's batching task; the task ends when every clone is dropped.
#[derive(Debug, Clone)]
pub(crate) struct Batcher {
    queue: mpsc::UnboundedSender<Queued>,
}

impl Batcher {
    /// Starts the task sending batches over `store`'s link (at most `max_batch` decisions each) on the
    /// current tokio runtime. `store` must not batch itself.
    pub(crate) fn start(store: Link, max_batch: usize) -> Batcher {
        let (queue, waiting) = mpsc::unbounded_channel();
        tokio::spawn(send_batches(store, waiting, max_batch.max(1)));
        Batcher { queue }
    }

    /// The reply its entry point would give `call`, within `timeout` (queueing included); or
    /// `call` back, unsent, if the task has stopped (the runtime it ran on has shut down),
    /// for the caller to send alone.
    pub(crate) async fn call(&self, call: OneCall, timeout: Duration) -> Result<Answer, OneCall> {
        let (answer, reply) = oneshot::channel();
        if let Err(unsent) = self.queue.send(Queued { call, answer }) {
            return Err(unsent.0.call);
        }
        Ok(match tokio::time::timeout(timeout, reply).await {
            Ok(Ok(answer)) => answer,
            // Dropped unanswered: the task stopped with the call queued or in flight.
            Ok(Err(_)) => Err(RedisLimitError::Stopped),
            Err(_) => Err(RedisLimitError::Timeout(timeout)),
        })
    }
}

/// Takes the next batch when a call slot is free: what is queued by then, up to `max_batch`
/// decisions whose callers still wait. Callers that timed out are dropped as they come, so
/// while Redis stalls the queue holds at most about a timeout's worth of calls.
async fn send_batches(store: Link, mut waiting: mpsc::UnboundedReceiver<Queued>, max_batch: usize) {
    let slots = Arc::new(Semaphore::new(CALLS_IN_FLIGHT));
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let Some(first) = waiting.recv().await else {
            return;
        };
        // Lets the tasks that are ready to run (those the last reply woke, say) ask first, so
        // that they join this batch: tokio runs the task woken last first, and that is often
        // this one, woken by the slot the reply freed.
        tokio::task::yield_now().await;
        let mut batch = Vec::new();
        let mut next = Some(first);
        while let Some(queued) = next {
            if !queued.answer.is_closed() {
                batch.push(queued);
            }
            next = if batch.len() < max_batch {
                waiting.try_recv().ok()
            } else {
                None
            };
        }
        if batch.is_empty() {
            continue;
        }
        let store = store.clone();
        tokio::spawn(async move {
            send(&store, batch).await;
            drop(slot);
        });
    }
}

async fn send(store: &Link, mut batch: Vec<Queued>) {
    if batch.len() == 1
        && let Some(only) = batch.pop()
    {
        let answer = only.call.send_alone(store).await;
        let _ = only.answer.send(answer);
        return;
    }
    // Each run's decisions.
    let runs: Vec<usize> = batch
        .chunk_by(|a, b| a.call.same_args(&b.call))
        .map(<[Queued]>::len)
        .collect();
    let replies = store
        .call(Entry::Batch, |cmd| {
            cmd.arg(batch.len());
            for queued in &batch {
                cmd.arg(&queued.call.key);
            }
            let mut first = 0;
            for &len in &runs {
                batch[first].call.fill_run(cmd, len);
                first += len;
            }
        })
        .await
        .and_then(|replies| split_replies(replies, &batch, &runs));
    match replies {
        Ok(replies) => {
            for (queued, reply) in batch.into_iter().zip(replies) {
                let _ = queued.answer.send(Ok(reply));
            }
        }
        Err(error) => {
            for queued in batch {
                let _ = queued.answer.send(Err(error.clone()));
            }
        }
    }
}

/// The first value of a check's reply in a batch, and so how many follow.
enum CheckReply {
    /// A check in one value ([`Compact`]).
    Compact(i64),
    /// `-1 - remaining`, then reset and verdict.
    Full(i64),
    /// `"ERR"`, then kind and detail.
    Error,
}

impl CheckReply {
    fn of(first: &Value) -> Option<CheckReply> {
        match first {
            Value::Int(value) if *value >= 0 => Some(CheckReply::Compact(*value)),
            Value::Int(value) => Some(CheckReply::Full(*value)),
            other if is_error_reply(other) => Some(CheckReply::Error),
            _ => None,
        }
    }
}

/// Each decision's reply, as its entry point would give it alone, from a batch's flat reply
/// to `batch` in `runs` (each run's decisions); the error the reply stands for if the whole
/// call failed (`{"ERR", kind, detail}`) or the reply is not one to `batch`.
fn split_replies(
    replies: Vec<Value>,
    batch: &[Queued],
    runs: &[usize],
) -> Result<Vec<Vec<Value>>, RedisLimitError> {
    if replies.first().is_some_and(is_error_reply) {
        return Err(script_error(&replies));
    }
    let unexpected = |replies: &[Value]| {
        let decisions: usize = runs.iter().sum();
        RedisLimitError::UnexpectedReply(format!(
            "{} values in reply to a batch of {decisions} decisions in {} runs",
            replies.len(),
            runs.len(),
        ))
    };
    let mut answers = Vec::with_capacity(batch.len());
    let mut values = replies.iter();
    let mut decisions = batch.iter();
    for &len in runs {
        let now = values.next().ok_or_else(|| unexpected(&replies))?;
        for queued in decisions.by_ref().take(len) {
            let reply = if queued.call.is_check() {
                check_reply(now, &mut values, queued.call.compact, queued.call.permits)
            } else {
                full_reply(now, &mut values)
            };
            answers.push(reply.ok_or_else(|| unexpected(&replies))?);
        }
    }
    if values.next().is_some() {
        return Err(unexpected(&replies));
    }
    Ok(answers)
}

/// A reply of another op at `now`, read from `values`, as its entry point answers it alone:
/// `[now, allowed, remaining, reset, retry, wait]`, or an error's `["ERR", kind, detail, 0,
/// 0]` (its time left out); nothing if `values` does not hold one.
fn full_reply<'a>(now: &Value, values: &mut impl Iterator<Item = &'a Value>) -> Option<Vec<Value>> {
    let mut reply = Vec::with_capacity(FULL_REPLY_LEN + 1);
    reply.push(now.clone());
    reply.extend(values.by_ref().take(FULL_REPLY_LEN).cloned());
    if reply.len() != FULL_REPLY_LEN + 1 {
        return None;
    }
    if is_error_reply(&reply[1]) {
        reply.remove(0);
    }
    Some(reply)
}

/// A check's reply at `now`, read from `values`, as its entry point answers it alone:
/// `[now, allowed, remaining, reset, retry, wait]` (a check never waits), or an error's
/// `["ERR", kind, detail]`; nothing if `values` does not hold one.
fn check_reply<'a>(
    now: &Value,
    values: &mut impl Iterator<Item = &'a Value>,
    compact: Compact,
    permits: u64,
) -> Option<Vec<Value>> {
    let first = values.next()?;
    match CheckReply::of(first)? {
        CheckReply::Compact(value) => {
            let Value::Int(now) = now else {
                return None;
            };
            compact.widen(*now, value, permits)
        }
        CheckReply::Full(value) => {
            let (reset, verdict) = (values.next()?.clone(), values.next()?.clone());
            let (allowed, retry) = match verdict {
                Value::Int(VERDICT_ALLOWED) => (Value::Int(1), Value::Int(-1)),
                Value::Int(retry) if retry >= 0 => (Value::Int(0), Value::Int(retry)),
                Value::Int(_) => (Value::Int(0), Value::Int(-1)),
                // Left where `allowed` goes, for the parse to name.
                other => (other, Value::Int(-1)),
            };
            let remaining = Value::Int(-1 - value);
            Some(vec![
                now.clone(),
                allowed,
                remaining,
                reset,
                retry,
                Value::Int(0),
            ])
        }
        CheckReply::Error => Some(vec![
            first.clone(),
            values.next()?.clone(),
            values.next()?.clone(),
        ]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(values: &[i64]) -> Vec<Value> {
        values.iter().copied().map(Value::Int).collect()
    }

    /// A check's reply (of one permit) read from `values` at time `now`, and what was left
    /// unread.
    fn read(now: i64, values: &[Value], compact: Compact) -> (Option<Vec<Value>>, usize) {
        let mut rest = values.iter();
        let reply = check_reply(&Value::Int(now), &mut rest, compact, 1);
        (reply, rest.count())
    }

    #[test]
    fn one_value_of_a_fixed_window_is_what_is_left_until_the_window_ends() {
        let window = Compact::Window {
            window_us: 1_000_000,
        };
        // Allowed with 2 left: 2 doubled.
        let (reply, left) = read(1_500_000, &ints(&[4, 9]), window);
        assert_eq!(reply, Some(ints(&[1_500_000, 1, 2, 500_000, -1, 0])));
        assert_eq!(left, 1, "one value read");
        // At a window's very start the whole window is left.
        let (reply, _) = read(3_000_000, &ints(&[0]), window);
        assert_eq!(reply, Some(ints(&[3_000_000, 1, 0, 1_000_000, -1, 0])));
        // Denied with none left (doubled, plus one): retry when the window ends.
        let (reply, _) = read(1_500_000, &ints(&[1]), window);
        assert_eq!(reply, Some(ints(&[1_500_000, 0, 0, 500_000, 500_000, 0])));
    }

    #[test]
    fn one_value_of_a_bucket_is_its_reset_and_what_is_left_follows() {
        let bucket = Compact::Bucket {
            interval: 250_000,
            tolerance: 500_000,
        };
        let (reply, _) = read(7, &ints(&[500_000]), bucket);
        assert_eq!(reply, Some(ints(&[7, 1, 1, 250_000, -1, 0])));
        let (reply, _) = read(7, &ints(&[499_998]), bucket);
        assert_eq!(
            reply,
            Some(ints(&[7, 1, 1, 249_999, -1, 0])),
            "rounded down"
        );
        let (reply, _) = read(7, &ints(&[2]), bucket);
        assert_eq!(
            reply,
            Some(ints(&[7, 1, 1, 1, -1, 0])),
            "a microsecond short of two"
        );
        // Denied at a debt of 400 ms: none left, a retry once a permit's interval fits; for
        // two permits, once both do.
        let (reply, _) = read(7, &ints(&[800_001]), bucket);
        assert_eq!(reply, Some(ints(&[7, 0, 0, 400_000, 150_000, 0])));
        let two = check_reply(&Value::Int(7), &mut ints(&[800_001]).iter(), bucket, 2);
        assert_eq!(two, Some(ints(&[7, 0, 0, 400_000, 400_000, 0])));
        // One value where none can be is no reply.
        assert_eq!(read(7, &ints(&[2]), Compact::Never).0, None);
        assert_eq!(read(-1, &ints(&[2]), bucket).0, None);
    }

    #[test]
    fn three_values_carry_what_is_left_below_zero_and_the_verdict() {
        let never = Compact::Never;
        // Allowed, 2 left, reset 7 µs.
        let (reply, left) = read(5, &ints(&[-3, 7, -1, 4]), never);
        assert_eq!(reply, Some(ints(&[5, 1, 2, 7, -1, 0])));
        assert_eq!(left, 1, "three values read");
        // Denied for now (retry in 9 µs), and for good.
        assert_eq!(
            read(5, &ints(&[-1, 7, 9]), never).0,
            Some(ints(&[5, 0, 0, 7, 9, 0]))
        );
        assert_eq!(
            read(5, &ints(&[-1, 7, -2]), never).0,
            Some(ints(&[5, 0, 0, 7, -1, 0]))
        );
        // Cut short, or a first value of no kind, is no reply.
        assert_eq!(read(5, &ints(&[-3, 7]), never).0, None);
        assert_eq!(read(5, &[Value::Nil], never).0, None);
    }

    #[test]
    fn a_call_alone_widens_a_checks_one_value_and_nothing_else() {
        let call = |op: &'static str| OneCall {
            entry: OneEntry::FixedWindow,
            key: b"k".to_vec(),
            now: Now::Store,
            op,
            permits: 1,
            params: Vec::new(),
            compact: Compact::Window {
                window_us: 1_000_000,
            },
        };
        let widened = call("check").widen_alone(ints(&[1_500_000, 4])).ok();
        assert_eq!(widened, Some(ints(&[1_500_000, 1, 2, 500_000, -1, 0])));
        let full = ints(&[1_500_000, 1, 2, 500_000, -1, 0]);
        assert_eq!(call("check").widen_alone(full.clone()).ok(), Some(full));
        // Only a check answers in one value.
        assert!(matches!(
            call("charge").widen_alone(ints(&[1_500_000, 4])),
            Err(RedisLimitError::UnexpectedReply(_))
        ));
    }

    #[test]
    fn an_error_is_its_three_values_without_the_time() {
        let error = [
            Value::BulkString(b"ERR".to_vec()),
            Value::BulkString(b"corrupt".to_vec()),
            Value::BulkString(b"k".to_vec()),
        ];
        let (reply, _) = read(5, &error, Compact::Never);
        assert_eq!(reply, Some(error.to_vec()));
    }
}
