//! How `sluicegate proxy` frames what clients send it (issue 30): each vector is written byte
//! for byte on a raw socket, to the proxy and to Debian's nginx in front of the same kind of
//! upstream, and the proxy must never make two upstream requests of one client request, nor
//! send anything upstream for a request it refuses, nor leave a broken upstream connection
//! for the next client. The upstream (`proxy_support::raw_upstream`) frames what it receives
//! as a strict server would and counts every request it finds.
//!
//! The proxy's server side is hyper's: where hyper answers otherwise than nginx 1.22, the table
//! says what each does, and why the difference is no way past the proxy. The upstream's side
//! (responses) is tests/proxy_framing_upstream.rs.

mod framing_support;
mod proxy_support;

use framing_support::{Forwarded, check_upstream_and_next, exchange, shown};
use proxy_support::raw_upstream::RawUpstream;
use proxy_support::{BoxError, Failures, Nginx, PASS_ALL, ProxyProcess};

type TestResult = Result<(), BoxError>;

/// One client request (or several, pipelined), and what becomes of it.
struct Vector {
    name: &'static str,
    /// Written in one write; the last request says `Connection: close`, or is refused.
    sent: Vec<u8>,
    /// The proxy's answers, as [`shown`].
    proxy: &'static [&'static str],
    /// nginx 1.22's answers to the same bytes.
    nginx: &'static [&'static str],
    /// What reaches the upstream through the proxy.
    forwarded: Forwarded,
    /// The upstream connection cannot carry another request.
    broke: bool,
}

const HELLO: Forwarded = &[("/a", Some(b"hello"))];

/// `POST /a` with `fields` (each with its CRLF), `Connection: close`, and `body`.
fn post(fields: &str, body: &[u8]) -> Vec<u8> {
    let mut sent =
        format!("POST /a HTTP/1.1\r\nhost: x\r\n{fields}connection: close\r\n\r\n").into_bytes();
    sent.extend_from_slice(body);
    sent
}

/// `GET /a` with `fields` (each with its CRLF) and `Connection: close`.
fn get(fields: &[u8]) -> Vec<u8> {
    [
        &b"GET /a HTTP/1.1\r\nhost: x\r\n"[..],
        fields,
        b"connection: close\r\n\r\n",
    ]
    .concat()
}

const CHUNKED_HELLO: &[u8] = b"5\r\nhello\r\n0\r\n\r\n";

/// Content-Length and Transfer-Encoding, alone, twice, listed and odd.
fn lengths_and_codings() -> Vec<Vector> {
    let te = |value: &str| format!("transfer-encoding: {value}\r\n");
    vec![
        Vector {
            // hyper lets the chunked framing override the length (RFC 9112 section 6.3), and
            // closes the connection after its answer, so nothing after the body is read as a
            // request; nginx refuses.
            name: "Content-Length and Transfer-Encoding",
            sent: post("content-length: 5\r\ntransfer-encoding: chunked\r\n", CHUNKED_HELLO),
            proxy: &["200 ok"],
            nginx: &["400"],
            forwarded: HELLO,
            broke: false,
        },
        Vector {
            // The one length hyper keeps is the one it read the body by; nginx refuses.
            name: "Content-Length twice, equal",
            sent: post("content-length: 5\r\ncontent-length: 5\r\n", b"hello"),
            proxy: &["200 ok"],
            nginx: &["400"],
            forwarded: HELLO,
            broke: false,
        },
        Vector {
            name: "Content-Length twice, different",
            sent: post("content-length: 5\r\ncontent-length: 6\r\n", b"hello!"),
            proxy: &["400"],
            nginx: &["400"],
            forwarded: &[],
            broke: false,
        },
        Vector {
            name: "Content-Length listed with a comma",
            sent: post("content-length: 5, 5\r\n", b"hello"),
            proxy: &["400"],
            nginx: &["400"],
            forwarded: &[],
            broke: false,
        },
        Vector {
            // Not chunked last: no length the body could be read by. nginx: 501 for any
            // coding it does not know.
            name: "Transfer-Encoding: chunked, identity",
            sent: post(&te("chunked, identity"), CHUNKED_HELLO),
            proxy: &["400"],
            nginx: &["501"],
            forwarded: &[],
            broke: false,
        },
        Vector {
            name: "Transfer-Encoding: identity, with a length",
            sent: post(&(te("identity") + "content-length: 5\r\n"), b"hello"),
            proxy: &["400"],
            nginx: &["501"],
            forwarded: &[],
            broke: false,
        },
        Vector {
            name: "Transfer-Encoding: gzip, without chunked",
            sent: post(&te("gzip"), b"hello"),
            proxy: &["400"],
            nginx: &["501"],
            forwarded: &[],
            broke: false,
        },
        Vector {
            name: "Transfer-Encoding:   ChUnKeD   (spaces, case)",
            sent: post(&te("  ChUnKeD  "), CHUNKED_HELLO),
            proxy: &["200 ok"],
            nginx: &["200 ok"],
            forwarded: HELLO,
            broke: false,
        },
        Vector {
            // `chunked` once is the only coding passed; nginx refuses a second line of it
            // with a 400.
            name: "Transfer-Encoding: chunked, given twice",
            sent: post(&(te("chunked") + &te("chunked")), CHUNKED_HELLO),
            proxy: &["501"],
            nginx: &["400"],
            forwarded: &[],
            broke: false,
        },
        Vector {
            // hyper would decode the chunks alone, and the upstream get gzip-coded bytes with
            // nothing saying so: refused, as nginx refuses it.
            name: "Transfer-Encoding: gzip, chunked",
            sent: post(&te("gzip, chunked"), CHUNKED_HELLO),
            proxy: &["501"],
            nginx: &["501"],
            forwarded: &[],
            broke: false,
        },
        Vector {
            name: "Transfer-Encoding on HTTP/1.0",
            sent: b"POST /a HTTP/1.0\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
                .to_vec(),
            proxy: &["400"],
            nginx: &["400"],
            forwarded: &[],
            broke: false,
        },
        Vector {
            // hyper reads the body by its chunks and closes after its answer: the request
            // after the chunked end, which a server reading by the length would take for the
            // next one, is never read.
            name: "Content-Length 4 over a chunked body smuggling a request",
            sent: b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\ntransfer-encoding: chunked\r\n\r\n\
                    0\r\n\r\nGET /smuggled HTTP/1.1\r\nhost: x\r\n\r\n"
                .to_vec(),
            proxy: &["200 ok"],
            nginx: &["400"],
            forwarded: &[("/a", Some(b""))],
            broke: false,
        },
    ]
}

/// Line endings and fields hyper's parser must refuse or read as nginx does.
fn heads() -> Vec<Vector> {
    vec![
        Vector {
            name: "bare LF line endings",
            sent: b"GET /a HTTP/1.1\nhost: x\nconnection: close\n\n".to_vec(),
            proxy: &["200 ok"],
            nginx: &["200 ok"],
            forwarded: &[("/a", Some(b""))],
            broke: false,
        },
        Vector {
            name: "obs-fold (a field continued on the next line)",
            sent: get(b"x-a: 1\r\n continued\r\n"),
            proxy: &["400"],
            nginx: &["400"],
            forwarded: &[],
            broke: false,
        },
        Vector {
            name: "a space before the colon",
            sent: get(b"transfer-encoding : chunked\r\n"),
            proxy: &["400"],
            nginx: &["400"],
            forwarded: &[],
            broke: false,
        },
        Vector {
            // nginx drops a field whose name is not a token (`ignore_invalid_headers`) and
            // passes the request; hyper refuses it: nothing of it reaches the upstream.
            name: "a field name that is not a token",
            sent: get(b"x{a}: 1\r\n"),
            proxy: &["400"],
            nginx: &["200 ok"],
            forwarded: &[],
            broke: false,
        },
        Vector {
            name: "NUL in a field value",
            sent: get(b"x-a: a\0b\r\n"),
            proxy: &["400"],
            nginx: &["400"],
            forwarded: &[],
            broke: false,
        },
        Vector {
            name: "a bare CR in a field value",
            sent: get(b"x-a: a\rb\r\n"),
            proxy: &["400"],
            nginx: &["400"],
            forwarded: &[],
            broke: false,
        },
    ]
}

/// Requests one after the other in one write, and one hidden in another's body.
fn pipelined() -> Vec<Vector> {
    vec![
        Vector {
            name: "two GETs in one write",
            sent: b"GET /a HTTP/1.1\r\nhost: x\r\n\r\nGET /b HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
                .to_vec(),
            proxy: &["200 ok", "200 ok"],
            nginx: &["200 ok", "200 ok"],
            forwarded: &[("/a", Some(b"")), ("/b", Some(b""))],
            broke: false,
        },
        Vector {
            name: "three requests in one write, the second with a body",
            sent: b"GET /a HTTP/1.1\r\nhost: x\r\n\r\n\
                    POST /b HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello\
                    GET /c HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
                .to_vec(),
            proxy: &["200 ok", "200 ok", "200 ok"],
            nginx: &["200 ok", "200 ok", "200 ok"],
            forwarded: &[("/a", Some(b"")), ("/b", Some(b"hello")), ("/c", Some(b""))],
            broke: false,
        },
        Vector {
            // A body is a body: the upstream reads it by its length, as one request.
            name: "a body that holds a second request",
            sent: post(
                "content-length: 35\r\n",
                b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
            ),
            proxy: &["200 ok"],
            nginx: &["200 ok"],
            forwarded: &[("/a", Some(b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"))],
            broke: false,
        },
    ]
}

/// Chunked bodies: broken sizes, extensions, trailers.
fn chunks() -> Vec<Vector> {
    let chunked = |body: &[u8]| post("transfer-encoding: chunked\r\n", body);
    // Past the 16 KiB read whole first: the request is on its way upstream when the bad size
    // comes. nginx reads the whole body before it sends anything (`proxy_request_buffering`).
    let mut streamed_then_bad = format!("{:x}\r\n", 20_000).into_bytes();
    streamed_then_bad.extend_from_slice(&[b'x'; 20_000]);
    streamed_then_bad.extend_from_slice(b"\r\nzz\r\nhello\r\n0\r\n\r\n");
    vec![
        Vector {
            name: "a chunk size that is not hex",
            sent: chunked(b"zz\r\nhello\r\n0\r\n\r\n"),
            proxy: &["400 the request body failed"],
            nginx: &["400"],
            forwarded: &[],
            broke: false,
        },
        Vector {
            name: "a chunk size past 64 bits",
            sent: chunked(b"fffffffffffffffff1\r\nhello\r\n0\r\n\r\n"),
            proxy: &["400 the request body failed"],
            nginx: &["400"],
            forwarded: &[],
            broke: false,
        },
        Vector {
            name: "a negative chunk size",
            sent: chunked(b"-5\r\nhello\r\n0\r\n\r\n"),
            proxy: &["400 the request body failed"],
            nginx: &["400"],
            forwarded: &[],
            broke: false,
        },
        Vector {
            name: "a chunk longer than its size",
            sent: chunked(b"3\r\nhello\r\n0\r\n\r\n"),
            proxy: &["400 the request body failed"],
            nginx: &["400"],
            forwarded: &[],
            broke: false,
        },
        Vector {
            // The upstream saw the head and the start of a chunked body, then its connection
            // closed: it cannot take the cut body for whole, and the connection is gone.
            name: "a bad chunk size after 20 KB were streamed",
            sent: chunked(&streamed_then_bad),
            proxy: &["400 the request body failed"],
            nginx: &["400"],
            forwarded: &[("/a", None)],
            broke: true,
        },
        Vector {
            name: "chunk extensions",
            sent: chunked(b"5;name=value;x=\"q\"\r\nhello\r\n0;end\r\n\r\n"),
            proxy: &["200 ok"],
            nginx: &["200 ok"],
            forwarded: HELLO,
            broke: false,
        },
        Vector {
            // Trailers are read to their end and dropped (as nginx does): the next request
            // starts right after them.
            name: "trailers, then a pipelined request",
            sent: b"POST /a HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n\
                    5\r\nhello\r\n0\r\nx-trailer: 1\r\nx-other: 2\r\n\r\n\
                    GET /b HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
                .to_vec(),
            proxy: &["200 ok", "200 ok"],
            nginx: &["200 ok", "200 ok"],
            forwarded: &[("/a", Some(b"hello")), ("/b", Some(b""))],
            broke: false,
        },
    ]
}

/// Answers as the tables show them: a failed body's 400 says so, and the text of any other
/// refusal (the proxy's, nginx's page) is left out.
fn table_shown(answers: &[framing_support::Answer]) -> Vec<String> {
    shown(answers)
        .into_iter()
        .map(|text| {
            if text.contains(": the request body failed") {
                format!("{} the request body failed", &text[..3])
            } else if text.starts_with("400") || text.starts_with("501") {
                text[..3].to_owned()
            } else {
                text
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_vector_is_framed_once_or_refused_before_the_upstream() -> TestResult {
    let upstream = RawUpstream::start().await?;
    // One worker: one pool, so that a broken connection left in it would be the next one used.
    let proxy = ProxyProcess::start(&upstream.url(), PASS_ALL, &["--workers", "1"])?;
    let nginx_upstream = RawUpstream::start().await?;
    let nginx = Nginx::start(&format!(
        "upstream app {{ server {}; }}\nserver {{ listen LISTEN; location / {{ proxy_pass http://app; }} }}",
        nginx_upstream.address
    ))?;
    let mut failures = Failures::default();
    let vectors = [lengths_and_codings(), heads(), pipelined(), chunks()];
    for vector in vectors.iter().flatten() {
        let what = vector.name;
        let since = upstream.requests().len();
        let answers = exchange(proxy.address, &vector.sent, false).await?;
        failures.check(
            &format!("{what}: the proxy's answers"),
            table_shown(&answers),
            vector.proxy.iter().map(|s| (*s).to_owned()).collect(),
        );
        let at_nginx = exchange(nginx.address, &vector.sent, false).await?;
        failures.check(
            &format!("{what}: nginx's answers"),
            table_shown(&at_nginx),
            vector.nginx.iter().map(|s| (*s).to_owned()).collect(),
        );
        check_upstream_and_next(
            &mut failures,
            (proxy.address, &upstream),
            what,
            since,
            vector.forwarded,
            vector.broke,
        )
        .await?;
    }
    failures.assert_none(&format!("proxy log:\n{}", proxy.log_text()));
    Ok(())
}
