//! Bytes that are not a rate limit request, sent over a real HTTP/2 gRPC call: a clear gRPC
//! error, and the service keeps serving.

use sluicegate_server::serve::{ServerConfig, start};

type TestResult = Result<(), Box<dyn std::error::Error>>;

mod grpc_wire;
use grpc_wire::{METHOD, frame};

/// The gRPC status of a raw call: from the trailers-only headers, or the trailers.
async fn grpc_status(
    client: &reqwest::Client,
    url: &str,
    body: Vec<u8>,
) -> Result<(String, String), Box<dyn std::error::Error>> {
    let response = client
        .post(url)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(body)
        .send()
        .await?;
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    match (header("grpc-status"), header("grpc-message")) {
        (Some(status), message) => Ok((status, message.unwrap_or_default())),
        (None, _) => {
            Err("no grpc-status in the response headers (a trailers-only error expected)".into())
        }
    }
}

#[tokio::test]
async fn garbage_protobuf_is_a_grpc_error_not_a_crash() -> TestResult {
    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("rules.yaml"),
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    )?;
    let server = start(ServerConfig::on_free_loopback_ports(dir.path())).await?;
    let client = reqwest::Client::builder().http2_prior_knowledge().build()?;
    let url = format!("http://{}{METHOD}", server.grpc_addr);

    // Field 1 (domain) declared as a 100-byte string, but the message ends after 3 bytes.
    let (status, message) = grpc_status(&client, &url, frame(false, &[0x0a, 0x64, b'x'])).await?;
    assert_ne!(status, "0", "a truncated message must not succeed");
    assert!(!message.is_empty(), "the error says what is wrong");
    // A frame whose declared length runs past the body.
    let mut short = frame(false, b"\x0a\x01d");
    short[4] = 200;
    let (status, _) = grpc_status(&client, &url, short).await?;
    assert_ne!(status, "0");
    // A well-formed but empty request: no domain.
    let (status, message) = grpc_status(&client, &url, frame(false, &[])).await?;
    assert_eq!(status, "3", "INVALID_ARGUMENT: {message}");
    assert!(message.contains("domain"), "{message}");

    // Still serving: a real request over the same listener answers.
    let http = reqwest::Client::new();
    let body = r#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#;
    let answer = http
        .post(format!("http://{}/json", server.http_addr))
        .body(body)
        .send()
        .await?;
    assert_eq!(answer.status().as_u16(), 200);
    server.shutdown().await?;
    Ok(())
}
