//! How `serve` answers gRPC: which server, its HTTP/2 keepalive, the lean server's message
//! timeout and worker threads. Read by both servers and by the service's start.

use std::time::Duration;

/// Which server answers gRPC. Both answer through the same seam (`grpc::answer_request`) and
/// are held to the same conformance suite.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum GrpcServer {
    /// h2 driven directly with a small hand-written unary gRPC layer, no task per call.
    #[default]
    Lean,
    /// tonic's server, the path before the lean one: kept to compare against.
    Tonic,
}

/// How gRPC is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcOptions {
    /// Which server.
    pub server: GrpcServer,
    /// HTTP/2 keepalive PINGs sent by the service (none: it only answers the client's).
    pub keepalive: Option<Keepalive>,
    /// How long a call's request message may take to arrive whole, on the lean server (a call
    /// past it is DEADLINE_EXCEEDED): bounds a call the client leaves without a deadline.
    pub message_timeout: Duration,
    /// Worker threads serving the lean server's connections, each on a runtime of its own
    /// (new connections spread evenly over them); 0 serves them on the service's runtime.
    pub workers: usize,
}

impl GrpcOptions {
    /// The default message timeout: a rate limit request is a few hundred bytes.
    pub const DEFAULT_MESSAGE_TIMEOUT: Duration = Duration::from_secs(10);

    /// The default number of workers: one per CPU.
    pub fn default_workers() -> usize {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    }
}

impl Default for GrpcOptions {
    fn default() -> Self {
        GrpcOptions {
            server: GrpcServer::default(),
            keepalive: None,
            message_timeout: Self::DEFAULT_MESSAGE_TIMEOUT,
            workers: Self::default_workers(),
        }
    }
}

/// HTTP/2 keepalive: a PING sent every `interval`; a peer that does not answer one within
/// `timeout` has its connection closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// How often a PING is sent.
    pub interval: Duration,
    /// How long an answer to it may take.
    pub timeout: Duration,
}
