//! What can go wrong loading a rule file or starting the proxy.

use std::path::PathBuf;

use sluicegate_rules::Position;

/// One problem in a rule file, where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleProblem {
    /// Line and column.
    pub pos: Position,
    /// What is wrong.
    pub message: String,
}

/// A rule file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuleFileError {
    /// The file cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is read but wrong: every problem, as `file:line:column: message` lines.
    #[error("{}", render(path, problems))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every problem found, in file order.
        problems: Vec<RuleProblem>,
    },
}

fn render(path: &std::path::Path, problems: &[RuleProblem]) -> String {
    let mut sorted: Vec<&RuleProblem> = problems.iter().collect();
    sorted.sort_by_key(|p| p.pos);
    let lines: Vec<String> = sorted
        .iter()
        .map(|p| format!("{}:{}: {}", path.display(), p.pos, p.message))
        .collect();
    lines.join("\n")
}

/// The proxy cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The rule file cannot be used.
    #[error(transparent)]
    Rules(#[from] RuleFileError),
    /// The listener's TLS certificate or key cannot be used.
    #[error("{0}")]
    ListenerTls(#[from] crate::plumbing::TlsError),
    /// TLS to an `https://` upstream cannot be set up.
    #[error("upstream TLS: {0}")]
    UpstreamTls(#[from] crate::proxy::upstream::UpstreamTlsError),
    /// The upstream URL is not `http[s]://host[:port][/]`.
    #[error("upstream `{url}`: {reason}")]
    Upstream {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A route's rate limit layer cannot be built.
    #[error("a route's rate limit layer: {0}")]
    Layer(#[from] sluicegate_http::rate_limit::BuildError),
    /// The Redis settings are wrong (a bad URL or key prefix).
    #[error("redis: {0}")]
    Redis(String),
    /// A listening address cannot be bound. The operating system's reason is the source,
    /// told once, after this.
    #[error("cannot listen on {address} (choose another with {flag})")]
    Bind {
        /// The address.
        address: std::net::SocketAddr,
        /// The flag that sets it (`--listen`, `--admin`).
        flag: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The admin address is not loopback and no token guards its switch.
    #[error(
        "--admin {address} is not a loopback address: set --admin-token (or \
         SLUICEGATE_ADMIN_TOKEN) so that only holders of the token can switch limits"
    )]
    AdminNeedsToken {
        /// The address.
        address: std::net::SocketAddr,
    },
}
