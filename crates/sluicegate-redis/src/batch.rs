//! Batching of one-limit decisions on a single Redis server: the calls that queue up while
//! earlier ones are in flight go to Redis together, in one call of `lua/batch.lua`, which
//! decides each exactly as its own call would, in order. Calling a Redis Function costs the
//! server about as much as the work of a decision, so under load a batch nearly halves Redis's
//! time per decision. A call that finds a free slot goes out at once, alone, through its own
//! entry point: batching never makes a quiet limiter wait.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Value};
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::error::RedisLimitError;
use crate::limiter::Now;
use crate::scripts::Entry;
use crate::store::RedisStore;

/// Calls a batcher keeps in flight at once. While they are out, new decisions queue up and
/// leave together in the next one; two let the client build a batch while Redis runs the other.
const CALLS_IN_FLIGHT: usize = 2;

/// Values per decision in a batch's flat reply (`lua/batch.lua`): its entry point's reply
/// after the time (one per run), or an error padded to the same length.
const BATCH_REPLY_LEN: usize = 5;

/// One decision of a one-limit entry point (`one_gcra`, `one_fixed_window`).
#[derive(Debug)]
pub(crate) struct OneCall {
    pub(crate) entry: Entry,
    pub(crate) key: Vec<u8>,
    pub(crate) now: Now,
    pub(crate) op: &'static str,
    pub(crate) permits: u64,
    /// The limit's parameters, joined by `:` (see `one_params` in `lua/prelude.lua`).
    pub(crate) params: Vec<u8>,
}

impl OneCall {
    /// The arguments of its own entry point's call, after the function's name.
    pub(crate) fn fill(&self, cmd: &mut Cmd) {
        cmd.arg(1).arg(&self.key);
        self.fill_args(cmd);
    }

    /// The arguments of a run of `len` decisions like this one in a batch (`lua/batch.lua`).
    fn fill_run(&self, cmd: &mut Cmd, len: usize) {
        cmd.arg(self.batch_code());
        self.fill_args(cmd);
        cmd.arg(len);
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
            Now::Server => cmd.arg(""),
            Now::At(micros) => cmd.arg(micros),
        };
        cmd.arg(self.op).arg(self.permits).arg(&self.params);
    }

    /// How `lua/batch.lua` names its entry point.
    fn batch_code(&self) -> &'static str {
        match self.entry {
            Entry::OneFixedWindow => "f",
            _ => "g",
        }
    }
}

type Answer = Result<Vec<Value>, RedisLimitError>;

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
    /// Starts the task sending `store`'s batches (at most `max_batch` decisions each) on the
    /// current tokio runtime. `store` must not batch itself.
    pub(crate) fn start(store: RedisStore, max_batch: usize) -> Batcher {
        let (queue, waiting) = mpsc::unbounded_channel();
        tokio::spawn(send_batches(store, waiting, max_batch.max(1)));
        Batcher { queue }
    }

    /// The reply its entry point would give `call`, within `timeout` (queueing included).
    pub(crate) async fn call(&self, call: OneCall, timeout: Duration) -> Answer {
        let (answer, reply) = oneshot::channel();
        self.queue
            .send(Queued { call, answer })
            .map_err(|_| RedisLimitError::Stopped)?;
        match tokio::time::timeout(timeout, reply).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(RedisLimitError::Stopped),
            Err(_) => Err(RedisLimitError::Timeout(timeout)),
        }
    }
}

async fn send_batches(
    store: RedisStore,
    mut waiting: mpsc::UnboundedReceiver<Queued>,
    max_batch: usize,
) {
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
        let mut batch = vec![first];
        while batch.len() < max_batch
            && let Ok(next) = waiting.try_recv()
        {
            batch.push(next);
        }
        // Callers that timed out while queued no longer wait for an answer.
        batch.retain(|queued| !queued.answer.is_closed());
        let store = store.clone();
        tokio::spawn(async move {
            send(&store, batch).await;
            drop(slot);
        });
    }
}

async fn send(store: &RedisStore, mut batch: Vec<Queued>) {
    if batch.len() <= 1 {
        if let Some(only) = batch.pop() {
            let answer = store.call(only.call.entry, |cmd| only.call.fill(cmd)).await;
            let _ = only.answer.send(answer);
        }
        return;
    }
    let run_lens: Vec<usize> = batch
        .chunk_by(|a, b| a.call.same_args(&b.call))
        .map(<[Queued]>::len)
        .collect();
    let replies = store
        .call(Entry::Batch, |cmd| {
            cmd.arg(batch.len());
            for queued in &batch {
                cmd.arg(&queued.call.key);
            }
            for run in batch.chunk_by(|a, b| a.call.same_args(&b.call)) {
                run[0].call.fill_run(cmd, run.len());
            }
        })
        .await;
    let replies = replies.and_then(|replies| {
        let expected = run_lens.len() + batch.len() * BATCH_REPLY_LEN;
        if replies.len() == expected {
            Ok(replies)
        } else {
            Err(RedisLimitError::UnexpectedReply(format!(
                "{} values in reply to a batch of {} decisions in {} runs",
                replies.len(),
                batch.len(),
                run_lens.len()
            )))
        }
    });
    match replies {
        Ok(replies) => {
            let (mut values, mut batch) = (replies.into_iter(), batch.into_iter());
            for len in run_lens {
                let now = values.next().unwrap_or(Value::Nil);
                for queued in batch.by_ref().take(len) {
                    let mut reply = Vec::with_capacity(BATCH_REPLY_LEN + 1);
                    reply.push(now.clone());
                    reply.extend(values.by_ref().take(BATCH_REPLY_LEN));
                    if reply.get(1).is_some_and(is_error) {
                        // An error reply is the entry point's own, without a time.
                        reply.remove(0);
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

/// The marker of an error reply (`{"ERR", kind, detail}`).
fn is_error(value: &Value) -> bool {
    matches!(value, Value::BulkString(bytes) if bytes == b"ERR")
}
