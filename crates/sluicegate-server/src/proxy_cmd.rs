//! `sluicegate proxy`: the rate limiting reverse proxy (its engine is the library's
//! `proxy` module, beside `serve`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use sluicegate_server::flags::{duration_or_zero, positive_duration, reload_interval};
use sluicegate_server::proxy::{ForwardingFields, TlsFiles, UpstreamProtocol};
use sluicegate_server::redis_args::RedisArgs;

/// Arguments of `sluicegate proxy`.
#[derive(Debug, clap::Args)]
pub(crate) struct ProxyArgs {
    /// The upstream every request is passed to: `http://host:port` or `https://host:port`.
    #[arg(long, env = "SLUICEGATE_UPSTREAM")]
    upstream: String,
    /// The rule file (YAML; see docs/proxy.md), re-read when it changes.
    #[arg(long, env = "SLUICEGATE_PROXY_CONFIG")]
    config: PathBuf,
    /// Where clients connect (HTTP/1.1 and h2 with prior knowledge).
    #[arg(long, env = "SLUICEGATE_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Where `/metrics` (Prometheus), the live page and the manual switch (`PUT /admin/mode`)
    /// are served; `off` for nowhere.
    #[arg(long, env = "SLUICEGATE_ADMIN", default_value = "127.0.0.1:9091", value_parser = parse_admin)]
    admin: Admin,
    /// The token every admin API call must carry (`Authorization: Bearer TOKEN`); required
    /// when `--admin` is not a loopback address.
    #[arg(long, env = "SLUICEGATE_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// How long the upstream may take to answer a request's head once it has the whole
    /// request, or to take the next bytes of a request body, before a 504; and to send the
    /// next bytes of a response body before it is cut off (`60s`, `500ms`).
    #[arg(long, default_value = "60s", value_parser = positive_duration)]
    upstream_timeout: Duration,
    /// How long connecting to the upstream may take before a 502.
    #[arg(long, default_value = "5s", value_parser = positive_duration)]
    connect_timeout: Duration,
    /// How long an upstream connection may stay idle before it is closed (nginx's upstream
    /// `keepalive_timeout`); keep it below the upstream's own keep-alive timeout.
    #[arg(long, default_value = "60s", value_parser = positive_duration)]
    upstream_keepalive_timeout: Duration,
    /// How long a client may take to send a request head, the wait for the next request on
    /// an idle keep-alive connection included (nginx's `client_header_timeout`); the
    /// connection is closed when it runs out. An h2 connection with no request open for this
    /// long is told to go away and closed (nginx's `keepalive_timeout`).
    #[arg(long, default_value = "60s", value_parser = positive_duration)]
    client_header_timeout: Duration,
    /// How long a write to a client may wait for the client to read (nginx's
    /// `send_timeout`); a client that reads nothing of its response for this long has its
    /// connection closed.
    #[arg(long, default_value = "60s", value_parser = positive_duration)]
    client_send_timeout: Duration,
    /// How long a client may take to send the next bytes of a request body (nginx's
    /// `client_body_timeout`); a body that stops coming for this long is answered 408 (if the
    /// upstream has not answered yet) and its upstream connection closed. A slow upload that
    /// keeps coming is never cut.
    #[arg(long, default_value = "60s", value_parser = positive_duration)]
    client_body_timeout: Duration,
    /// The most bytes of a request body passed on (nginx's `client_max_body_size`; `1m`,
    /// `512k`, `2g` or bytes). A request announcing more is answered 413 before any limit
    /// counts it; one whose body comes without a length and grows past it has its upstream
    /// connection closed and is answered 413. Default: no bound (no body is held whole beyond
    /// `--client-body-buffer-size`).
    #[arg(long, value_parser = parse_positive_size)]
    client_max_body_size: Option<u64>,
    /// A request body whose `Content-Length` is at most this (`16k`, `1m` or bytes) is read
    /// whole from the client before the request goes to the upstream, so that a slow client
    /// holds no upstream connection while it sends it (nginx's `client_body_buffer_size` with
    /// `proxy_request_buffering on`); a body sent without a length (chunked) is read up to
    /// this first, and sent with its length if it ended within it. Longer bodies are
    /// streamed. `0`: every body is streamed as it comes.
    #[arg(long, default_value = "16k", value_parser = parse_size)]
    client_body_buffer_size: u64,
    /// The most bytes of a request head, its request line included (`32k`, `1m` or bytes; in
    /// line with nginx's `large_client_header_buffers 4 8k`). An HTTP/1.1 head past it is
    /// answered 431 and its connection closed; an h2 request whose header list is past it is
    /// answered 431 and its stream reset.
    #[arg(long, default_value = "32k", value_parser = parse_header_size)]
    client_max_header_size: usize,
    /// Keep request fields whose names hold an underscore (`X_Api_Key`; nginx's
    /// `underscores_in_headers on`). By default they are dropped before any limit and the
    /// upstream see the request, as nginx drops them: an upstream reading `HTTP_X_FORWARDED_FOR`
    /// could take `X_Forwarded_For` for the field the limits read.
    #[arg(long)]
    underscores_in_headers: bool,
    /// How long a connection the proxy closes while its client may still be sending (after a
    /// 413 on a request head, a 408, a denial whose body was not read) goes on reading and
    /// throwing away what the client sends, so that the client gets the answer and not a
    /// reset (nginx's `lingering_time`); `0` closes at once (nginx's `lingering_close off`).
    #[arg(long, default_value = "30s", value_parser = duration_or_zero)]
    lingering_time: Duration,
    /// How long a lingering connection waits for the client's next bytes before it is closed
    /// (nginx's `lingering_timeout`).
    #[arg(long, default_value = "5s", value_parser = positive_duration)]
    lingering_timeout: Duration,
    /// How often the rule file is checked for changes (at least 10 ms).
    #[arg(long, default_value = "1s", value_parser = reload_interval)]
    reload_interval: Duration,
    /// How long a shutdown (SIGTERM, Ctrl-C) waits for requests in flight and WebSockets
    /// open (then closed).
    #[arg(long, default_value = "30s", value_parser = positive_duration)]
    shutdown_grace: Duration,
    /// Shared counters: several proxies with the same Redis keep one budget.
    #[command(flatten)]
    redis: RedisArgs,
    /// After how many requests a thread serving clients offers its CPU to the other threads
    /// waiting for one (`sched_yield`), so that on cores shared with the app or its clients a
    /// busy worker does not keep its CPU for a whole scheduler slice while they wait (the tail
    /// of the latency then counts timer ticks); `0`: never. At the default, 64, the p99 of
    /// denied traffic on a 2-core machine shared by the proxy, its upstream and its clients was
    /// about half of nginx's, and twice it with `0` (BENCHMARKS.md).
    #[arg(long, default_value_t = 64)]
    yield_every: u32,
    /// Which forwarding fields the client's address is appended to: `both` (`X-Forwarded-For`
    /// and `Forwarded`), `x-forwarded-for` (nginx's `proxy_set_header X-Forwarded-For
    /// $proxy_add_x_forwarded_for`), `forwarded`, or `none`. A field not appended to is
    /// passed on as the client sent it.
    #[arg(long, default_value = "both", value_parser = parse_forwarding_fields)]
    forwarding_fields: ForwardingFields,
    /// For an `https://` upstream: the certificates (PEM) its certificate must chain to,
    /// instead of the system's trusted ones. The upstream's certificate is always verified.
    #[arg(long, value_name = "FILE")]
    upstream_ca: Option<PathBuf>,
    /// Which HTTP the proxy speaks to the upstream: `auto` (HTTP/1.1; h2 when an `https://`
    /// upstream offers it by ALPN), `http1`, or `h2` (over `http://` by prior knowledge).
    #[arg(long, default_value = "auto")]
    upstream_protocol: UpstreamProtocol,
    /// TLS on the listener: the certificate chain (PEM, the server's own first), with
    /// `--tls-key`. Clients then speak h2 or HTTP/1.1 as ALPN agrees; the two files are read
    /// again when they change (every `--reload-interval`).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of `--tls-cert`.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// How many threads serve clients, each with its own runtime and upstream connections, as
    /// nginx's worker processes, new connections spread evenly over them; 0 for one
    /// work-stealing runtime on every CPU. Default: the number of CPUs.
    #[arg(long, env = "SLUICEGATE_PROXY_WORKERS")]
    workers: Option<usize>,
    /// Log as JSON lines.
    #[arg(long)]
    pub(crate) log_json: bool,
}

#[derive(Debug, Clone, Copy)]
struct Admin(Option<SocketAddr>);

fn parse_admin(text: &str) -> Result<Admin, String> {
    if text == "off" {
        return Ok(Admin(None));
    }
    text.parse()
        .map(|a| Admin(Some(a)))
        .map_err(|_| format!("`{text}` is not an address (host:port) or `off`"))
}

fn parse_forwarding_fields(text: &str) -> Result<ForwardingFields, String> {
    match text {
        "both" => Ok(ForwardingFields::Both),
        "x-forwarded-for" => Ok(ForwardingFields::XForwardedFor),
        "forwarded" => Ok(ForwardingFields::Forwarded),
        "none" => Ok(ForwardingFields::Neither),
        _ => Err(format!(
            "`{text}` is not one of `both`, `x-forwarded-for`, `forwarded`, `none`"
        )),
    }
}

/// A size ([`parse_size`]) of at least one byte.
fn parse_positive_size(text: &str) -> Result<u64, String> {
    match parse_size(text)? {
        0 => Err("must be more than zero (leave the flag out for no bound)".to_owned()),
        size => Ok(size),
    }
}

/// A bound on request heads ([`parse_size`]): at least one byte, and no more than h2 can
/// announce (`SETTINGS_MAX_HEADER_LIST_SIZE` is 32 bits).
fn parse_header_size(text: &str) -> Result<usize, String> {
    let size = parse_size(text)?;
    if size == 0 {
        return Err("must be more than zero".to_owned());
    }
    u32::try_from(size)
        .ok()
        .and_then(|size| usize::try_from(size).ok())
        .ok_or_else(|| format!("`{text}` is more than a request head may be bounded to (4g - 1)"))
}

/// Bytes, or a count of them with nginx's suffixes: `k` (1024), `m`, `g`, either case.
fn parse_size(text: &str) -> Result<u64, String> {
    let (digits, unit) = match text.char_indices().last() {
        Some((at, suffix)) if suffix.is_ascii_alphabetic() => {
            let unit = match suffix.to_ascii_lowercase() {
                'k' => 1 << 10,
                'm' => 1 << 20,
                'g' => 1 << 30,
                _ => return Err(format!("`{suffix}` is not a size unit (k, m or g)")),
            };
            (&text[..at], unit)
        }
        _ => (text, 1),
    };
    let not_a_size = || format!("`{text}` is not a size (bytes, or a number with k, m or g)");
    // `u64`'s parser takes a leading `+`, which no size is written with.
    if !digits.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(not_a_size());
    }
    let count: u64 = digits.parse().map_err(|_| not_a_size())?;
    count
        .checked_mul(unit)
        .ok_or_else(|| format!("`{text}` is more bytes than a 64-bit count holds"))
}

impl ProxyArgs {
    fn workers(&self) -> usize {
        self.workers.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        })
    }

    fn config(&self) -> sluicegate_server::proxy::ProxyConfig {
        let mut config =
            sluicegate_server::proxy::ProxyConfig::new(&self.upstream, &self.config, self.listen);
        config.admin = self.admin.0;
        config.admin_token.clone_from(&self.admin_token);
        config.upstream_timeout = self.upstream_timeout;
        config.connect_timeout = self.connect_timeout;
        config.upstream_keepalive_timeout = self.upstream_keepalive_timeout;
        config.client_header_timeout = self.client_header_timeout;
        config.client_send_timeout = self.client_send_timeout;
        config.client_body_timeout = self.client_body_timeout;
        config.client_max_body_size = self.client_max_body_size;
        config.client_body_buffer_size = self.client_body_buffer_size;
        config.client_max_header_size = self.client_max_header_size;
        config.underscores_in_headers = self.underscores_in_headers;
        config.lingering_time = self.lingering_time;
        config.lingering_timeout = self.lingering_timeout;
        config.reload_interval = self.reload_interval;
        config.shutdown_grace = self.shutdown_grace;
        config.redis = self.redis.settings();
        config.yield_every = std::num::NonZeroU32::new(self.yield_every);
        config.forwarding_fields = self.forwarding_fields;
        config.upstream_ca.clone_from(&self.upstream_ca);
        config.upstream_protocol = self.upstream_protocol;
        config.tls = self
            .tls_cert
            .clone()
            .zip(self.tls_key.clone())
            .map(|(cert, key)| TlsFiles { cert, key });
        config.workers = self.workers();
        config
    }
}

/// Runs the proxy until SIGTERM or Ctrl-C, then stops accepting and lets requests in flight
/// finish.
pub(crate) fn run(args: &ProxyArgs, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    // With workers, this runtime only runs the admin listener, the rule file watcher and the
    // signals: one thread is plenty.
    let mut runtime = if args.workers() == 0 {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    let runtime = runtime.enable_all().build()?;
    runtime.block_on(async {
        let proxy = sluicegate_server::proxy::start(args.config()).await?;
        if let Some(admin) = proxy.admin_addr() {
            tracing::info!(%admin, "proxy: live page at http://{admin}/, metrics at /metrics");
        }
        shutdown.await;
        tracing::info!("shutting down");
        proxy.shutdown().await;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::{
        ForwardingFields, parse_forwarding_fields, parse_header_size, parse_positive_size,
        parse_size,
    };

    #[test]
    fn forwarding_fields_are_named_as_the_flag_documents_them() {
        assert_eq!(parse_forwarding_fields("both"), Ok(ForwardingFields::Both));
        assert_eq!(
            parse_forwarding_fields("x-forwarded-for"),
            Ok(ForwardingFields::XForwardedFor)
        );
        assert_eq!(
            parse_forwarding_fields("forwarded"),
            Ok(ForwardingFields::Forwarded)
        );
        assert_eq!(
            parse_forwarding_fields("none"),
            Ok(ForwardingFields::Neither)
        );
        let error = parse_forwarding_fields("xff").expect_err("xff");
        assert!(error.contains("`xff` is not one of"), "{error}");
    }

    #[test]
    fn sizes_read_as_nginx_writes_them() {
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("0"), Ok(0));
    }

    #[test]
    fn a_bad_size_says_what_is_wrong() {
        let error = |text| parse_positive_size(text).expect_err(text);
        assert!(error("0").contains("more than zero"));
        assert!(error("0k").contains("more than zero"));
        assert!(error("5t").contains("`t` is not a size unit"));
        assert!(error("m").contains("`m` is not a size"));
        assert!(error("-1").contains("`-1` is not a size"));
        assert!(error("+5").contains("`+5` is not a size"));
        assert!(error("1é").contains("not a size"));
        assert!(error("99999999999999999g").contains("64-bit"));
    }

    #[test]
    fn a_head_size_is_a_size_h2_can_announce() {
        assert_eq!(parse_header_size("32k"), Ok(32 << 10));
        assert_eq!(parse_header_size("4294967295"), Ok(4_294_967_295));
        let error = |text| parse_header_size(text).expect_err(text);
        assert!(error("0").contains("more than zero"));
        assert!(error("4g").contains("`4g` is more than a request head"));
    }
}
