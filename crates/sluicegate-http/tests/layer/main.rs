//! The layer in front of real servers (axum, hyper, tonic) on loopback ports, with a real
//! client; time-dependent cases on a manual clock or tokio's paused clock, never on timing.

mod answers;
mod concurrency;
mod grpc;
mod hyper;
mod keys;
mod limits;
mod shaping;
mod support;
