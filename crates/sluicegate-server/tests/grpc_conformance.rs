//! The gRPC conformance suite: independent clients (tonic, a raw `h2` client, Python's
//! grpcio) against a real `sluicegate serve` process over loopback, once on each gRPC server
//! (`--grpc-server lean`, the default, and `tonic`). Every check in `grpc_conformance/` takes
//! the service's gRPC address, so both servers are held to the same answers. What each check
//! pins is in docs/grpc-conformance.md.

use std::future::Future;
use std::net::SocketAddr;

use sluicegate_redis::testing::RedisServer;

mod grpc_wire;
#[path = "grpc_conformance/h2_checks.rs"]
mod h2_checks;
#[path = "grpc_conformance/lean_bounds.rs"]
mod lean_bounds;
#[path = "grpc_conformance/raw.rs"]
mod raw;
mod serve_process;
#[path = "grpc_conformance/shutdown.rs"]
mod shutdown;
#[path = "grpc_conformance/tonic_checks.rs"]
mod tonic_checks;

use serve_process::ServeProcess;
use tonic_checks::{OK, OVER_LIMIT};

/// The rules every conformance check runs against: `user` always has room, `blocked` never
/// does, so no answer depends on where a real clock's window boundary falls.
pub const RULES: &str = "
domain: conformance
descriptors:
  - key: user
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: counted
    rate_limit: {unit: hour, requests_per_unit: 1000000}
";

/// Any error of a check.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A check's outcome.
pub type TestResult = Result<(), BoxError>;

/// The lean gRPC server (the default).
const LEAN: &str = "lean";
/// tonic's server, behind `--grpc-server tonic`.
const TONIC: &str = "tonic";

/// The lean server on its worker threads (the default), on the service's own runtime, and
/// tonic's server.
const LEAN_FLAGS: &[&str] = &["--grpc-server", LEAN];
const LEAN_WITHOUT_WORKERS: &[&str] = &["--grpc-server", LEAN, "--grpc-workers", "0"];
const TONIC_FLAGS: &[&str] = &["--grpc-server", TONIC];

/// Runs `check` against a `sluicegate serve` in memory started with `flags`, and checks it is
/// still up after.
async fn in_memory<F, Fut>(flags: &[&str], check: F) -> TestResult
where
    F: FnOnce(SocketAddr) -> Fut,
    Fut: Future<Output = TestResult>,
{
    let mut serve = ServeProcess::start(RULES, flags)?;
    check(serve.grpc).await?;
    assert!(serve.is_running()?, "serve exited during the check");
    Ok(())
}

/// One test per check, each against a fresh `serve` in memory on gRPC `$server`.
macro_rules! in_memory_tests {
    ($server:expr; $($name:ident => $check:path,)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() -> TestResult {
            in_memory($server, $check).await
        }
    )*};
}

/// Every in-memory check, on gRPC `$server`.
macro_rules! every_in_memory_check {
    ($server:expr) => {
        in_memory_tests! { $server;
            tonic_ok_and_over_limit => tonic_checks::answers_ok_and_over_limit,
            tonic_invalid_argument => tonic_checks::bad_requests_are_invalid_argument,
            tonic_oversized_request => tonic_checks::an_oversized_request_is_resource_exhausted,
            tonic_concurrent_streams =>
                tonic_checks::concurrent_calls_on_one_connection_get_their_own_answers,
            tonic_unknown_method_and_service =>
                tonic_checks::unknown_methods_and_services_are_unimplemented,
            h2_errors_are_trailers_only => h2_checks::errors_are_trailers_only,
            h2_stream_reset_mid_call =>
                h2_checks::a_stream_reset_mid_call_leaves_the_connection_serving,
            h2_burst_of_resets => h2_checks::a_burst_of_resets_leaves_the_service_serving,
            h2_connection_dropped_mid_request =>
                h2_checks::a_connection_dropped_mid_request_leaves_the_service_serving,
            h2_broken_framing => h2_checks::broken_framing_is_internal,
            h2_gzip_refused => h2_checks::gzip_requests_are_refused_with_the_accepted_encodings,
            h2_unknown_method => h2_checks::an_unknown_method_is_unimplemented,
            h2_ping => h2_checks::pings_are_answered,
            h2_wrong_content_type => h2_checks::a_content_type_not_grpc_is_415,
            h2_oversized_message =>
                h2_checks::an_oversized_message_is_resource_exhausted_on_a_live_connection,
            h2_message_in_several_frames => h2_checks::a_message_in_several_frames_is_answered,
            h2_timeouts_not_expiring_or_unparsed =>
                h2_checks::timeouts_that_do_not_expire_or_parse_leave_the_call_answered,
        }
    };
}

/// The in-memory checks on the lean server.
mod lean {
    use super::*;
    every_in_memory_check!(LEAN_FLAGS);
}

mod lean_without_workers {
    use super::*;
    every_in_memory_check!(LEAN_WITHOUT_WORKERS);
}

/// The in-memory checks on tonic's server.
mod tonic_server {
    use super::*;
    every_in_memory_check!(TONIC_FLAGS);
}

/// `serve` on `redis` under the `closed` policy on gRPC `server`, with a Redis timeout long
/// enough that a frozen Redis holds a call past any deadline a check sets.
fn serve_on_redis(redis: &RedisServer, server: &str) -> Result<ServeProcess, BoxError> {
    let url = redis.url();
    ServeProcess::start(
        RULES,
        &[
            "--grpc-server",
            server,
            "--redis",
            &url,
            "--failure-policy",
            "closed",
            "--redis-timeout-ms",
            "60000",
        ],
    )
}

/// [`serve_on_redis`], with one counted call answered on a fresh HTTP/2 connection (so the
/// service's Redis connection is up before a check freezes Redis); that connection.
async fn serve_on_redis_warmed(
    redis: &RedisServer,
    server: &str,
) -> Result<(ServeProcess, raw::Connection), BoxError> {
    let serve = serve_on_redis(redis, server)?;
    let mut connection = raw::connect(serve.grpc).await?;
    let warm = raw::request(&[("counted", "warm")]);
    let answer = raw::unary(&mut connection.client, serve.grpc, &warm).await?;
    assert_eq!(answer.message()?.overall_code, OK);
    Ok((serve, connection))
}

/// Each Redis check, as a test on either gRPC server.
macro_rules! on_both_servers {
    ($($check:ident => $lean:ident, $tonic:ident;)*) => {$(
        #[tokio::test]
        async fn $lean() -> TestResult {
            $check(LEAN).await
        }

        #[tokio::test]
        async fn $tonic() -> TestResult {
            $check(TONIC).await
        }
    )*};
}

on_both_servers! {
    tonic_deadline_on_a_frozen_redis => lean_tonic_deadline_on_a_frozen_redis,
        tonic_tonic_deadline_on_a_frozen_redis;
    h2_deadline_on_a_frozen_redis => lean_h2_deadline_on_a_frozen_redis,
        tonic_h2_deadline_on_a_frozen_redis;
    redis_gone_under_the_closed_policy => lean_redis_gone_under_the_closed_policy,
        tonic_redis_gone_under_the_closed_policy;
    sigterm_sends_goaway_and_finishes_calls_in_flight => lean_sigterm_sends_goaway,
        tonic_sigterm_sends_goaway;
    grpcio_client => lean_grpcio_client, tonic_grpcio_client;
    keepalive => lean_keepalive, tonic_keepalive;
}

/// On the lean server only (tonic's server releases a message's bytes as they are read, and
/// sets no time for a message to arrive in): one budget for a connection's unfinished messages.
#[tokio::test]
async fn lean_unfinished_messages_share_a_connection_budget() -> TestResult {
    in_memory(
        LEAN_FLAGS,
        lean_bounds::a_connections_unfinished_messages_share_one_budget,
    )
    .await
}

/// On the lean server only: a message that never ends is ended at `--grpc-message-timeout`.
#[tokio::test]
async fn lean_message_timeout() -> TestResult {
    let flags = ["--grpc-message-timeout", "200ms"];
    let mut serve = ServeProcess::start(RULES, &flags)?;
    lean_bounds::a_message_never_finished_is_ended_by_the_service(serve.grpc).await?;
    assert!(serve.is_running()?);
    Ok(())
}

/// `--grpc-keepalive-interval`: a client that leaves the service's PING unanswered is closed.
async fn keepalive(server: &str) -> TestResult {
    let keepalive = [
        "--grpc-server",
        server,
        "--grpc-keepalive-interval",
        "200ms",
        "--grpc-keepalive-timeout",
        "200ms",
    ];
    let mut serve = ServeProcess::start(RULES, &keepalive)?;
    h2_checks::an_unanswered_keepalive_ping_closes_the_connection(serve.grpc).await?;
    // A client that answers them is served.
    let mut connection = raw::connect(serve.grpc).await?;
    raw::still_serves(&mut connection.client, serve.grpc).await?;
    assert!(serve.is_running()?);
    Ok(())
}

async fn tonic_deadline_on_a_frozen_redis(server: &str) -> TestResult {
    let redis = RedisServer::start()?;
    let (mut serve, _warm) = serve_on_redis_warmed(&redis, server).await?;
    redis.pause()?;
    let checked =
        tonic_checks::a_call_past_its_deadline_ends_and_the_service_answers_on(serve.grpc).await;
    redis.resume()?;
    checked?;
    assert!(serve.is_running()?);
    Ok(())
}

/// The service ends a call past its deadline: DEADLINE_EXCEEDED on the lean server; tonic's
/// ends it CANCELLED ("Timeout expired"), or DEADLINE_EXCEEDED.
async fn h2_deadline_on_a_frozen_redis(server: &str) -> TestResult {
    let redis = RedisServer::start()?;
    let (mut serve, _warm) = serve_on_redis_warmed(&redis, server).await?;
    redis.pause()?;
    let statuses: &[&str] = if server == LEAN { &["4"] } else { &["1", "4"] };
    let checked =
        h2_checks::a_call_past_its_deadline_is_ended_by_the_service(serve.grpc, statuses).await;
    redis.resume()?;
    checked?;
    assert!(serve.is_running()?);
    Ok(())
}

/// With Redis gone, the `closed` policy answers OVER_LIMIT: a gRPC OK, not UNAVAILABLE (the
/// service has no error status for a store that is down; the policy is the answer).
async fn redis_gone_under_the_closed_policy(server: &str) -> TestResult {
    let mut redis = RedisServer::start()?;
    let serve = serve_on_redis(&redis, server)?;
    redis.stop();
    let mut client = tonic_checks::client(serve.grpc).await?;
    let call = tonic_checks::request("conformance", &[("counted", "gone")]);
    let answer = tonic_checks::ask(&mut client, call).await??;
    assert_eq!(answer.overall_code, OVER_LIMIT);
    Ok(())
}

/// SIGTERM: the service sends GOAWAY (a new call on an open connection is refused), finishes
/// the call in flight, and exits cleanly. The call in flight waits on a frozen Redis, so it is
/// certainly still running when the signal arrives.
async fn sigterm_sends_goaway_and_finishes_calls_in_flight(server: &str) -> TestResult {
    let redis = RedisServer::start()?;
    let (mut serve, mut connection) = serve_on_redis_warmed(&redis, server).await?;
    let grpc = serve.grpc;

    redis.pause()?;
    let head = raw::headers(grpc, raw::METHOD, "application/grpc", &[])?;
    let body = raw::frame(
        false,
        &prost::Message::encode_to_vec(&raw::request(&[("counted", "in-flight")])),
    );
    let mut ready = connection.client.clone().ready().await?;
    let (response, mut send) = ready.send_request(head, false)?;
    send.send_data(body.into(), true)?;
    let in_flight = tokio::spawn(raw::read_answer(response));
    // A PING answered means the server has read every frame sent before it: the call is in.
    let mut ping_pong = connection.ping_pong.take().ok_or("no ping handle")?;
    ping_pong.ping(h2::Ping::opaque()).await?;

    serve.terminate()?;
    serve.wait_for_log("shutting down")?;
    // Calls that need no counter, until one is refused: the GOAWAY has arrived (bounded).
    let elsewhere = tonic_checks::request("elsewhere", &[("user", "ann")]);
    let mut refused = None;
    for _ in 0..500 {
        match raw::unary(&mut connection.client, grpc, &elsewhere).await {
            Ok(answer) => assert_eq!(answer.message()?.overall_code, OK),
            Err(error) => {
                refused = Some(error);
                break;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let refused = refused.ok_or("no call was ever refused after SIGTERM")?;
    let refused = refused
        .downcast_ref::<h2::Error>()
        .ok_or_else(|| format!("not an HTTP/2 refusal: {refused}"))?;
    assert!(
        refused.is_go_away() || refused.reason() == Some(h2::Reason::REFUSED_STREAM),
        "{refused:?}"
    );

    redis.resume()?;
    let answer = in_flight.await??;
    assert_eq!(answer.grpc_status(), Some("0"), "{answer:?}");
    assert_eq!(answer.message()?.overall_code, OK);
    assert!(serve.wait_for_exit()?.success());
    Ok(())
}

/// Python's grpcio (gRPC's C core) as the client: `grpc_conformance/grpcio_client.py`, run
/// against a service in memory and one on a frozen Redis (for its deadline check).
/// scripts/test.sh installs grpcio when it is missing. On the lean server the service's own end
/// of a late call must be DEADLINE_EXCEEDED (`strict`).
async fn grpcio_client(server: &str) -> TestResult {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/grpc_conformance/grpcio_client.py"
    );
    let has_grpcio = std::process::Command::new("python3")
        .args(["-c", "import grpc"])
        .output()?;
    if !has_grpcio.status.success() {
        return Err(
            "python3 with grpcio is needed: pip install grpcio (scripts/test.sh does)".into(),
        );
    }
    let redis = RedisServer::start()?;
    let mut memory = ServeProcess::start(RULES, &["--grpc-server", server])?;
    let (mut frozen, _warm) = serve_on_redis_warmed(&redis, server).await?;
    redis.pause()?;
    let (address, frozen_address) = (memory.grpc.to_string(), frozen.grpc.to_string());
    let deadline = if server == LEAN { "strict" } else { "lenient" };
    let run = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .args([script, &address, &frozen_address, deadline])
            .output()
    })
    .await;
    redis.resume()?;
    let output = run??;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    for check in [
        "normal call",
        "over limit",
        "invalid argument",
        "deadline",
        "oversized message",
        "unknown method",
        "gzip refused",
        "concurrent calls",
        "still serving",
    ] {
        assert!(
            stdout.contains(&format!("ok {check}\n")),
            "{check}: {stdout}"
        );
    }
    assert!(memory.is_running()? && frozen.is_running()?);
    Ok(())
}
