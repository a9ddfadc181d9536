//! gRPC on the wire, for tests that write calls by hand: the rate limit method's path and the
//! message framing.

#![allow(dead_code, unreachable_pub)]

/// The one method of Envoy's rate limit service.
pub const METHOD: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// A length-prefixed gRPC message: the compressed flag, a big-endian length, the bytes.
pub fn frame(compressed: bool, message: &[u8]) -> Vec<u8> {
    let mut framed = vec![u8::from(compressed)];
    framed.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    framed.extend_from_slice(message);
    framed
}
