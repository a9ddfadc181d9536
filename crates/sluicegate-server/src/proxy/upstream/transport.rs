//! How the proxy reaches its upstream: plain TCP or TLS (rustls), and HTTP/1.1 or h2 on it.
//!
//! Over TLS the protocol is agreed by ALPN, as nginx's `proxy_pass https://` with
//! `proxy_http_version` would: h2 when the upstream offers it (unless HTTP/1.1 is asked for),
//! else HTTP/1.1. Over plain TCP h2 is spoken only when asked for (prior knowledge: there is
//! nothing to agree it with).

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};

/// Which HTTP version the proxy speaks to its upstream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpstreamProtocol {
    /// HTTP/1.1 over plain TCP; over TLS, h2 if the upstream offers it by ALPN.
    #[default]
    Auto,
    /// HTTP/1.1 always.
    Http1,
    /// h2 always (over plain TCP by prior knowledge).
    H2,
}

/// A name that is not an upstream protocol.
#[derive(Debug, thiserror::Error)]
#[error("unknown upstream protocol {0:?} (expected auto, http1 or h2)")]
pub struct UnknownUpstreamProtocol(String);

impl FromStr for UpstreamProtocol {
    type Err = UnknownUpstreamProtocol;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "auto" => Ok(UpstreamProtocol::Auto),
            "http1" | "http/1.1" => Ok(UpstreamProtocol::Http1),
            "h2" | "http2" => Ok(UpstreamProtocol::H2),
            other => Err(UnknownUpstreamProtocol(other.to_owned())),
        }
    }
}

/// Why the upstream's TLS settings could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamTlsError {
    /// The trusted certificates file could not be read or holds no certificate.
    #[error("cannot read the upstream CA file {path}: {reason}")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The system's trusted certificates could not be read.
    #[error("cannot read the system's trusted certificates: {0}")]
    SystemRoots(String),
    /// The upstream's host is no name a certificate can be checked against.
    #[error("the upstream host {0:?} is no DNS name or IP address")]
    ServerName(String),
    /// rustls refused the settings.
    #[error("TLS settings: {0}")]
    Rustls(#[from] rustls::Error),
}

/// TLS to the upstream: the settings and the name its certificate must hold.
#[derive(Clone)]
pub(crate) struct Tls {
    pub(crate) connector: tokio_rustls::TlsConnector,
    pub(crate) server_name: ServerName<'static>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// TLS to `host`, trusting the certificates of `ca_file` (PEM), or the system's when
    /// none is given, and offering by ALPN what `protocol` allows.
    pub(crate) fn new(
        host: &str,
        ca_file: Option<&Path>,
        protocol: UpstreamProtocol,
    ) -> Result<Tls, UpstreamTlsError> {
        let roots = match ca_file {
            Some(path) => roots_from_file(path)?,
            None => system_roots()?,
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = match protocol {
            UpstreamProtocol::Auto => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            UpstreamProtocol::Http1 => vec![b"http/1.1".to_vec()],
            UpstreamProtocol::H2 => vec![b"h2".to_vec()],
        };
        // An IPv6 literal comes bracketed in a URL's authority.
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let server_name = ServerName::try_from(bare.to_owned())
            .map_err(|_| UpstreamTlsError::ServerName(host.to_owned()))?;
        Ok(Tls {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
            server_name,
        })
    }
}

fn roots_from_file(path: &Path) -> Result<RootCertStore, UpstreamTlsError> {
    let bad = |reason: String| UpstreamTlsError::CaFile {
        path: path.to_owned(),
        reason,
    };
    let mut roots = RootCertStore::empty();
    let certificates =
        CertificateDer::pem_file_iter(path).map_err(|error| bad(error.to_string()))?;
    for certificate in certificates {
        let certificate = certificate.map_err(|error| bad(error.to_string()))?;
        roots
            .add(certificate)
            .map_err(|error| bad(error.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad("it holds no PEM certificate".to_owned()));
    }
    Ok(roots)
}

fn system_roots() -> Result<RootCertStore, UpstreamTlsError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map_or_else(|| "none found".to_owned(), ToString::to_string);
        return Err(UpstreamTlsError::SystemRoots(why));
    }
    Ok(roots)
}
