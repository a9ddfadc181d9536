//! `sluicegate proxy` in front of an `https://` upstream (rustls, the certificate checked
//! against `--upstream-ca`), speaking h2 to it when ALPN agrees on it, and h2 by prior
//! knowledge to an `http://` one when told to.

mod proxy_support;
mod tls_support;

use proxy_support::{BoxError, PASS_ALL, ProxyProcess};
use tls_support::{Certificates, TlsUpstream};

type TestResult = Result<(), BoxError>;

/// What the upstream answered to `path` through `proxy`: its HTTP version and the host named.
async fn seen(proxy: &ProxyProcess, path: &str) -> Result<(u16, String), BoxError> {
    let response = reqwest::Client::new().get(proxy.url(path)).send().await?;
    Ok((response.status().as_u16(), response.text().await?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_upstream_is_spoken_to_by_the_protocol_alpn_agrees() -> TestResult {
    let dir = tempfile::tempdir()?;
    let certificates = Certificates::make(dir.path())?;
    let ca = certificates.ca_file.to_string_lossy().into_owned();
    let offers: [(&[&[u8]], &str, &str); 3] = [
        (&[b"h2", b"http/1.1"], "auto", "HTTP/2.0"),
        (&[b"http/1.1"], "auto", "HTTP/1.1"),
        (&[b"h2", b"http/1.1"], "http1", "HTTP/1.1"),
    ];
    for (alpn, protocol, version) in offers {
        let upstream = TlsUpstream::start(Some(certificates.server_config(alpn)?)).await?;
        let url = format!("https://{}", upstream.address);
        let extra = [
            "--upstream-ca",
            &ca,
            "--upstream-protocol",
            protocol,
            "--workers",
            "1",
        ];
        let proxy = ProxyProcess::start(&url, PASS_ALL, &extra)?;
        for _ in 0..3 {
            let (status, text) = seen(&proxy, "/a").await?;
            assert_eq!(status, 200, "{protocol}: {text}");
            // The host the client named reaches the upstream, by `Host` or `:authority`.
            assert_eq!(text, format!("{version} {}", proxy.address), "{protocol}");
        }
        // One worker: its connection carries every request, h2 or kept alive.
        assert_eq!(upstream.connections(), 1, "{protocol}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_upstream_is_spoken_to_by_h2_when_told() -> TestResult {
    let upstream = TlsUpstream::start(None).await?;
    let url = format!("http://{}", upstream.address);
    let extra = ["--upstream-protocol", "h2", "--workers", "1"];
    let proxy = ProxyProcess::start(&url, PASS_ALL, &extra)?;
    for _ in 0..3 {
        let (status, text) = seen(&proxy, "/").await?;
        assert_eq!(status, 200, "{text}");
        assert_eq!(text, format!("HTTP/2.0 {}", proxy.address));
    }
    assert_eq!(upstream.connections(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_the_proxy_does_not_trust_is_a_502_that_says_so() -> TestResult {
    let dir = tempfile::tempdir()?;
    let certificates = Certificates::make(dir.path())?;
    let upstream = TlsUpstream::start(Some(certificates.server_config(&[b"http/1.1"])?)).await?;
    let url = format!("https://{}", upstream.address);
    // The system's trusted certificates do not hold the test's authority.
    let proxy = ProxyProcess::start(&url, PASS_ALL, &[])?;
    let (status, text) = seen(&proxy, "/").await?;
    assert_eq!(status, 502, "{text}");
    assert!(text.contains("TLS handshake"), "{text}");
    assert!(text.contains("certificate"), "{text}");
    Ok(())
}

#[test]
fn an_unreadable_ca_file_stops_the_proxy_with_its_name() -> TestResult {
    let dir = tempfile::tempdir()?;
    let rules = dir.path().join("rules.yaml");
    std::fs::write(&rules, PASS_ALL)?;
    let not_pem = dir.path().join("ca.pem");
    std::fs::write(&not_pem, "not a certificate\n")?;
    for ca in [not_pem, dir.path().join("missing.pem")] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_sluicegate"))
            .args(["proxy", "--upstream", "https://127.0.0.1:1"])
            .args(["--admin", "off", "--listen", "127.0.0.1:0"])
            .arg("--config")
            .arg(&rules)
            .arg("--upstream-ca")
            .arg(&ca)
            .output()?;
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("upstream CA file"), "{stderr}");
        assert!(stderr.contains(&*ca.to_string_lossy()), "{stderr}");
    }
    Ok(())
}
