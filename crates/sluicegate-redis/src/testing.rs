//! Real Redis servers for tests (the `testing` feature): a single `redis-server`, or a
//! 3-master Redis Cluster, each on free loopback ports with a temporary directory, killed when
//! dropped. Shared by this crate's tests and by the service's (`sluicegate-server`).

use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::{RedisStore, StoreConfig};

/// Any error starting or reaching a test server.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One `redis-server` process.
pub struct RedisServer {
    /// The loopback port it listens on (kept across restarts).
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    extra: Vec<String>,
}

/// Every port this process has handed out. A stopped server keeps its port for its restart,
/// and tests run in parallel: without this, another test's server could be given that port in
/// between, and the restart would fail, or find the other server answering.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A free loopback port that no server of this process has had before.
fn free_port() -> Result<u16, BoxError> {
    for _ in 0..1000 {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
        if handed_out.insert(port) {
            return Ok(port);
        }
    }
    Err("no free loopback port left that this process has not used".into())
}

/// Answers whether a server on `port` replies `+PONG` to `PING`.
fn answers_ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(stream.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG"))
}

fn spawn_redis(port: u16, dir: &Path, extra: &[String]) -> Result<Child, BoxError> {
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start redis-server (is it installed?): {e}"))?;
    Ok(child)
}

fn wait_for_ping(port: u16, child: &mut Child) -> Result<(), BoxError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if answers_ping(port) {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            return Err(format!("redis-server on port {port} exited: {status}").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!("redis-server on port {port} did not answer PING within 10s").into())
}

impl RedisServer {
    /// Starts a server on a free port.
    pub fn start() -> Result<RedisServer, BoxError> {
        Self::start_with(Vec::new())
    }

    /// Starts a server with extra command-line arguments.
    pub fn start_with(extra: Vec<String>) -> Result<RedisServer, BoxError> {
        let mut last_error: BoxError = "no attempt".into();
        // A free port can be taken by someone else between the probe and the bind: retry.
        for _ in 0..5 {
            let mut server = RedisServer {
                port: free_port()?,
                dir: tempfile::tempdir()?,
                child: None,
                extra: extra.clone(),
            };
            match server.restart() {
                Ok(()) => return Ok(server),
                Err(e) => last_error = e,
            }
        }
        Err(last_error)
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server (as a crash would) and waits for it to be gone.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server (`SIGSTOP`): connections stay open but nothing is answered, as
    /// with a Redis stuck on a slow command or a network black hole.
    pub fn pause(&self) -> Result<(), BoxError> {
        self.signal("-STOP")
    }

    /// Lets a paused server run again (`SIGCONT`).
    pub fn resume(&self) -> Result<(), BoxError> {
        self.signal("-CONT")
    }

    fn signal(&self, signal: &str) -> Result<(), BoxError> {
        let child = self.child.as_ref().ok_or("redis-server is not running")?;
        let status = Command::new("kill")
            .arg(signal)
            .arg(child.id().to_string())
            .status()?;
        if !status.success() {
            return Err(format!("kill {signal} {} failed: {status}", child.id()).into());
        }
        Ok(())
    }

    /// Starts the server again on the same port (empty: nothing is saved).
    pub fn restart(&mut self) -> Result<(), BoxError> {
        self.stop();
        let mut child = spawn_redis(self.port, self.dir.path(), &self.extra)?;
        let ready = wait_for_ping(self.port, &mut child);
        self.child = Some(child);
        ready
    }

    /// A store on this server.
    pub async fn store(&self, config: StoreConfig) -> Result<RedisStore, BoxError> {
        Ok(RedisStore::connect(&self.url(), config).await?)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A Redis Cluster of three masters and no replicas.
pub struct RedisCluster {
    /// The three masters.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers and joins them with `redis-cli --cluster create`.
    pub fn start() -> Result<RedisCluster, BoxError> {
        let mut nodes = Vec::new();
        for _ in 0..3 {
            let extra = vec![
                "--cluster-enabled".into(),
                "yes".into(),
                "--cluster-node-timeout".into(),
                "2000".into(),
            ];
            nodes.push(RedisServer::start_with(extra)?);
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let output = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()?;
        if !output.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&output.stdout)
            )
            .into());
        }
        let cluster = RedisCluster { nodes };
        cluster.wait_until_ok()?;
        Ok(cluster)
    }

    fn wait_until_ok(&self) -> Result<(), BoxError> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let all_ok = self.nodes.iter().all(|node| {
                Command::new("redis-cli")
                    .args(["-p", &node.port.to_string(), "cluster", "info"])
                    .output()
                    .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("cluster_state:ok"))
            });
            if all_ok {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err("cluster did not reach cluster_state:ok within 20s".into())
    }

    /// The nodes' URLs.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// A store on this cluster.
    pub async fn store(&self, config: StoreConfig) -> Result<RedisStore, BoxError> {
        let urls = self.urls();
        let refs: Vec<&str> = urls.iter().map(String::as_str).collect();
        Ok(RedisStore::connect_cluster(&refs, config).await?)
    }
}

/// `INFO commandstats` calls per command (`fcall`, `evalsha`, `function|load`, ...).
pub async fn command_calls(store: &RedisStore) -> Result<HashMap<String, u64>, BoxError> {
    let info: String = store
        .command(redis::cmd("INFO").arg("commandstats"))
        .await?;
    let mut calls = HashMap::new();
    for line in info.lines() {
        let Some((name, stats)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let count = stats
            .split(',')
            .find_map(|s| s.strip_prefix("calls="))
            .ok_or("no calls= in commandstats")?;
        calls.insert(name.to_owned(), count.parse()?);
    }
    Ok(calls)
}

/// The calls of `command` in [`command_calls`]'s answer (none if absent).
pub fn calls_of(calls: &HashMap<String, u64>, command: &str) -> u64 {
    calls.get(command).copied().unwrap_or(0)
}
