//! The permit's way through a response: granted before the inner service is called, attached
//! to the response's body, and completed when the body has been sent to the end (its latency
//! is then measured), or dropped as `dropped` when the body breaks or is abandoned (a client
//! that went away, a connection that broke). [`permit_body`](crate::permit_body) says when a
//! body ends.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method, Response, StatusCode};
use http_body::{Body, Frame};
use sluicegate::adaptive::{Outcome, Permit};
use tokio::time::Instant;

use crate::adaptive::classify::grpc_outcome;
use crate::adaptive::shared::Shared;
use crate::permit_body::{BodyEnd, PermitBody};

/// The body of a response through an
/// [`AdaptiveLimitLayer`](crate::adaptive::AdaptiveLimitLayer): the inner service's, holding
/// its permit until it ends (the sample is recorded then) or breaks or is dropped (the permit
/// counts as dropped), or a refusal's short text. [`permit_body`](crate::permit_body) says when
/// a body ends.
pub type AdaptiveBody<B> = PermitBody<B, PendingSample>;

/// A permit granted to a request the inner service is answering.
pub(crate) struct Ticket {
    permit: Permit,
    granted: Instant,
    bodiless: bool,
    shared: Arc<Shared>,
}

impl Ticket {
    /// `permit` for a request with `method`: a `HEAD` answer has no body to wait for.
    pub(crate) fn new(permit: Permit, method: &Method, shared: Arc<Shared>) -> Ticket {
        Ticket {
            permit,
            granted: Instant::now(),
            bodiless: method == Method::HEAD,
            shared,
        }
    }

    /// `response` holding the permit in its body, classified by its head.
    pub(crate) fn attach<B: Body>(self, response: Response<B>) -> Response<AdaptiveBody<B>> {
        let outcome = (self.shared.options.classify.0)(response.status(), response.headers());
        let status = response.status();
        // Servers send no body for these, so they may drop it unread: the answer is complete
        // with its head.
        let bodiless = self.bodiless
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
            || response.body().is_end_stream();
        let pending = PendingSample {
            permit: self.permit,
            outcome,
            granted: self.granted,
            shared: self.shared,
        };
        if bodiless {
            pending.ended();
            return response.map(AdaptiveBody::plain);
        }
        response.map(|body| AdaptiveBody::holding(body, Some(pending)))
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("permit", &self.permit)
            .finish_non_exhaustive()
    }
}

/// The adaptive limiter's permit a response body holds, with what the response's head said:
/// recorded as a sample when the body ends (an answer slower than the layer's `timeout_after`
/// counts as a timeout), given back as `dropped` when it fails or is dropped.
pub struct PendingSample {
    permit: Permit,
    /// What the head (or the trailers) said; `None`: no sample.
    outcome: Option<Outcome>,
    granted: Instant,
    shared: Arc<Shared>,
}

impl PendingSample {
    /// The trailers have come: a gRPC status there says how the call really ended.
    fn trailers(&mut self, trailers: &HeaderMap) {
        if self.outcome == Some(Outcome::Ok)
            && let Some(outcome) = grpc_outcome(trailers)
        {
            self.outcome = Some(outcome);
        }
    }
}

impl BodyEnd for PendingSample {
    /// Trailers may say how the call really ended.
    fn frame(&mut self, frame: &Frame<Bytes>) {
        if let Some(trailers) = frame.trailers_ref() {
            self.trailers(trailers);
        }
    }

    /// The body was sent to the end: report the outcome (an answer slower than the layer's
    /// `timeout_after` counts as a timeout).
    fn ended(self) {
        let slow = self
            .shared
            .options
            .timeout_after
            .is_some_and(|limit| self.granted.elapsed() > limit);
        match self.outcome {
            None => self.permit.ignore(),
            Some(Outcome::Ok) if slow => self.permit.timeout(),
            Some(outcome) => self.permit.complete(outcome),
        }
    }
}

impl fmt::Debug for PendingSample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingSample")
            .field("permit", &self.permit)
            .field("outcome", &self.outcome)
            .finish_non_exhaustive()
    }
}
