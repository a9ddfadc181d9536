//! The lean gRPC server (the default): `ShouldRateLimit` served on h2 directly, with the thin
//! unary layer of `grpc_codec.rs` in place of tonic's generic stack.
//!
//! One task per connection, none per call: the connection's task drives HTTP/2 and every call
//! on it. The connections are served by worker threads, each on a runtime of its own
//! (`--grpc-workers`, see `plumbing::start_workers`), or on the service's runtime. A call is a
//! future polled in that task; an in-memory decision is ready at its first poll, so the call is
//! answered in the same pass that read it, and only a call waiting on Redis (or on the rest of
//! its message) stays pending until woken. The answer's message is written into the
//! connection's one buffer, reused call after call.

use std::future::{Future, poll_fn};
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use h2::server::{Connection, SendResponse};
use h2::{Ping, PingPong, RecvStream};
use prost::Message as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};
use tokio_util::task::TaskTracker;

use crate::plumbing::{Counted, Loads, WorkerServer, accept_next, finish_within};
use crate::serve::engine::Engine;
use crate::serve::grpc::answer_request;
use crate::serve::grpc_codec::{
    GrpcCode, Refusal, check_head, encode_message, ok_response, ok_trailers, unary_message,
};
use crate::serve::grpc_message::{ConnectionBudget, read_message};
use crate::serve::grpc_options::{GrpcOptions, Keepalive};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;

/// The HTTP/2 settings of every connection: hyper's server defaults, written out. tonic's server
/// keeps most of them, but lifts two bounds that this one keeps: 200 concurrent streams, and
/// 1,024 streams reset for the client's errors.
fn http2_settings() -> h2::server::Builder {
    let mut builder = h2::server::Builder::new();
    builder
        .initial_window_size(1 << 20)
        .initial_connection_window_size(1 << 20)
        .max_frame_size(16 << 10)
        .max_header_list_size(16 << 10)
        .max_send_buffer_size(400 << 10)
        .max_concurrent_streams(200)
        // The reset-flood guard: past 20 streams the client opened and reset before they were
        // accepted, or 1,024 the server had to reset for the client's errors, the connection is
        // closed with ENHANCE_YOUR_CALM (HTTP/2 rapid reset, CVE-2023-44487).
        .max_pending_accept_reset_streams(20)
        .max_local_error_reset_streams(Some(1024));
    builder
}

/// Serves gRPC on `listener` from `engine` until `stopped` turns true; then sends GOAWAY on
/// every connection, lets the calls in flight finish, and returns when every connection has
/// closed, or `grace` after it stopped.
pub(crate) async fn serve(
    listener: TcpListener,
    engine: Arc<Engine>,
    options: GrpcOptions,
    grace: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let connections = LeanConnections::new(engine, options, stopped.clone());
    let loads = Loads::new(0);
    let mut stop = pin!(stopped_signal(&mut stopped));
    loop {
        tokio::select! {
            _ = &mut stop => break,
            (tcp, peer) = accept_next(&listener, "grpc") => {
                connections.serve(tcp, peer, loads.count(0));
            }
        }
    }
    drop(listener);
    connections.finish(grace).await;
}

/// The lean server's connections on one runtime (a worker's, or the service's).
pub(crate) struct LeanConnections {
    engine: Arc<Engine>,
    options: GrpcOptions,
    stopped: watch::Receiver<bool>,
    tasks: TaskTracker,
}

impl LeanConnections {
    /// Connections answered from `engine`, told to stop (GOAWAY) when `stopped` turns true.
    pub(crate) fn new(
        engine: Arc<Engine>,
        options: GrpcOptions,
        stopped: watch::Receiver<bool>,
    ) -> LeanConnections {
        LeanConnections {
            engine,
            options,
            stopped,
            tasks: TaskTracker::new(),
        }
    }
}

impl WorkerServer for LeanConnections {
    fn serve(&self, stream: TcpStream, _peer: SocketAddr, counted: Counted) {
        let connection = serve_connection(
            stream,
            Arc::clone(&self.engine),
            self.options,
            self.stopped.clone(),
        );
        self.tasks.spawn(async move {
            connection.await;
            drop(counted);
        });
    }

    /// Every connection has been told to stop already (GOAWAY): the calls in flight finish
    /// within `grace`. The connections left then go with the runtime they run on: a worker's,
    /// dropped when its thread ends; the service's, when the process exits.
    async fn finish(self, grace: Duration) {
        self.tasks.close();
        finish_within(grace, self.tasks.wait(), "gRPC connections").await;
    }
}

/// Completes when `stopped` turns true (or its sender is gone).
async fn stopped_signal(stopped: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is dropped here, never held across an await.
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// Serves one connection until it closes, or until `stopped` (then gracefully).
async fn serve_connection(
    tcp: TcpStream,
    engine: Arc<Engine>,
    options: GrpcOptions,
    mut stopped: watch::Receiver<bool>,
) {
    // A client that never sends HTTP/2's preface must not hold the shutdown up.
    let handshake = tokio::select! {
        shaken = http2_settings().handshake::<_, Bytes>(tcp) => shaken,
        () = stopped_signal(&mut stopped) => return,
    };
    let mut connection = match handshake {
        Ok(connection) => connection,
        Err(error) => {
            tracing::debug!(%error, "gRPC connection failed before HTTP/2 began");
            return;
        }
    };
    let mut keepalive = options
        .keepalive
        .and_then(|k| KeepaliveTimer::new(&mut connection, k));
    let budget = ConnectionBudget::default();
    let reading = MessageReading {
        budget: &budget,
        timeout: options.message_timeout,
    };
    let mut calls = FuturesUnordered::new();
    let mut buffer = BytesMut::new();
    let mut stop = pin!(stopped_signal(&mut stopped));
    let mut draining = false;
    let ended = poll_fn(|cx| {
        if !draining && stop.as_mut().poll(cx).is_ready() {
            // GOAWAY: no new calls; the ones in flight finish, then the connection closes.
            connection.graceful_shutdown();
            draining = true;
        }
        if let Some(timer) = &mut keepalive
            && timer.poll_expired(cx).is_ready()
        {
            tracing::debug!("gRPC connection closed: no answer to a keepalive PING");
            connection.abrupt_shutdown(h2::Reason::NO_ERROR);
            keepalive = None;
        }
        drive(
            &mut connection,
            &mut calls,
            &mut buffer,
            cx,
            |respond, body, deadline| answer_call(&engine, reading, respond, body, deadline),
        )
    })
    .await;
    if let Err(error) = ended {
        tracing::debug!(%error, "gRPC connection ended");
    }
}

/// Accepts calls and answers them until the connection closes. Every pass reads what the
/// connection has, starts each new call, and sends every answer ready; the next read flushes
/// those answers out.
fn drive<F>(
    connection: &mut Connection<TcpStream, Bytes>,
    calls: &mut FuturesUnordered<F>,
    buffer: &mut BytesMut,
    cx: &mut Context<'_>,
    mut start: impl FnMut(SendResponse<Bytes>, RecvStream, Option<Instant>) -> F,
) -> Poll<Result<(), h2::Error>>
where
    F: Future<Output = Option<(SendResponse<Bytes>, Answer)>>,
{
    loop {
        match connection.poll_accept(cx) {
            Poll::Ready(Some(Ok((request, mut respond)))) => {
                let (head, body) = request.into_parts();
                match check_head(&head) {
                    Ok(timeout) => {
                        let deadline = timeout.map(|t| Instant::now() + t);
                        calls.push(start(respond, body, deadline));
                    }
                    // Answered before its message is read; h2 resets the rest of the stream.
                    Err(refusal) => {
                        let _ = respond.send_response(refusal.response(), true);
                    }
                }
                continue;
            }
            Poll::Ready(Some(Err(error))) => return Poll::Ready(Err(error)),
            Poll::Ready(None) => return Poll::Ready(Ok(())),
            Poll::Pending => {}
        }
        let mut answered = false;
        while let Poll::Ready(Some(done)) = calls.poll_next_unpin(cx) {
            if let Some((respond, answer)) = done {
                send(respond, answer, buffer);
            }
            answered = true;
        }
        if !answered {
            return Poll::Pending;
        }
    }
}

/// What a call comes to.
enum Answer {
    /// The response message: the call was decided.
    Message(RateLimitResponse),
    /// A gRPC error.
    Refused(Refusal),
}

/// How a connection's calls read their messages: against its budget, within the timeout.
#[derive(Clone, Copy)]
struct MessageReading<'a> {
    budget: &'a ConnectionBudget,
    timeout: Duration,
}

/// One call, from its message to its answer (`None`: the client reset the stream, and nothing
/// is sent). Past `deadline`, DEADLINE_EXCEEDED; a call the client resets is dropped
/// unfinished, so that streams opened and reset at once leave no decisions running.
///
/// The deadline covers the decision too, as gRPC's deadlines do: a call answered
/// DEADLINE_EXCEEDED while Redis was deciding it may have been counted there.
async fn answer_call(
    engine: &Engine,
    reading: MessageReading<'_>,
    mut respond: SendResponse<Bytes>,
    body: RecvStream,
    deadline: Option<Instant>,
) -> Option<(SendResponse<Bytes>, Answer)> {
    let decided = decide(engine, reading, body);
    let mut work = pin!(async move {
        match deadline {
            None => decided.await,
            Some(deadline) => tokio::time::timeout_at(deadline, decided)
                .await
                .unwrap_or_else(|_| Answer::Refused(Refusal::deadline_exceeded())),
        }
    });
    let answer = poll_fn(|cx| {
        if let Poll::Ready(answer) = work.as_mut().poll(cx) {
            return Poll::Ready(Some(answer));
        }
        match respond.poll_reset(cx) {
            Poll::Ready(_) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await;
    answer.map(|answer| (respond, answer))
}

/// Reads a call's message and decides it through the seam the tonic path shares.
async fn decide(engine: &Engine, reading: MessageReading<'_>, body: RecvStream) -> Answer {
    let message = read_message(body, reading.budget, reading.timeout).await;
    let request = match message.and_then(|body| decode(&body)) {
        Ok(request) => request,
        Err(refusal) => return Answer::Refused(refusal),
    };
    match answer_request(engine, request).await {
        Ok(response) => Answer::Message(response),
        Err(error) => Answer::Refused(Refusal::new(GrpcCode::InvalidArgument, error.to_string())),
    }
}

/// The request in a whole unary body.
fn decode(body: &[u8]) -> Result<RateLimitRequest, Refusal> {
    RateLimitRequest::decode(unary_message(body)?).map_err(|error| {
        Refusal::new(
            GrpcCode::Internal,
            format!("cannot decode the request message: {error}"),
        )
    })
}

/// Sends an answer: the message framed and the OK trailers, or a refusal trailers-only. A
/// stream the client has reset meanwhile takes nothing, which is no error of the service.
fn send(mut respond: SendResponse<Bytes>, answer: Answer, buffer: &mut BytesMut) {
    match answer {
        Answer::Message(message) => {
            let Ok(mut stream) = respond.send_response(ok_response(), false) else {
                return;
            };
            let _ = stream.send_data(encode_message(&message, buffer), false);
            let _ = stream.send_trailers(ok_trailers());
        }
        Answer::Refused(refusal) => {
            let _ = respond.send_response(refusal.response(), true);
        }
    }
}

/// A connection's keepalive: when the next PING is due, or when the one sent must be answered.
struct KeepaliveTimer {
    ping_pong: PingPong,
    settings: Keepalive,
    timer: Pin<Box<Sleep>>,
    awaiting_pong: bool,
}

impl KeepaliveTimer {
    /// The keepalive of `connection` (none if h2 has already handed out its PING handle).
    fn new(connection: &mut Connection<TcpStream, Bytes>, settings: Keepalive) -> Option<Self> {
        Some(KeepaliveTimer {
            ping_pong: connection.ping_pong()?,
            settings,
            timer: Box::pin(tokio::time::sleep(settings.interval)),
            awaiting_pong: false,
        })
    }

    /// Ready when a PING went unanswered past the timeout.
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            if self.awaiting_pong {
                if self.ping_pong.poll_pong(cx).is_ready() {
                    self.awaiting_pong = false;
                    let next = Instant::now() + self.settings.interval;
                    self.timer.as_mut().reset(next);
                    continue;
                }
                ready!(self.timer.as_mut().poll(cx));
                return Poll::Ready(());
            }
            ready!(self.timer.as_mut().poll(cx));
            // A PING already in flight (the connection's own) fails this one: try next time.
            let (wait, awaiting) = match self.ping_pong.send_ping(Ping::opaque()) {
                Ok(()) => (self.settings.timeout, true),
                Err(_) => (self.settings.interval, false),
            };
            self.awaiting_pong = awaiting;
            self.timer.as_mut().reset(Instant::now() + wait);
        }
    }
}
