//! The adaptive limit layer in front of real axum servers on loopback ports, with a real
//! client; what moves with time runs on a manual clock or tokio's paused clock, never on timing.

mod body_end;
mod classify;
mod latency;
mod limits;
mod queue;
mod release;
mod support;
