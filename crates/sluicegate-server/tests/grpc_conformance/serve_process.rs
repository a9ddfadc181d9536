//! A `sluicegate serve` process under test: the real binary, on ports the system picks, read
//! back from its `sluicegate serving` log line.

#![allow(unreachable_pub)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::BoxError;

/// The rules every conformance check runs against: `user` always has room, `blocked` never
/// does, so no answer depends on where a real clock's window boundary falls.
pub const RULES: &str = "
domain: conformance
descriptors:
  - key: user
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: counted
    rate_limit: {unit: hour, requests_per_unit: 1000000}
";

/// A running `sluicegate serve`, killed when dropped.
pub struct ServeProcess {
    child: Child,
    /// Where its gRPC listener is.
    pub grpc: SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl ServeProcess {
    /// Starts `sluicegate serve` on [`RULES`] with `extra` flags, and waits (bounded) until it
    /// logs its addresses.
    pub fn start(extra: &[&str]) -> Result<ServeProcess, BoxError> {
        let dir = tempfile::tempdir()?;
        let rules = dir.path().join("rules.yaml");
        std::fs::write(&rules, RULES)?;
        let log = dir.path().join("serve.log");
        let child = Command::new(env!("CARGO_BIN_EXE_sluicegate"))
            .arg("serve")
            .arg("--config")
            .arg(&rules)
            .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
            .args(["--no-admin", "--log-json"])
            .args(extra)
            .env("SLUICEGATE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?;
        let mut serve = ServeProcess {
            child,
            grpc: SocketAddr::from(([127, 0, 0, 1], 0)),
            log,
            _dir: dir,
        };
        let line = serve.wait_for_log("sluicegate serving")?;
        let logged: serde_json::Value = serde_json::from_str(&line)?;
        let grpc = logged["fields"]["grpc_addr"]
            .as_str()
            .ok_or_else(|| format!("no grpc_addr in {line}"))?;
        serve.grpc = grpc.parse()?;
        Ok(serve)
    }

    /// The first log line containing `needle`, waiting for it (bounded: a slow machine, not a
    /// timing); an error if the process exits first.
    pub fn wait_for_log(&mut self, needle: &str) -> Result<String, BoxError> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            if let Some(line) = text.lines().find(|l| l.contains(needle)) {
                return Ok(line.to_owned());
            }
            if self.child.try_wait()?.is_some() || Instant::now() > deadline {
                return Err(format!("serve never logged {needle:?}; log:\n{text}").into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM, as an orchestrator stopping the service does.
    pub fn terminate(&self) -> Result<(), BoxError> {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()?;
        if !status.success() {
            return Err(format!("kill -TERM failed: {status}").into());
        }
        Ok(())
    }

    /// Waits (bounded) for the process to exit by itself.
    pub fn wait_for_exit(&mut self) -> Result<ExitStatus, BoxError> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                return Err("serve did not exit".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> Result<bool, BoxError> {
        Ok(self.child.try_wait()?.is_none())
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
