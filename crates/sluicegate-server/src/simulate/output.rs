//! The JSON Lines the command prints: one per event (per limiter), durations in seconds.

use std::io::{self, Write};

use serde::Serialize;
use sluicegate::Decision;

use crate::simulate::event::{Event, seconds};

/// A decision, with its fields in the order the README's `simulate` section shows them.
#[derive(Debug, Serialize)]
struct DecisionLine<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    limiter: Option<usize>,
    t: f64,
    key: &'a str,
    permits: u64,
    op: &'a str,
    allowed: bool,
    limit: u64,
    remaining: u64,
    reset_after: f64,
    retry_after: Option<f64>,
    wait: f64,
}

/// A `set_rate` that took effect: the new algorithm's limit.
#[derive(Debug, Serialize)]
struct RateLine<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    limiter: Option<usize>,
    t: f64,
    key: &'a str,
    permits: u64,
    op: &'a str,
    limit: u64,
}

/// An event the limiter could not take.
#[derive(Debug, Serialize)]
struct ErrorLine<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    limiter: Option<usize>,
    t: Option<f64>,
    error: &'a str,
}

/// Writes lines; `limiter` is the index to print, `None` when only one limiter runs.
pub(crate) struct LineWriter<W: Write> {
    out: W,
}

impl<W: Write> LineWriter<W> {
    pub(crate) fn new(out: W) -> Self {
        LineWriter { out }
    }

    pub(crate) fn decision(
        &mut self,
        limiter: Option<usize>,
        event: &Event,
        decision: &Decision,
    ) -> io::Result<()> {
        let op = event.op.text();
        self.line(&DecisionLine {
            limiter,
            t: seconds(event.t),
            key: &event.key,
            permits: event.permits,
            op: &op,
            allowed: decision.allowed(),
            limit: decision.limit(),
            remaining: decision.remaining(),
            reset_after: duration_seconds(decision.reset_after()),
            retry_after: decision.retry_after().map(duration_seconds),
            wait: duration_seconds(decision.wait()),
        })
    }

    pub(crate) fn rate_set(
        &mut self,
        limiter: Option<usize>,
        event: &Event,
        limit: u64,
    ) -> io::Result<()> {
        let op = event.op.text();
        self.line(&RateLine {
            limiter,
            t: seconds(event.t),
            key: &event.key,
            permits: event.permits,
            op: &op,
            limit,
        })
    }

    pub(crate) fn error(
        &mut self,
        limiter: Option<usize>,
        t: Option<u64>,
        error: &str,
    ) -> io::Result<()> {
        self.line(&ErrorLine {
            limiter,
            t: t.map(seconds),
            error,
        })
    }

    /// Pushes out everything written so far: called once per event, so a program driving the
    /// command through a pipe gets its answer before it sends the next event.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    fn line(&mut self, line: &impl Serialize) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, line)?;
        self.out.write_all(b"\n")
    }
}

/// A duration as seconds; durations here are whole microseconds, so this is exact.
fn duration_seconds(duration: std::time::Duration) -> f64 {
    seconds(sluicegate::clock::micros_ceil(duration))
}

#[cfg(test)]
mod tests {

    use sluicegate::state_machine::Op;

    use super::*;
    use crate::simulate::event::EventOp;

    #[test]
    fn prints_the_shape_of_the_design() -> Result<(), Box<dyn std::error::Error>> {
        let mut writer = LineWriter::new(Vec::new());
        let event = Event {
            t: 200_000,
            key: "a".into(),
            permits: 1,
            op: EventOp::Decide(Op::Check, "check".into()),
        };
        let decision = Decision::allow(5, 4, 800_000);
        writer.decision(None, &event, &decision)?;
        writer.error(Some(1), Some(1_500_000), "bad \"line\"")?;
        writer.error(None, None, "bad t")?;
        let text = String::from_utf8(writer.out)?;
        assert_eq!(
            text,
            concat!(
                r#"{"t":0.2,"key":"a","permits":1,"op":"check","allowed":true,"limit":5,"remaining":4,"reset_after":0.8,"retry_after":null,"wait":0.0}"#,
                "\n",
                r#"{"limiter":1,"t":1.5,"error":"bad \"line\""}"#,
                "\n",
                r#"{"t":null,"error":"bad t"}"#,
                "\n"
            )
        );
        Ok(())
    }
}
