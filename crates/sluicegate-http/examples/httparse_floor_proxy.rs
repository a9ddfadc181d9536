//! The least HTTP/1.1 proxy loop on httparse, for scripts/bench-proxy.sh's `lean` pair: how
//! many requests per second a proxy that parses and writes HTTP/1.1 itself, without hyper,
//! allows on this machine. Beside `hyper_floor_proxy` it tells how much of the distance to nginx
//! is hyper's, and so what an engine of the proxy's own could gain (issue 11).
//!
//! ```text
//! cargo run --release -p sluicegate-http --example httparse_floor_proxy -- LISTEN UPSTREAM [WORKERS]
//! ```
//!
//! `LISTEN` and `UPSTREAM` are `host:port`; `WORKERS` (default 2) threads each run a
//! single-threaded runtime with its own `SO_REUSEPORT` listening socket. Each client connection
//! gets one upstream connection of its own. Hop-by-hop fields are dropped and the client is
//! appended as `X-Forwarded-For`. Not a proxy to deploy: it reads only messages framed by
//! `Content-Length` (anything else ends the connection), has no timeouts, no pool, no h2 and
//! no error responses.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[path = "shared/floor_workers.rs"]
mod floor_workers;
use floor_workers::{Arguments, Error, run_workers};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The most header fields a message may have here.
const MAX_FIELDS: usize = 64;

fn main() -> Result<(), Error> {
    let arguments = Arguments::parse("httparse_floor_proxy")?;
    let upstream = arguments.upstream;
    run_workers(
        arguments.listen,
        arguments.workers,
        move |stream, peer| async move {
            // A connection that ends, for whatever reason, ends alone.
            let _ = serve(stream, peer, upstream).await;
        },
    )
}

/// One side of the proxy: a socket, and what has been read from it and not yet used.
struct Side {
    stream: TcpStream,
    read: Vec<u8>,
    filled: usize,
}

impl Side {
    fn new(stream: TcpStream) -> Side {
        Side {
            stream,
            read: vec![0; 16 * 1024],
            filled: 0,
        }
    }

    /// Reads more; false when the peer closed or the buffer is full.
    async fn read_more(&mut self) -> std::io::Result<bool> {
        if self.filled == self.read.len() {
            return Ok(false);
        }
        let read = self.stream.read(&mut self.read[self.filled..]).await?;
        self.filled += read;
        Ok(read > 0)
    }

    /// Drops the first `used` bytes read.
    fn consume(&mut self, used: usize) {
        self.read.copy_within(used..self.filled, 0);
        self.filled -= used;
    }
}

/// A message head rewritten for the other side.
struct Head {
    /// The first line and the fields kept, without the blank line that ends them.
    bytes: Vec<u8>,
    /// How many bytes of the read buffer the head took.
    parsed: usize,
    /// The body's length (`Content-Length`).
    body: usize,
    /// `Connection: close`: the connection ends after this message.
    close: bool,
}

async fn serve(client: TcpStream, peer: SocketAddr, upstream: SocketAddr) -> Result<(), Error> {
    let forwarded_for = format!("x-forwarded-for: {}\r\n", peer.ip().to_canonical());
    let mut client = Side::new(client);
    let mut server = Side::new(connect(upstream).await?);
    loop {
        let Some(mut request) = read_head(&mut client, Kind::Request).await? else {
            return Ok(());
        };
        request.bytes.extend_from_slice(forwarded_for.as_bytes());
        pass_message(&mut client, &mut server, request).await?;
        let Some(response) = read_head(&mut server, Kind::Response).await? else {
            return Ok(());
        };
        let close = response.close;
        pass_message(&mut server, &mut client, response).await?;
        if close {
            server = Side::new(connect(upstream).await?);
        }
    }
}

async fn connect(upstream: SocketAddr) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect(upstream).await?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

#[derive(Clone, Copy)]
enum Kind {
    Request,
    Response,
}

/// Reads until a whole head has arrived; `None` when the peer closed between messages.
async fn read_head(side: &mut Side, kind: Kind) -> Result<Option<Head>, Error> {
    loop {
        if let Some(head) = parse_head(kind, &side.read[..side.filled])? {
            return Ok(Some(head));
        }
        if !side.read_more().await? {
            return if side.filled == 0 {
                Ok(None)
            } else {
                Err("the peer closed mid-head, or the head is too large".into())
            };
        }
    }
}

/// The head at the start of `buffer` rewritten for the other side (without its blank line),
/// or `None` if it has not all arrived.
fn parse_head(kind: Kind, buffer: &[u8]) -> Result<Option<Head>, Error> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut bytes = Vec::with_capacity(512);
    let (parsed, fields) = match kind {
        Kind::Request => {
            let mut request = httparse::Request::new(&mut fields);
            let httparse::Status::Complete(parsed) = request.parse(buffer)? else {
                return Ok(None);
            };
            bytes.extend_from_slice(request.method.unwrap_or("GET").as_bytes());
            bytes.push(b' ');
            bytes.extend_from_slice(request.path.unwrap_or("/").as_bytes());
            bytes.extend_from_slice(b" HTTP/1.1\r\n");
            (parsed, request.headers)
        }
        Kind::Response => {
            let mut response = httparse::Response::new(&mut fields);
            let httparse::Status::Complete(parsed) = response.parse(buffer)? else {
                return Ok(None);
            };
            bytes.extend_from_slice(b"HTTP/1.1 ");
            bytes.extend_from_slice(response.code.unwrap_or(502).to_string().as_bytes());
            bytes.push(b' ');
            bytes.extend_from_slice(response.reason.unwrap_or("").as_bytes());
            bytes.extend_from_slice(b"\r\n");
            (parsed, response.headers)
        }
    };
    let mut head = Head {
        bytes,
        parsed,
        body: 0,
        close: false,
    };
    for field in fields.iter() {
        rewrite_field(&mut head, field)?;
    }
    Ok(Some(head))
}

/// Copies a field to the rewritten head unless it is hop-by-hop, noting the body's length and
/// whether the connection closes after this message.
fn rewrite_field(head: &mut Head, field: &httparse::Header<'_>) -> Result<(), Error> {
    let name = field.name;
    if name.eq_ignore_ascii_case("connection") {
        head.close |= field.value.eq_ignore_ascii_case(b"close");
        return Ok(());
    }
    if name.eq_ignore_ascii_case("transfer-encoding") {
        return Err("only Content-Length framing is read here".into());
    }
    const HOP_BY_HOP: [&str; 6] = [
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
        "proxy-authorization",
    ];
    if HOP_BY_HOP.iter().any(|hop| name.eq_ignore_ascii_case(hop)) {
        return Ok(());
    }
    if name.eq_ignore_ascii_case("content-length") {
        head.body = std::str::from_utf8(field.value)?.trim().parse()?;
    }
    head.bytes.extend_from_slice(name.as_bytes());
    head.bytes.extend_from_slice(b": ");
    head.bytes.extend_from_slice(field.value);
    head.bytes.extend_from_slice(b"\r\n");
    Ok(())
}

/// Writes `head` and its body from `from` to `to`: what was read with the head goes out with
/// it in one write, the rest as it arrives.
async fn pass_message(from: &mut Side, to: &mut Side, head: Head) -> Result<(), Error> {
    let mut out = head.bytes;
    out.extend_from_slice(b"\r\n");
    let in_buffer = head.body.min(from.filled - head.parsed);
    out.extend_from_slice(&from.read[head.parsed..head.parsed + in_buffer]);
    from.consume(head.parsed + in_buffer);
    to.stream.write_all(&out).await?;
    let mut left = head.body - in_buffer;
    while left > 0 {
        if !from.read_more().await? {
            return Err("the peer closed mid-body".into());
        }
        let chunk = left.min(from.filled);
        to.stream.write_all(&from.read[..chunk]).await?;
        from.consume(chunk);
        left -= chunk;
    }
    Ok(())
}
