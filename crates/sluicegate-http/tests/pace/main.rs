//! The outbound pacing layer around a real hyper-util client, against real axum servers over
//! loopback: permits waited for on a manual clock, the server's `Retry-After` / `RateLimit`
//! holds on tokio's paused clock, and the maximum wait.

mod holds;
mod permits;
mod support;
