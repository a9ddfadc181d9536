//! `sluicegate proxy --tls-cert --tls-key` over loopback with real TLS clients (curl, h2load):
//! h2 and HTTP/1.1 by ALPN, `Forwarded: proto=https`, the limits applied as over plain TCP,
//! a renewed certificate taken without a restart, and files that cannot be used refused at
//! start with their names.

mod proxy_support;
mod tls_support;

use std::path::Path;
use std::process::Command;

use proxy_support::{BoxError, PASS_ALL, ProxyProcess, Upstream, eventually, start_refused};
use tls_support::Certificates;

type TestResult = Result<(), BoxError>;

/// The proxy serving TLS with `certificates`, in front of `upstream`, with `rules`.
fn tls_proxy(
    upstream: &Upstream,
    certificates: &Certificates,
    rules: &str,
) -> Result<ProxyProcess, BoxError> {
    let cert = certificates.cert_file.to_string_lossy().into_owned();
    let key = certificates.key_file.to_string_lossy().into_owned();
    ProxyProcess::start(
        &upstream.url(),
        rules,
        &["--tls-cert", &cert, "--tls-key", &key],
    )
}

/// curl's answer to `GET path` over TLS trusting `ca`, speaking `version` (`--http1.1`,
/// `--http2`): `HTTP-VERSION STATUS` on the first line, then the body. `Err`: curl failed (a
/// certificate it does not trust, say).
fn curl(proxy: &ProxyProcess, ca: &Path, version: &str, path: &str) -> Result<String, BoxError> {
    let url = format!("https://{}{path}", proxy.address);
    let output = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "30", version])
        .arg("--cacert")
        .arg(ca)
        .args(["--write-out", "\n%{http_version} %{http_code}", &url])
        .output()?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned().into());
    }
    let text = String::from_utf8(output.stdout)?;
    let (body, status) = text.rsplit_once('\n').ok_or("no status line")?;
    Ok(format!("{status}\n{body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_speak_h2_or_http1_over_tls_as_alpn_agrees() -> TestResult {
    let dir = tempfile::tempdir()?;
    let certificates = Certificates::make(dir.path())?;
    let upstream = Upstream::start().await?;
    let proxy = tls_proxy(&upstream, &certificates, PASS_ALL)?;
    for (flag, version) in [("--http1.1", "1.1"), ("--http2", "2")] {
        let answer = curl(&proxy, &certificates.ca_file, flag, "/echo")?;
        let (status, body) = answer.split_once('\n').ok_or("no body")?;
        assert_eq!(status, format!("{version} 200"), "{answer}");
        let echoed: serde_json::Value = serde_json::from_str(body)?;
        // The upstream learns the client came over TLS.
        let forwarded = echoed["forwarded"].as_str().ok_or("no Forwarded")?;
        assert!(forwarded.ends_with(";proto=https"), "{forwarded}");
    }
    // h2load (nghttp2's load client) over TLS: every request answered.
    let url = format!("https://{}/", proxy.address);
    let output = Command::new("h2load")
        .args(["-n", "200", "-c", "4", "-m", "8", &url])
        .output()?;
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("200 succeeded, 0 failed"), "{text}");
    assert!(text.contains("Application protocol: h2"), "{text}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limits_apply_over_tls() -> TestResult {
    let dir = tempfile::tempdir()?;
    let certificates = Certificates::make(dir.path())?;
    let upstream = Upstream::start().await?;
    let rules = "limits:\n  two: { key: global, spec: \"gcra:rate=2/h,burst=2\" }\n\
                 routes:\n  - { prefix: /, limits: [two] }\n";
    let proxy = tls_proxy(&upstream, &certificates, rules)?;
    let statuses: Vec<String> = (0..3)
        .map(|_| curl(&proxy, &certificates.ca_file, "--http2", "/"))
        .collect::<Result<_, _>>()?;
    let codes: Vec<&str> = statuses
        .iter()
        .map(|answer| answer.lines().next().unwrap_or_default())
        .collect();
    assert_eq!(codes, ["2 200", "2 200", "2 429"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_certificate_is_served_without_a_restart() -> TestResult {
    let dir = tempfile::tempdir()?;
    let first = Certificates::make(dir.path())?;
    let upstream = Upstream::start().await?;
    let proxy = tls_proxy(&upstream, &first, PASS_ALL)?;
    assert!(curl(&proxy, &first.ca_file, "--http2", "/")?.starts_with("2 200"));
    // A new pair from another authority, written over the files the proxy reads.
    let renewed_dir = tempfile::tempdir()?;
    let renewed = Certificates::make(renewed_dir.path())?;
    std::fs::copy(&renewed.key_file, &first.key_file)?;
    std::fs::copy(&renewed.cert_file, &first.cert_file)?;
    eventually("the renewed certificate is served", || async {
        Ok(curl(&proxy, &renewed.ca_file, "--http2", "/").is_ok())
    })
    .await?;
    // The first authority's certificate is gone.
    assert!(curl(&proxy, &first.ca_file, "--http2", "/").is_err());
    // A key that is not the certificate's is not taken: the renewed pair stays.
    let other_dir = tempfile::tempdir()?;
    let other = Certificates::make(other_dir.path())?;
    std::fs::copy(&other.key_file, &first.key_file)?;
    eventually("the mismatched pair is refused and logged", || async {
        Ok(proxy.log_text().contains("TLS certificate not reloaded"))
    })
    .await?;
    assert!(curl(&proxy, &renewed.ca_file, "--http2", "/")?.starts_with("2 200"));
    Ok(())
}

#[test]
fn files_that_cannot_be_used_stop_the_proxy_with_their_names() -> TestResult {
    let dir = tempfile::tempdir()?;
    let certificates = Certificates::make(dir.path())?;
    let other_dir = tempfile::tempdir()?;
    let other = Certificates::make(other_dir.path())?;
    let missing = dir.path().join("missing.pem");
    let text = |path: &Path| path.to_string_lossy().into_owned();
    let cases = [
        (
            text(&missing),
            text(&certificates.key_file),
            "certificate file",
        ),
        (text(&certificates.cert_file), text(&missing), "key file"),
        // The key of another certificate.
        (
            text(&certificates.cert_file),
            text(&other.key_file),
            "cannot be used together",
        ),
    ];
    for (cert, key, what) in cases {
        let stderr = start_refused(
            dir.path(),
            PASS_ALL,
            &["--tls-cert", &cert, "--tls-key", &key],
        )?;
        assert!(stderr.contains(what), "{what}: {stderr}");
    }
    // One without the other is a usage error that names the missing flag.
    let cert = text(&certificates.cert_file);
    let stderr = start_refused(dir.path(), PASS_ALL, &["--tls-cert", &cert])?;
    assert!(stderr.contains("--tls-key"), "{stderr}");
    Ok(())
}
