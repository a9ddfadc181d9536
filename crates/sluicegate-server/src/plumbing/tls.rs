//! TLS at a listener (rustls): h2 or HTTP/1.1 agreed by ALPN, and the certificate and key
//! files re-read when they change, as `nginx -s reload` would pick up a renewed certificate,
//! without a restart. A pair that does not load is logged and the one in force stays.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::plumbing::rule_watcher::RuleWatcher;

/// The files a TLS listener's certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, PEM, the server's own first.
    pub cert: PathBuf,
    /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Why a certificate and key could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The certificate file could not be read, or holds no certificate.
    #[error("cannot read the TLS certificate file {path}: {reason}")]
    Cert {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The key file could not be read, or holds no private key.
    #[error("cannot read the TLS key file {path}: {reason}")]
    Key {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The key is not the certificate's, or rustls cannot use them.
    #[error("the TLS certificate {cert} and key {key} cannot be used together: {reason}")]
    Pair {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls said.
        reason: String,
    },
    /// rustls refused the settings.
    #[error("TLS settings: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The certificate in force, swapped whole when the files change.
#[derive(Debug)]
struct Reloading(ArcSwap<CertifiedKey>);

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.load_full())
    }
}

/// A listener's TLS: the acceptor, and the task that re-reads the files every
/// `poll` (ended when the handle is dropped or aborted).
pub(crate) fn tls_acceptor(
    files: &TlsFiles,
    poll: Duration,
) -> Result<(TlsAcceptor, JoinHandle<()>), TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certified = Arc::new(Reloading(ArcSwap::from_pointee(load(files, &provider)?)));
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(Arc::clone(&certified) as Arc<dyn ResolvesServerCert>);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let files = files.clone();
    let mut watcher = RuleWatcher::watching(vec![files.cert.clone(), files.key.clone()], poll);
    let reloading = tokio::spawn(async move {
        loop {
            watcher.changed().await;
            match load(&files, &provider) {
                Ok(loaded) => {
                    certified.0.store(Arc::new(loaded));
                    tracing::info!(cert = %files.cert.display(), "TLS certificate reloaded");
                }
                Err(error) => {
                    tracing::error!(%error, "TLS certificate not reloaded; the one in force stays");
                }
            }
        }
    });
    Ok((TlsAcceptor::from(Arc::new(config)), reloading))
}

/// The certificate chain and key of `files`, checked to belong together.
fn load(files: &TlsFiles, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    let chain = read_chain(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|error| TlsError::Key {
        path: files.key.clone(),
        reason: error.to_string(),
    })?;
    CertifiedKey::from_der(chain, key, provider).map_err(|error| TlsError::Pair {
        cert: files.cert.clone(),
        key: files.key.clone(),
        reason: error.to_string(),
    })
}

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bad = |reason: String| TlsError::Cert {
        path: path.to_owned(),
        reason,
    };
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(|error| bad(error.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| bad(error.to_string()))?;
    if chain.is_empty() {
        return Err(bad("it holds no PEM certificate".to_owned()));
    }
    Ok(chain)
}
