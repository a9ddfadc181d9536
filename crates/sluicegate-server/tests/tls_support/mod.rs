//! TLS for the proxy's tests: a certificate authority and a certificate for 127.0.0.1 made
//! at test time, and an upstream over TLS that offers by ALPN what each test asks.

#![allow(dead_code, unreachable_pub)]

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A certificate for 127.0.0.1, its key, and the authority that signed it, as PEM files.
pub struct Certificates {
    pub ca_file: PathBuf,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

impl Certificates {
    /// Makes them in `dir`.
    pub fn make(dir: &Path) -> Result<Certificates, BoxError> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // Names of their own: a leaf named as its issuer looks self-signed to OpenSSL.
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "sluicegate test authority");
        let ca = ca_params.self_signed(&ca_key)?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.subject_alt_names = vec![SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST))];
        params
            .distinguished_name
            .push(DnType::CommonName, "127.0.0.1");
        let cert = params.signed_by(&key, &ca, &ca_key)?;
        let certificates = Certificates {
            ca_file: dir.join("ca.pem"),
            cert_file: dir.join("cert.pem"),
            key_file: dir.join("key.pem"),
        };
        std::fs::write(&certificates.ca_file, ca.pem())?;
        std::fs::write(&certificates.cert_file, cert.pem())?;
        std::fs::write(&certificates.key_file, key.serialize_pem())?;
        Ok(certificates)
    }

    /// A server's TLS settings with this certificate, offering `alpn`.
    pub fn server_config(&self, alpn: &[&[u8]]) -> Result<Arc<rustls::ServerConfig>, BoxError> {
        let chain =
            CertificateDer::pem_file_iter(&self.cert_file)?.collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_file(&self.key_file)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(config))
    }
}

/// An upstream over TLS (or plain TCP, without `tls`) that answers every request with its
/// HTTP version and the host it names, and counts its connections.
pub struct TlsUpstream {
    pub address: SocketAddr,
    connections: Arc<Mutex<usize>>,
}

impl TlsUpstream {
    pub async fn start(tls: Option<Arc<rustls::ServerConfig>>) -> Result<TlsUpstream, BoxError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let connections: Arc<Mutex<usize>> = Arc::default();
        let counted = Arc::clone(&connections);
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                *counted.lock().expect("count") += 1;
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let service = service_fn(
                        |request: hyper::Request<hyper::body::Incoming>| async move {
                            let host = request
                                .uri()
                                .authority()
                                .map(ToString::to_string)
                                .or_else(|| {
                                    request
                                        .headers()
                                        .get("host")
                                        .and_then(|h| h.to_str().ok())
                                        .map(str::to_owned)
                                })
                                .unwrap_or_default();
                            let text = format!("{:?} {host}", request.version());
                            Ok::<_, Infallible>(hyper::Response::new(http_body_util::Full::new(
                                bytes::Bytes::from(text),
                            )))
                        },
                    );
                    let builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    match acceptor {
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                let _ = builder
                                    .serve_connection(TokioIo::new(stream), service)
                                    .await;
                            }
                        }
                        None => {
                            let _ = builder
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        }
                    }
                });
            }
        });
        Ok(TlsUpstream {
            address,
            connections,
        })
    }

    pub fn connections(&self) -> usize {
        *self.connections.lock().expect("count")
    }
}
