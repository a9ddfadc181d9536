//! An upstream on a raw socket, for the tests that must see the exact bytes the proxy sends
//! and answer with bytes written by hand. It frames requests as a strict HTTP/1.1 server
//! does (a head to its blank line, then a body by its `Content-Length` or chunked), so that
//! a request the proxy smuggled inside another's body would be counted as a request of its
//! own; it records, per connection, every byte it received and every request's head and
//! body; and it answers each request as the test scripted for its path, `200 ok` otherwise.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::BoxError;

/// The answer to a path nothing was scripted for.
pub const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

/// What the upstream does with a request for a path, once its head has come.
#[derive(Clone, Copy)]
pub enum Reply {
    /// Reads the body, writes the bytes, and serves the next request on the connection
    /// (unless the request asked to close: HTTP/1.0, or `Connection: close`).
    Bytes(&'static [u8]),
    /// Reads the body, writes the bytes, and closes the connection.
    BytesThenClose(&'static [u8]),
    /// Hands the exchange to a function (its body not read yet).
    With(Handler),
}

/// A scripted exchange: what it does once the head has come, and what comes next.
pub type Handler = for<'a> fn(&'a mut Exchange) -> Pin<Box<dyn Future<Output = Next> + Send + 'a>>;

/// What a connection does after a handler's exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Reads the next request.
    Serve,
    /// Closes the connection.
    Close,
}

/// One request as the upstream framed it.
#[derive(Debug, Clone)]
pub struct Received {
    /// Which connection it came on: 0 for the first one accepted, and so on.
    pub connection: usize,
    /// The request line and fields, to the blank line, byte for byte.
    pub head: Vec<u8>,
    /// The body as its framing delimited it (chunked: decoded); `None` until it has all come.
    pub body: Option<Vec<u8>>,
}

impl Received {
    /// The request target (`/a` of `GET /a HTTP/1.1`), lossily as text.
    pub fn target(&self) -> String {
        String::from_utf8_lossy(target_of(&self.head)).into_owned()
    }
}

#[derive(Default)]
struct Log {
    /// Every byte received, per connection.
    bytes: Vec<Vec<u8>>,
    requests: Vec<Received>,
    /// How many of `requests` [`RawUpstream::take`] has handed out.
    taken: usize,
}

struct Shared {
    scripts: Vec<(&'static str, Reply)>,
    log: Mutex<Log>,
}

impl Shared {
    fn log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A raw-socket upstream, serving on the test's runtime.
pub struct RawUpstream {
    pub address: SocketAddr,
    shared: Arc<Shared>,
}

impl RawUpstream {
    /// An upstream answering every request `200 ok`.
    pub async fn start() -> Result<RawUpstream, BoxError> {
        RawUpstream::scripted(Vec::new()).await
    }

    /// An upstream answering a request for each path of `scripts` as it says, and `200 ok`
    /// to any other (a path is the target before any `?`).
    pub async fn scripted(scripts: Vec<(&'static str, Reply)>) -> Result<RawUpstream, BoxError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let upstream = RawUpstream {
            address: listener.local_addr()?,
            shared: Arc::new(Shared {
                scripts,
                log: Mutex::default(),
            }),
        };
        let shared = Arc::clone(&upstream.shared);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let connection = {
                    let mut log = shared.log();
                    log.bytes.push(Vec::new());
                    log.bytes.len() - 1
                };
                let exchange = Exchange {
                    stream,
                    buf: Vec::new(),
                    connection,
                    shared: Arc::clone(&shared),
                    head: Vec::new(),
                };
                tokio::spawn(serve(exchange));
            }
        });
        Ok(upstream)
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// How many connections it accepted.
    pub fn connections(&self) -> usize {
        self.shared.log().bytes.len()
    }

    /// Every request received, in the order their heads came (a head is recorded before its
    /// request is answered: once a client has the answer, the head is here).
    pub fn requests(&self) -> Vec<Received> {
        self.shared.log().requests.clone()
    }

    /// Every byte received on `connection`.
    pub fn bytes_on(&self, connection: usize) -> Vec<u8> {
        self.shared
            .log()
            .bytes
            .get(connection)
            .cloned()
            .unwrap_or_default()
    }

    /// The heads of the requests received since the last call.
    pub fn take(&self) -> Vec<Vec<u8>> {
        let mut log = self.shared.log();
        let new: Vec<Vec<u8>> = log.requests[log.taken..]
            .iter()
            .map(|r| r.head.clone())
            .collect();
        log.taken = log.requests.len();
        new
    }

    /// The heads of every request received.
    pub fn heads(&self) -> Vec<Vec<u8>> {
        self.requests().into_iter().map(|r| r.head).collect()
    }

    /// The last request head received, lossily as text, lowercased.
    pub fn last_head(&self) -> String {
        let log = self.shared.log();
        let head = log.requests.last().map(|r| r.head.as_slice());
        String::from_utf8_lossy(head.unwrap_or_default()).to_ascii_lowercase()
    }

    /// How many requests for `path` arrived.
    pub fn requests_to(&self, path: &str) -> usize {
        let log = self.shared.log();
        log.requests
            .iter()
            .filter(|r| path_of(target_of(&r.head)) == path.as_bytes())
            .count()
    }
}

/// One connection being served, handed to a [`Handler`] with the head of its current
/// request read.
pub struct Exchange {
    stream: TcpStream,
    /// What was read and not yet framed.
    buf: Vec<u8>,
    connection: usize,
    shared: Arc<Shared>,
    /// The current request's head.
    pub head: Vec<u8>,
}

impl Exchange {
    /// Reads what comes next into the buffer; false at the end of input (or an error).
    pub async fn read_more(&mut self) -> bool {
        let from = self.buf.len();
        match self.stream.read_buf(&mut self.buf).await {
            Ok(0) | Err(_) => false,
            Ok(_) => {
                let mut log = self.shared.log();
                log.bytes[self.connection].extend_from_slice(&self.buf[from..]);
                true
            }
        }
    }

    /// Reads the next request's head and records it; false if the connection ended first.
    pub async fn next_head(&mut self) -> bool {
        let end = loop {
            if let Some(at) = find(&self.buf, b"\r\n\r\n") {
                break at + 4;
            }
            if !self.read_more().await {
                return false;
            }
        };
        self.head = self.buf.drain(..end).collect();
        let mut log = self.shared.log();
        let received = Received {
            connection: self.connection,
            head: self.head.clone(),
            body: None,
        };
        log.requests.push(received);
        true
    }

    /// Reads the current request's body as its head frames it, and records it; `None` if the
    /// connection ended, or the framing broke, first.
    pub async fn read_body(&mut self) -> Option<Vec<u8>> {
        let body = if values_of(&self.head, "transfer-encoding").is_empty() {
            let length = values_of(&self.head, "content-length")
                .first()
                .map_or(Some(0), |v| std::str::from_utf8(v).ok()?.parse().ok())?;
            self.take_exactly(length).await?
        } else {
            self.read_chunked().await?
        };
        let mut log = self.shared.log();
        let connection = self.connection;
        if let Some(last) = log
            .requests
            .iter_mut()
            .rev()
            .find(|r| r.connection == connection)
        {
            last.body = Some(body.clone());
        }
        Some(body)
    }

    async fn take_exactly(&mut self, length: usize) -> Option<Vec<u8>> {
        while self.buf.len() < length {
            if !self.read_more().await {
                return None;
            }
        }
        Some(self.buf.drain(..length).collect())
    }

    async fn line(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some(at) = find(&self.buf, b"\r\n") {
                let line: Vec<u8> = self.buf.drain(..at + 2).collect();
                return Some(line[..at].to_vec());
            }
            if !self.read_more().await {
                return None;
            }
        }
    }

    /// A chunked body, decoded: hex sizes (extensions after `;` ignored), each chunk's data
    /// followed by CRLF, then trailer lines to an empty one.
    async fn read_chunked(&mut self) -> Option<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line = self.line().await?;
            let size = line.split(|&b| b == b';').next().unwrap_or_default();
            let size = std::str::from_utf8(size).ok()?;
            if size.is_empty() || !size.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            let size = usize::from_str_radix(size, 16).ok()?;
            if size == 0 {
                while !self.line().await?.is_empty() {}
                return Some(body);
            }
            body.extend(self.take_exactly(size).await?);
            if !self.line().await?.is_empty() {
                return None;
            }
        }
    }

    /// Writes `bytes`; false if the connection is gone.
    pub async fn write(&mut self, bytes: &[u8]) -> bool {
        self.stream.write_all(bytes).await.is_ok()
    }

    /// Reads (and records) whatever comes until the peer closes.
    pub async fn read_to_end(&mut self) {
        while self.read_more().await {
            self.buf.clear();
        }
    }

    /// The socket, and what was read of it and not framed, for an exchange that reads and
    /// writes at once.
    pub fn parts(&mut self) -> (&mut TcpStream, &mut Vec<u8>) {
        (&mut self.stream, &mut self.buf)
    }
}

async fn serve(mut exchange: Exchange) {
    while exchange.next_head().await {
        let target = target_of(&exchange.head).to_vec();
        let path = path_of(&target);
        let reply = exchange
            .shared
            .scripts
            .iter()
            .find(|(scripted, _)| scripted.as_bytes() == path)
            .map_or(Reply::Bytes(OK), |&(_, reply)| reply);
        let next = match reply {
            Reply::Bytes(bytes) | Reply::BytesThenClose(bytes) => {
                if exchange.read_body().await.is_none() || !exchange.write(bytes).await {
                    return;
                }
                if matches!(reply, Reply::BytesThenClose(_)) || asks_to_close(&exchange.head) {
                    Next::Close
                } else {
                    Next::Serve
                }
            }
            Reply::With(handler) => handler(&mut exchange).await,
        };
        if next == Next::Close {
            return;
        }
    }
}

/// HTTP/1.0 (nginx's default to its upstreams) or `Connection: close`: one request.
fn asks_to_close(head: &[u8]) -> bool {
    let request_line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    request_line.ends_with(b" HTTP/1.0")
        || values_of(head, "connection")
            .iter()
            .any(|v| v.eq_ignore_ascii_case(b"close"))
}

pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The request target of a head (`/a` of `GET /a HTTP/1.1`), as bytes.
pub fn target_of(head: &[u8]) -> &[u8] {
    head.split(|&b| b == b' ').nth(1).unwrap_or_default()
}

/// A target without its query.
fn path_of(target: &[u8]) -> &[u8] {
    target.split(|&b| b == b'?').next().unwrap_or_default()
}

/// Every value of field `name` in a head, as bytes, in order.
pub fn values_of<'h>(head: &'h [u8], name: &str) -> Vec<&'h [u8]> {
    head.split(|&b| b == b'\n')
        .skip(1)
        .filter_map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let colon = line.iter().position(|&b| b == b':')?;
            let (field_name, value) = line.split_at(colon);
            field_name
                .eq_ignore_ascii_case(name.as_bytes())
                .then(|| value[1..].trim_ascii())
        })
        .collect()
}
