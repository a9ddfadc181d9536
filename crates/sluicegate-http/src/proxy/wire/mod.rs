//! What the proxy's HTTP/1.1 client and server read alike: the chunked coding, and the fields
//! that frame a message.

mod chunked;
mod fields;

pub(crate) use chunked::{ChunkedDecoder, Decoded};
pub(crate) use fields::{FramingFields, read_fields};

/// What is wrong with a message, in words: the client side answers it as an invalid response,
/// the server side as a bad request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) &'static str);
