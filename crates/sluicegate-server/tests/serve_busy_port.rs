//! `sluicegate serve` on an address another program holds: the error names the address, what
//! it was for and the flag that moves it, and the process exits instead of serving half.

use std::net::TcpListener;
use std::process::Command;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Runs `serve` with the example rules and `args`; its exit code and standard error.
fn serve_refused(args: &[&str]) -> Result<(Option<i32>, String), std::io::Error> {
    let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/rules");
    let output = Command::new(env!("CARGO_BIN_EXE_sluicegate"))
        .args(["serve", "--config", rules])
        .args(args)
        .env_remove("SLUICEGATE_GRPC_ADDR")
        .env_remove("SLUICEGATE_HTTP_ADDR")
        .env_remove("SLUICEGATE_ADMIN_ADDR")
        .output()?;
    Ok((
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

#[test]
fn each_busy_address_names_its_flag() -> TestResult {
    let busy = TcpListener::bind("127.0.0.1:0")?;
    let taken = busy.local_addr()?.to_string();
    let free = |_| "127.0.0.1:0";
    for (flag, what) in [
        ("--grpc-addr", "gRPC"),
        ("--http-addr", "HTTP"),
        ("--admin-addr", "the admin page"),
    ] {
        let mut args = Vec::new();
        for other in ["--grpc-addr", "--http-addr", "--admin-addr"] {
            let address = if other == flag {
                taken.as_str()
            } else {
                free(other)
            };
            args.extend([other, address]);
        }
        let (code, stderr) = serve_refused(&args)?;
        assert_ne!(code, Some(0), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "cannot listen for {what} on {taken} (choose another with {flag}"
            )),
            "{stderr}"
        );
    }
    Ok(())
}
