//! `sluicegate serve` flags, each also read from a `SLUICEGATE_*` environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use sluicegate_rules::LoadOptions;

use crate::flags::{duration_or_zero, positive_duration, reload_interval};
use crate::redis_args::RedisArgs;

use crate::serve::clock::ServiceClock;
use crate::serve::counters::BackendOptions;
use crate::serve::engine::EngineOptions;
use crate::serve::grpc_options::{GrpcOptions, GrpcServer, Keepalive};
use crate::serve::headers::{HeaderOptions, LegacyHeaderNames};
use crate::serve::key_cap::DEFAULT_MAX_KEYS;
use crate::serve::protocol::CallLimits;
use crate::serve::server::ServerConfig;

/// Serve the rate limit service (Envoy gRPC and HTTP JSON).
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Rule file, or directory of rule files, in envoyproxy/ratelimit's YAML format.
    #[arg(long, env = "SLUICEGATE_CONFIG")]
    pub config: PathBuf,
    /// Where to listen for gRPC (`envoy.service.ratelimit.v3.RateLimitService`).
    #[arg(long, env = "SLUICEGATE_GRPC_ADDR", default_value = "127.0.0.1:8081")]
    pub grpc_addr: SocketAddr,
    /// Which server answers gRPC: `lean` (h2 with a hand-written unary layer) or `tonic` (the
    /// earlier path, kept to compare against). Both give the same answers.
    #[arg(long, env = "SLUICEGATE_GRPC_SERVER", value_enum, default_value_t = GrpcServer::Lean)]
    pub grpc_server: GrpcServer,
    /// Send an HTTP/2 PING on every gRPC connection this often (`30s`), and close a connection
    /// that leaves one unanswered for --grpc-keepalive-timeout. Off by default: the client's
    /// PINGs are always answered.
    #[arg(long, env = "SLUICEGATE_GRPC_KEEPALIVE_INTERVAL", value_parser = positive_duration)]
    pub grpc_keepalive_interval: Option<Duration>,
    /// How long a keepalive PING may go unanswered.
    #[arg(long, env = "SLUICEGATE_GRPC_KEEPALIVE_TIMEOUT", default_value = "20s", value_parser = positive_duration)]
    pub grpc_keepalive_timeout: Duration,
    /// How long a call's request message may take to arrive whole on the lean gRPC server,
    /// whatever deadline the call sets; a call past it is answered DEADLINE_EXCEEDED.
    #[arg(long, env = "SLUICEGATE_GRPC_MESSAGE_TIMEOUT", default_value = "10s", value_parser = positive_duration)]
    pub grpc_message_timeout: Duration,
    /// How many threads serve gRPC connections on the lean server, each with its own runtime,
    /// new connections spread evenly over them; 0 serves them on the service's runtime.
    /// Default: the number of CPUs in memory; 0 with Redis, whose connection runs on the
    /// service's runtime (a worker's call to it would cross threads both ways). Only the lean
    /// server has workers: `--grpc-server tonic` serves on the service's runtime.
    #[arg(long, env = "SLUICEGATE_GRPC_WORKERS")]
    pub grpc_workers: Option<usize>,
    /// Where to listen for HTTP (`/json`, `/healthcheck`, `/rlconfig`, `/metrics`).
    #[arg(long, env = "SLUICEGATE_HTTP_ADDR", default_value = "127.0.0.1:8080")]
    pub http_addr: SocketAddr,
    /// Where to serve the live page and the manual switch (`/`, `/admin/stats`,
    /// `/admin/mode`). Off loopback, --admin-token is required.
    #[arg(long, env = "SLUICEGATE_ADMIN_ADDR", default_value = "127.0.0.1:8082")]
    pub admin_addr: SocketAddr,
    /// Don't serve the admin page and API at all.
    #[arg(long, env = "SLUICEGATE_NO_ADMIN")]
    pub no_admin: bool,
    /// The bearer token every admin API call must carry (`Authorization: Bearer TOKEN`).
    #[arg(long, env = "SLUICEGATE_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Keep the manual switch's modes in this JSON file, so a restart keeps them.
    #[arg(long, env = "SLUICEGATE_MODES_FILE")]
    pub modes_file: Option<PathBuf>,
    /// Merge rule files that name the same domain (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG).
    #[arg(long, env = "SLUICEGATE_MERGE_DOMAINS")]
    pub merge_domains: bool,
    /// Answer OK to everything while still deciding and counting (a dry run).
    #[arg(long, env = "SLUICEGATE_SHADOW_MODE")]
    pub shadow_mode: bool,
    /// Add the legacy `X-RateLimit-Limit`, `-Remaining` and `-Reset` headers.
    #[arg(long, env = "SLUICEGATE_LEGACY_HEADERS")]
    pub legacy_headers: bool,
    /// Leave out the IETF `RateLimit-Policy` and `RateLimit` headers.
    #[arg(long, env = "SLUICEGATE_NO_IETF_HEADERS")]
    pub no_ietf_headers: bool,
    /// Count every hit in every limit the call names, even when denied, as
    /// envoyproxy/ratelimit does (by default a denied call charges nothing). In memory and on
    /// Redis alike; every limit's algorithm must be able to count denials.
    #[arg(long, env = "SLUICEGATE_COUNT_DENIED")]
    pub count_denied: bool,
    /// The most counter keys held in memory, across every limit (about 150 bytes each with
    /// typical descriptors). At the cap a request that needs a new key is decided uncharged,
    /// by --failure-policy (`closed` denies it; `open` and `local` let it through if its limits
    /// would); no key still limited is ever dropped to make room.
    #[arg(long, env = "SLUICEGATE_MAX_KEYS", default_value_t = DEFAULT_MAX_KEYS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_keys: usize,
    /// The most descriptors in one request (more: gRPC INVALID_ARGUMENT, HTTP 400).
    #[arg(long, env = "SLUICEGATE_MAX_DESCRIPTORS", default_value_t = CallLimits::default().max_descriptors)]
    pub max_descriptors: usize,
    /// The most entries in one descriptor (more: gRPC INVALID_ARGUMENT, HTTP 400).
    #[arg(long, env = "SLUICEGATE_MAX_ENTRIES", default_value_t = CallLimits::default().max_entries)]
    pub max_entries: usize,
    /// The most bytes of keys and values in one descriptor, which bounds a counter key's
    /// length (more: gRPC INVALID_ARGUMENT, HTTP 400).
    #[arg(long, env = "SLUICEGATE_MAX_DESCRIPTOR_BYTES", default_value_t = CallLimits::default().max_descriptor_bytes)]
    pub max_descriptor_bytes: usize,
    /// Write logs as JSON lines (for log collectors) instead of text.
    #[arg(long, env = "SLUICEGATE_LOG_JSON")]
    pub log_json: bool,
    /// How often to check the rules for changes (`500ms`, `2s`; at least 10 ms), as the
    /// proxy's flag of the same name.
    #[arg(long, env = "SLUICEGATE_RELOAD_INTERVAL", default_value = "1s", value_parser = reload_interval)]
    pub reload_interval: Duration,
    /// How long a shutdown (SIGTERM, Ctrl-C) waits for the calls in flight and the connections
    /// told to close, as the proxy's flag of the same name; those left then are closed.
    #[arg(long, env = "SLUICEGATE_SHUTDOWN_GRACE", default_value = "30s", value_parser = duration_or_zero)]
    pub shutdown_grace: Duration,
    /// How long a client of the HTTP and admin listeners may take to send a request head, the
    /// wait for the next one on an idle keep-alive connection included; the connection is
    /// closed when it runs out (nginx's `client_header_timeout`, the proxy's flag of the same
    /// name).
    #[arg(long, env = "SLUICEGATE_CLIENT_HEADER_TIMEOUT", default_value = "60s", value_parser = positive_duration)]
    pub client_header_timeout: Duration,
    /// How long a client of the HTTP and admin listeners may take to send the next bytes of
    /// a request body (nginx's `client_body_timeout`, the proxy's flag of the same name); a
    /// body that stops coming for this long is answered 400 and its connection closed.
    #[arg(long, env = "SLUICEGATE_CLIENT_BODY_TIMEOUT", default_value = "60s", value_parser = positive_duration)]
    pub client_body_timeout: Duration,
    /// The same in milliseconds: the flag's older form, still taken.
    #[arg(long, env = "SLUICEGATE_RELOAD_INTERVAL_MS", hide = true, conflicts_with = "reload_interval", value_parser = clap::value_parser!(u64).range(10..))]
    pub reload_interval_ms: Option<u64>,
    /// Redis: shared counters, and the failure policy.
    #[command(flatten)]
    pub redis: RedisArgs,
}

impl ServeArgs {
    /// The resolved configuration (the second phase after reading flags).
    pub fn to_config(&self) -> ServerConfig {
        ServerConfig {
            rules: self.config.clone(),
            load_options: LoadOptions::default().merge_domains(self.merge_domains),
            grpc_addr: self.grpc_addr,
            http_addr: self.http_addr,
            engine: EngineOptions {
                headers: HeaderOptions {
                    ietf: !self.no_ietf_headers,
                    legacy: self.legacy_headers.then(LegacyHeaderNames::default),
                    retry_after: true,
                },
                shadow_mode: self.shadow_mode,
                backend: self.backend(),
                count_denied: self.count_denied,
                clock: ServiceClock::system(),
                max_keys: self.max_keys,
                at_key_cap: self.redis.failure_policy.into(),
                call_limits: CallLimits {
                    max_descriptors: self.max_descriptors,
                    max_entries: self.max_entries,
                    max_descriptor_bytes: self.max_descriptor_bytes,
                },
                modes_file: self.modes_file.clone(),
            },
            reload_interval: self
                .reload_interval_ms
                .map_or(self.reload_interval, Duration::from_millis),
            shutdown_grace: self.shutdown_grace,
            client_header_timeout: self.client_header_timeout,
            client_body_timeout: self.client_body_timeout,
            admin_addr: (!self.no_admin).then_some(self.admin_addr),
            admin_token: self.admin_token.clone(),
            grpc: GrpcOptions {
                server: self.grpc_server,
                keepalive: self.grpc_keepalive_interval.map(|interval| Keepalive {
                    interval,
                    timeout: self.grpc_keepalive_timeout,
                }),
                message_timeout: self.grpc_message_timeout,
                workers: self.grpc_workers.unwrap_or_else(|| match self.backend() {
                    BackendOptions::Memory => GrpcOptions::default_workers(),
                    BackendOptions::Redis(_) => 0,
                }),
            },
        }
    }

    /// Where counters live: Redis if a server or cluster is named, memory otherwise.
    fn backend(&self) -> BackendOptions {
        match self.redis.settings() {
            Some(settings) => BackendOptions::Redis(settings),
            None => BackendOptions::Memory,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::counters::RedisTarget;
    use clap::Parser;
    use sluicegate_redis::FailurePolicy;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn backend(args: &[&str]) -> Result<BackendOptions, clap::Error> {
        let cli = Cli::try_parse_from(["sluicegate", "--config", "rules"].iter().chain(args))?;
        Ok(cli.serve.to_config().engine.backend)
    }

    #[test]
    fn the_reload_interval_is_a_duration_and_its_older_millisecond_flag_still_counts()
    -> Result<(), clap::Error> {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(["sluicegate", "--config", "rules"].iter().chain(args))
                .map(|cli| cli.serve.to_config().reload_interval)
        };
        assert_eq!(parse(&[])?, Duration::from_secs(1));
        assert_eq!(
            parse(&["--reload-interval", "250ms"])?,
            Duration::from_millis(250)
        );
        assert_eq!(
            parse(&["--reload-interval-ms", "300"])?,
            Duration::from_millis(300)
        );
        assert!(parse(&["--reload-interval", "5ms"]).is_err());
        assert!(parse(&["--reload-interval", "1s", "--reload-interval-ms", "300"]).is_err());
        Ok(())
    }

    #[test]
    fn grpc_is_served_lean_without_keepalive_unless_asked() -> Result<(), clap::Error> {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(["sluicegate", "--config", "rules"].iter().chain(args))
                .map(|cli| cli.serve.to_config().grpc)
        };
        assert_eq!(parse(&[])?, GrpcOptions::default());
        assert_eq!(parse(&[])?.server, GrpcServer::Lean);
        assert_eq!(
            parse(&["--grpc-server", "tonic"])?.server,
            GrpcServer::Tonic
        );
        assert_eq!(
            parse(&["--grpc-keepalive-interval", "30s"])?.keepalive,
            Some(Keepalive {
                interval: Duration::from_secs(30),
                timeout: Duration::from_secs(20),
            })
        );
        let both = [
            "--grpc-keepalive-interval",
            "1s",
            "--grpc-keepalive-timeout",
            "500ms",
        ];
        assert_eq!(
            parse(&both)?.keepalive.map(|k| k.timeout),
            Some(Duration::from_millis(500))
        );
        assert!(parse(&["--grpc-server", "grpcio"]).is_err());
        assert!(parse(&["--grpc-keepalive-interval", "0s"]).is_err());
        assert_eq!(
            parse(&["--grpc-message-timeout", "2s"])?.message_timeout,
            Duration::from_secs(2)
        );
        assert!(parse(&["--grpc-message-timeout", "0s"]).is_err());
        Ok(())
    }

    #[test]
    fn grpc_workers_default_to_the_cpus_in_memory_and_to_none_with_redis() -> Result<(), clap::Error>
    {
        let workers = |args: &[&str]| {
            Cli::try_parse_from(["sluicegate", "--config", "rules"].iter().chain(args))
                .map(|cli| cli.serve.to_config().grpc.workers)
        };
        assert_eq!(workers(&[])?, GrpcOptions::default_workers());
        assert_eq!(workers(&["--redis", "redis://127.0.0.1:6379"])?, 0);
        assert_eq!(
            workers(&["--redis", "redis://127.0.0.1:6379", "--grpc-workers", "3"])?,
            3
        );
        assert_eq!(workers(&["--grpc-workers", "0"])?, 0);
        Ok(())
    }

    #[test]
    fn count_denied_is_off_unless_asked() -> Result<(), clap::Error> {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(["sluicegate", "--config", "rules"].iter().chain(args))
                .map(|cli| cli.serve.to_config().engine.count_denied)
        };
        assert!(!parse(&[])?);
        assert!(parse(&["--count-denied"])?);
        Ok(())
    }

    #[test]
    fn redis_flags_resolve_to_a_backend() -> Result<(), Box<dyn std::error::Error>> {
        assert!(matches!(backend(&[])?, BackendOptions::Memory));
        let BackendOptions::Redis(single) = backend(&["--redis", "redis://r:6379"])? else {
            return Err("--redis is a Redis backend".into());
        };
        assert_eq!(single.target, RedisTarget::Single("redis://r:6379".into()));
        assert_eq!(single.prefix, "sluicegate:");
        assert_eq!(single.timeout, Duration::from_millis(50));
        assert_eq!(single.failure_policy, FailurePolicy::Local);
        let cluster_args = [
            "--redis-cluster",
            "redis://a:1,redis://b:2",
            "--failure-policy",
            "closed",
            "--redis-timeout-ms",
            "20",
            "--redis-prefix",
            "rl:",
        ];
        let BackendOptions::Redis(cluster) = backend(&cluster_args)? else {
            return Err("--redis-cluster is a Redis backend".into());
        };
        assert_eq!(
            cluster.target,
            RedisTarget::Cluster(vec!["redis://a:1".into(), "redis://b:2".into()])
        );
        assert_eq!(
            (
                cluster.failure_policy,
                cluster.timeout,
                cluster.prefix.as_str()
            ),
            (FailurePolicy::Closed, Duration::from_millis(20), "rl:")
        );
        assert!(backend(&["--redis", "redis://a", "--redis-cluster", "redis://b"]).is_err());
        assert!(backend(&["--redis", "redis://a", "--failure-policy", "maybe"]).is_err());
        assert!(backend(&["--redis", "redis://a", "--redis-timeout-ms", "0"]).is_err());
        Ok(())
    }

    #[test]
    fn the_over_limit_cache_is_off_unless_given_entries() -> Result<(), Box<dyn std::error::Error>>
    {
        let entries = |args: &[&str]| -> Result<usize, Box<dyn std::error::Error>> {
            match backend(&[&["--redis", "redis://r:6379"], args].concat())? {
                BackendOptions::Redis(settings) => Ok(settings.over_limit_cache),
                BackendOptions::Memory => Err("--redis is a Redis backend".into()),
            }
        };
        assert_eq!(entries(&[])?, 0);
        assert_eq!(entries(&["--redis-over-limit-cache", "10000"])?, 10_000);
        assert!(entries(&["--redis-over-limit-cache", "-1"]).is_err());
        Ok(())
    }

    #[test]
    fn leasing_is_off_unless_given_permits() -> Result<(), Box<dyn std::error::Error>> {
        let leasing = |args: &[&str]| -> Result<_, Box<dyn std::error::Error>> {
            match backend(&[&["--redis", "redis://r:6379"], args].concat())? {
                BackendOptions::Redis(settings) => Ok(settings.leasing),
                BackendOptions::Memory => Err("--redis is a Redis backend".into()),
            }
        };
        assert_eq!(leasing(&[])?, None);
        let on = leasing(&["--redis-lease", "32", "--redis-lease-life-ms", "10"])?
            .ok_or("--redis-lease 32 leases")?;
        assert_eq!(
            (on.sizing.max_per_key, on.sizing.life, on.sizing.horizon),
            (32, 10_000, 5_000)
        );
        assert_eq!(on.sizing.max_per_process, 4096);
        assert!(leasing(&["--redis-lease", "8", "--redis-lease-life-ms", "0"]).is_err());
        Ok(())
    }
}
