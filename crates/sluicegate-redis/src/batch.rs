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

/// Values per check in a batch's flat reply (`lua/batch.lua`), after its run's time:
/// remaining, reset and verdict. An error is as long.
const CHECK_REPLY_LEN: usize = 3;
/// Values per decision of any other op in a batch's flat reply: its entry point's reply after
/// the time. An error is padded to as long.
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
}

impl OneCall {
    /// Its own entry point's reply, from a call of its own.
    pub(crate) async fn send_alone(&self, store: &Link) -> Answer {
        store
            .call(self.entry.entry(), |cmd| {
                cmd.arg(1).arg(&self.key);
                self.fill_args(cmd);
            })
            .await
    }

    /// The arguments of a run of `len` decisions like this one in a batch.
    fn fill_run(&self, cmd: &mut Cmd, len: usize) {
        cmd.arg(self.entry.batch_code());
        self.fill_args(cmd);
        cmd.arg(len);
    }

    /// How many values a batch's reply holds for this decision.
    fn reply_len(&self) -> usize {
        if self.op == "check" {
            CHECK_REPLY_LEN
        } else {
            FULL_REPLY_LEN
        }
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
    // Each run's decisions, and the values the reply holds for each.
    let runs: Vec<(usize, usize)> = batch
        .chunk_by(|a, b| a.call.same_args(&b.call))
        .map(|run| (run.len(), run[0].call.reply_len()))
        .collect();
    let replies = store
        .call(Entry::Batch, |cmd| {
            cmd.arg(batch.len());
            for queued in &batch {
                cmd.arg(&queued.call.key);
            }
            let mut first = 0;
            for &(len, _) in &runs {
                batch[first].call.fill_run(cmd, len);
                first += len;
            }
        })
        .await
        .and_then(|replies| check_length(replies, &runs));
    match replies {
        Ok(replies) => {
            let (mut values, mut batch) = (replies.into_iter(), batch.into_iter());
            for (len, width) in runs {
                let now = values.next().unwrap_or(Value::Nil);
                for queued in batch.by_ref().take(len) {
                    let mut reply = Vec::with_capacity(FULL_REPLY_LEN + 1);
                    reply.push(now.clone());
                    reply.extend(values.by_ref().take(width));
                    if reply.get(1).is_some_and(is_error_reply) {
                        // An error reply is the entry point's own, without a time.
                        reply.remove(0);
                    } else if width == CHECK_REPLY_LEN {
                        widen_check(&mut reply);
                    }
                    let _ = queued.answer.send(Ok(reply));
                }
            }
        }
        Err(error) => {
            for queued in batch {
                let _ = queued.answer.send(Err(error.clone()));
            }
        }
    }
}

/// A check's `[now, remaining, reset, verdict]` as its entry point answers it: `[now, allowed,
/// remaining, reset, retry, wait]`, a check never waiting. A verdict that is not a number is
/// left where `allowed` goes, for the parse to name.
fn widen_check(reply: &mut Vec<Value>) {
    let Some(verdict) = reply.pop() else {
        return;
    };
    let (allowed, retry) = match verdict {
        Value::Int(VERDICT_ALLOWED) => (Value::Int(1), Value::Int(-1)),
        Value::Int(retry) if retry >= 0 => (Value::Int(0), Value::Int(retry)),
        Value::Int(_) => (Value::Int(0), Value::Int(-1)),
        other => (other, Value::Int(-1)),
    };
    reply.insert(1, allowed);
    reply.extend([retry, Value::Int(0)]);
}

/// The batch's reply if it holds a time per run and a reply per decision (`runs`: each
/// run's decisions and their width); the error it stands for if the whole call failed
/// (`{"ERR", kind, detail}`).
fn check_length(replies: Vec<Value>, runs: &[(usize, usize)]) -> Answer {
    let expected: usize = runs.iter().map(|&(len, width)| 1 + len * width).sum();
    if replies.len() == expected {
        return Ok(replies);
    }
    let decisions: usize = runs.iter().map(|&(len, _)| len).sum();
    let runs = runs.len();
    if replies.first().is_some_and(is_error_reply) {
        return Err(script_error(&replies));
    }
    Err(RedisLimitError::UnexpectedReply(format!(
        "{} values in reply to a batch of {decisions} decisions in {runs} runs",
        replies.len(),
    )))
}
