//! The example rules the README serves load, and enforce what their comments say.

use std::path::PathBuf;

use sluicegate_server::serve::{ServerConfig, start};

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[tokio::test]
async fn the_readme_example_rules_serve() -> TestResult {
    let rules = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/rules");
    let server = start(ServerConfig::on_free_loopback_ports(rules)).await?;
    let http = reqwest::Client::new();
    let ask = |body: &'static str| {
        let request = http
            .post(format!("http://{}/json", server.http_addr))
            .body(body);
        async move { request.send().await.map(|r| r.status().as_u16()) }
    };
    // A blocked crawler never passes; the health check user is never limited.
    let crawler = r#"{"domain":"edge","descriptors":[{"entries":[{"key":"user_agent","value":"BadBot/2.1"}]}]}"#;
    assert_eq!(ask(crawler).await?, 429);
    let health = r#"{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"healthcheck"}]}],"hits_addend":1000000}"#;
    assert_eq!(ask(health).await?, 200);
    // Per user: 20 per second, enforced together with the hourly and 10 s limits.
    let user = r#"{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u1"}]}],"hits_addend":20}"#;
    assert_eq!(ask(user).await?, 200);
    assert_eq!(ask(user).await?, 429);
    // The shadow-mode rule reports but answers OK.
    let export = r#"{"domain":"api","descriptors":[{"entries":[{"key":"path","value":"/export"}]}],"hits_addend":11}"#;
    assert_eq!(ask(export).await?, 200);
    server.shutdown().await?;
    Ok(())
}
