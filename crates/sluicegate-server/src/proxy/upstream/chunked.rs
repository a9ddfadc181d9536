//! The chunked transfer coding of a response body (RFC 9112 section 7.1), decoded from the
//! connection's read buffer as it fills: chunk data is split off the buffer, not copied.
//!
//! Strict where leniency lets two parsers disagree on where a message ends: lines end in CRLF
//! (a bare LF is an error), a chunk size is hexadecimal digits only and fits in 64 bits. Chunk
//! extensions and trailer fields are read past and dropped, each within a size bound.

use bytes::{Buf, Bytes, BytesMut};

use crate::proxy::upstream::error::UpstreamError;

/// The longest chunk extension read past, in bytes.
const MAX_EXTENSION: usize = 4096;
/// The longest trailer section read past, in bytes.
const MAX_TRAILERS: usize = 16 * 1024;

/// Where the decoder is in the coding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ChunkedDecoder {
    /// Reading a chunk-size line.
    Size {
        size: u64,
        digits: u8,
        /// Whitespace came after the digits: only more of it, `;` or CR may follow.
        space: bool,
        extension: usize,
        cr: bool,
    },
    /// Inside a chunk's data, this many bytes left.
    Data(u64),
    /// After a chunk's data: its CRLF (`true` once the CR is read).
    DataEnd(bool),
    /// Reading the trailer section after the last chunk.
    Trailers { line: usize, total: usize, cr: bool },
    /// The body has ended.
    Done,
}

/// What one step of decoding gave.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decoded {
    /// Chunk data.
    Data(Bytes),
    /// The buffer holds no more of the body: read more into it.
    NeedMore,
    /// The body has ended.
    Done,
}

impl Default for ChunkedDecoder {
    fn default() -> ChunkedDecoder {
        ChunkedDecoder::size_line()
    }
}

fn invalid(what: &'static str) -> UpstreamError {
    UpstreamError::InvalidResponse(what)
}

impl ChunkedDecoder {
    fn size_line() -> ChunkedDecoder {
        ChunkedDecoder::Size {
            size: 0,
            digits: 0,
            space: false,
            extension: 0,
            cr: false,
        }
    }

    /// Decodes from the front of `buf`, consuming what it has read.
    pub(crate) fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, UpstreamError> {
        loop {
            match self {
                ChunkedDecoder::Done => return Ok(Decoded::Done),
                ChunkedDecoder::Data(left) => {
                    if buf.is_empty() {
                        return Ok(Decoded::NeedMore);
                    }
                    let take = usize::try_from(*left).map_or(buf.len(), |left| left.min(buf.len()));
                    *left -= take as u64;
                    if *left == 0 {
                        *self = ChunkedDecoder::DataEnd(false);
                    }
                    return Ok(Decoded::Data(buf.split_to(take).freeze()));
                }
                _ => {
                    let Some(&byte) = buf.first() else {
                        return Ok(Decoded::NeedMore);
                    };
                    buf.advance(1);
                    self.step(byte)?;
                }
            }
        }
    }

    /// One byte of a size line, a chunk's CRLF or the trailers.
    fn step(&mut self, byte: u8) -> Result<(), UpstreamError> {
        match self {
            ChunkedDecoder::Size {
                size,
                digits,
                space,
                extension,
                cr,
            } => {
                if *cr {
                    if byte != b'\n' {
                        return Err(invalid("a chunk-size line's CR is not followed by LF"));
                    }
                    *self = match *size {
                        0 => ChunkedDecoder::Trailers {
                            line: 0,
                            total: 0,
                            cr: false,
                        },
                        size => ChunkedDecoder::Data(size),
                    };
                    return Ok(());
                }
                match byte {
                    b'\r' if *digits == 0 => return Err(invalid("a chunk size has no digits")),
                    b'\r' => *cr = true,
                    b'\n' => return Err(invalid("a chunk-size line ends in a bare LF")),
                    _ if *extension > 0 => {
                        *extension += 1;
                        if *extension > MAX_EXTENSION {
                            return Err(invalid("a chunk extension is too long"));
                        }
                    }
                    b';' if *digits > 0 => *extension = 1,
                    b' ' | b'\t' if *digits > 0 => *space = true,
                    _ if *space => return Err(invalid("a chunk size has whitespace inside")),
                    _ => {
                        let digit = match byte {
                            b'0'..=b'9' => byte - b'0',
                            b'a'..=b'f' => byte - b'a' + 10,
                            b'A'..=b'F' => byte - b'A' + 10,
                            _ => return Err(invalid("a chunk size is not hexadecimal")),
                        };
                        if *size >> 60 != 0 {
                            return Err(invalid("a chunk size does not fit in 64 bits"));
                        }
                        *size = *size << 4 | u64::from(digit);
                        *digits = digits.saturating_add(1);
                    }
                }
            }
            ChunkedDecoder::DataEnd(cr) => match (byte, *cr) {
                (b'\r', false) => *cr = true,
                (b'\n', true) => *self = ChunkedDecoder::size_line(),
                _ => return Err(invalid("a chunk's data is not followed by CRLF")),
            },
            ChunkedDecoder::Trailers { line, total, cr } => {
                if *cr {
                    if byte != b'\n' {
                        return Err(invalid("a trailer line's CR is not followed by LF"));
                    }
                    if *line == 0 {
                        *self = ChunkedDecoder::Done;
                    } else {
                        *line = 0;
                        *cr = false;
                    }
                    return Ok(());
                }
                match byte {
                    b'\r' => *cr = true,
                    b'\n' => return Err(invalid("a trailer line ends in a bare LF")),
                    _ => {
                        *line += 1;
                        *total += 1;
                        if *total > MAX_TRAILERS {
                            return Err(invalid("the trailer section is too long"));
                        }
                    }
                }
            }
            ChunkedDecoder::Data(_) | ChunkedDecoder::Done => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Decodes `wire` fed in pieces of `piece` bytes: the data, and whether the body ended.
    fn decode_in_pieces(wire: &[u8], piece: usize) -> Result<(Vec<u8>, bool), UpstreamError> {
        let mut decoder = ChunkedDecoder::default();
        let mut buf = BytesMut::new();
        let mut data = Vec::new();
        for part in wire.chunks(piece.max(1)) {
            buf.extend_from_slice(part);
            loop {
                match decoder.decode(&mut buf)? {
                    Decoded::Data(bytes) => data.extend_from_slice(&bytes),
                    Decoded::NeedMore => break,
                    Decoded::Done => return Ok((data, true)),
                }
            }
        }
        Ok((data, false))
    }

    fn encode(chunks: &[Vec<u8>]) -> Vec<u8> {
        let mut wire = Vec::new();
        for chunk in chunks.iter().filter(|chunk| !chunk.is_empty()) {
            wire.extend_from_slice(format!("{:X} ;name=value\r\n", chunk.len()).as_bytes());
            wire.extend_from_slice(chunk);
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(b"0\r\nx-trailer: dropped\r\n\r\n");
        wire
    }

    #[test]
    fn a_body_decodes_whole_and_stops_at_its_end() -> Result<(), UpstreamError> {
        let wire = b"5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\nNEXT";
        let mut buf = BytesMut::from(&wire[..]);
        let mut decoder = ChunkedDecoder::default();
        assert_eq!(
            decoder.decode(&mut buf)?,
            Decoded::Data(Bytes::from_static(b"hello"))
        );
        assert_eq!(
            decoder.decode(&mut buf)?,
            Decoded::Data(Bytes::from_static(b", world"))
        );
        assert_eq!(decoder.decode(&mut buf)?, Decoded::Done);
        // What follows the body is the next message's, left in the buffer.
        assert_eq!(&buf[..], b"NEXT");
        Ok(())
    }

    #[test]
    fn what_two_parsers_could_read_apart_is_refused() {
        for wire in [
            &b"5\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhello\n0\r\n\r\n",
            b"5\r\nhelloXX0\r\n\r\n",
            b"\r\nhello\r\n",
            b"0x5\r\nhello\r\n",
            b"-5\r\nhello\r\n",
            b"10000000000000000\r\n",
            b"0\r\ntrailer\n\r\n",
            b"5 6\r\nhello\r\n",
        ] {
            let text = String::from_utf8_lossy(wire);
            assert!(decode_in_pieces(wire, wire.len()).is_err(), "{text:?}");
        }
    }

    #[test]
    fn a_body_cut_short_has_not_ended() -> Result<(), UpstreamError> {
        let (data, ended) = decode_in_pieces(b"5\r\nhel", 64)?;
        assert_eq!((data.as_slice(), ended), (&b"hel"[..], false));
        Ok(())
    }

    proptest! {
        #[test]
        fn any_bytes_decode_to_no_more_data_than_they_hold(
            wire in proptest::collection::vec(
                prop_oneof![Just(b'\r'), Just(b'\n'), Just(b'0'), Just(b';'), any::<u8>()],
                0..400,
            ),
            piece in 1usize..64,
        ) {
            // An error is an answer too: only a panic or invented data would be wrong.
            if let Ok((data, _)) = decode_in_pieces(&wire, piece) {
                prop_assert!(data.len() <= wire.len());
            }
        }

        #[test]
        fn any_chunks_in_any_pieces_decode_to_their_data(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..8),
            piece in 1usize..64,
        ) {
            let wire = encode(&chunks);
            let decoded = decode_in_pieces(&wire, piece);
            prop_assert!(decoded.is_ok(), "{decoded:?}");
            let (data, ended) = decoded.unwrap_or_default();
            prop_assert!(ended);
            prop_assert_eq!(data, chunks.concat());
        }
    }
}
