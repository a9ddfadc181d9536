//! A `sluicegate serve` process under test: the real binary, on ports the system picks, read
//! back from its `sluicegate serving` log line (no port is guessed free, so none can be taken
//! meanwhile).

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Any error of starting or stopping the process.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A running `sluicegate serve`, killed when dropped.
pub struct ServeProcess {
    child: Child,
    /// Where its gRPC listener is.
    pub grpc: SocketAddr,
    /// Where its HTTP listener is.
    pub http: SocketAddr,
    /// Where its admin page and API are.
    pub admin: SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl ServeProcess {
    /// Starts `sluicegate serve` on `rules` (written to a fresh directory) with `extra` flags,
    /// and waits (bounded) until it logs its addresses.
    pub fn start(rules: &str, extra: &[&str]) -> Result<ServeProcess, BoxError> {
        let dir = tempfile::tempdir()?;
        let rules_file = dir.path().join("rules.yaml");
        std::fs::write(&rules_file, rules)?;
        let log = dir.path().join("serve.log");
        let child = Command::new(env!("CARGO_BIN_EXE_sluicegate"))
            .arg("serve")
            .arg("--config")
            .arg(&rules_file)
            .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
            .args(["--admin-addr", "127.0.0.1:0", "--log-json"])
            .args(extra)
            .env("SLUICEGATE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?;
        let unknown = SocketAddr::from(([127, 0, 0, 1], 0));
        let mut serve = ServeProcess {
            child,
            grpc: unknown,
            http: unknown,
            admin: unknown,
            log,
            _dir: dir,
        };
        let line = serve.wait_for_log("sluicegate serving")?;
        let logged: serde_json::Value = serde_json::from_str(&line)?;
        let address = |name: &str| -> Result<SocketAddr, BoxError> {
            let text = logged["fields"][name]
                .as_str()
                .ok_or_else(|| format!("no {name} in {line}"))?;
            // The admin address is optional, logged as `Some(ADDRESS)`.
            let text = text.trim_start_matches("Some(").trim_end_matches(')');
            Ok(text.parse()?)
        };
        serve.grpc = address("grpc_addr")?;
        serve.http = address("http_addr")?;
        serve.admin = address("admin_addr")?;
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
