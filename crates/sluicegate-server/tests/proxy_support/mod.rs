//! Real processes over loopback for the proxy's tests: an axum upstream in the test, the
//! built `sluicegate proxy` binary, and (for the equivalence test) Debian's nginx.

#![allow(dead_code, unreachable_pub)]

pub mod raw_upstream;

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::HeaderMap;
use axum::routing::any;
use tokio::sync::watch;

pub type TestResult = Result<(), Box<dyn std::error::Error>>;
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A port nobody listens on now (bound, read, released), and never handed out before in this
/// process: the kernel may give a released port to the next `bind`, and two tests running
/// side by side would then start their proxies on one port. One of them would fail to bind,
/// and its test could find the other's listener there.
pub fn free_port() -> Result<u16, BoxError> {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    loop {
        let port = StdListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut handed_out = HANDED_OUT
            .lock()
            .map_err(|_| "a test panicked holding the ports")?;
        if handed_out.insert(port) {
            return Ok(port);
        }
    }
}

/// Waits until every one of `addresses` accepts connections and `ready` says so, or `child`
/// has exited (up to 20 s: a slow machine, not a timing test).
fn wait_started(
    child: &mut Child,
    addresses: &[SocketAddr],
    ready: impl Fn() -> bool,
) -> Result<(), BoxError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let started = || {
        addresses
            .iter()
            .all(|&address| std::net::TcpStream::connect(address).is_ok())
            && ready()
    };
    while !started() {
        if let Some(status) = child.try_wait()? {
            return Err(format!("the process exited ({status}) before it listened").into());
        }
        if Instant::now() > deadline {
            return Err(format!("nothing listens on {addresses:?}").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// How an attempt to start the proxy went.
enum Started {
    Listening(ProxyProcess),
    /// A port found free was taken before the proxy bound it; the directory it was to use.
    PortTaken(tempfile::TempDir),
}

/// The upstream: an axum app answering every path with what it received (method, path, the
/// forwarding and hop-by-hop fields, as JSON), `?hold_ms=N` after N ms; `/stream` sends a
/// first chunk and ends when the test calls [`Upstream::release`]; `/big` sends 64 MiB (at
/// the pace its reader takes them); `/count` answers the length of the request body.
pub struct Upstream {
    pub address: SocketAddr,
    /// Each release bumps it; every `/stream` response begun before ends.
    release: watch::Sender<u64>,
}

async fn echo(request: Request) -> axum::Json<serde_json::Value> {
    let hold = request.uri().query().and_then(|q| {
        q.split('&')
            .find_map(|pair| pair.strip_prefix("hold_ms="))
            .and_then(|ms| ms.parse::<u64>().ok())
    });
    if let Some(ms) = hold {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let header = |headers: &HeaderMap, name: &str| {
        let values: Vec<&str> = headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        (!values.is_empty()).then(|| values.join(" | "))
    };
    let headers = request.headers();
    axum::Json(serde_json::json!({
        "method": request.method().as_str(),
        "path": request.uri().path(),
        "x-forwarded-for": header(headers, "x-forwarded-for"),
        "forwarded": header(headers, "forwarded"),
        "host": header(headers, "host"),
        "x-hop": header(headers, "x-hop"),
        "keep-alive": header(headers, "keep-alive"),
        "x-custom": header(headers, "x-custom"),
    }))
}

impl Upstream {
    /// Serves on a free loopback port, on the test's runtime.
    pub async fn start() -> Result<Upstream, BoxError> {
        let (release, _) = watch::channel(0u64);
        let stream_release = release.clone();
        let app = Router::new()
            .route(
                "/stream",
                any(move || {
                    // Subscribed before the head is sent: a release the test makes after it
                    // saw the head cannot be missed.
                    let release = stream_release.subscribe();
                    async move {
                        let chunks = async_stream(release);
                        axum::response::Response::new(Body::from_stream(chunks))
                    }
                }),
            )
            .route(
                "/big",
                any(|| async {
                    let chunks = tokio_stream::iter(
                        (0..BIG_CHUNKS).map(|_| Ok::<_, std::io::Error>(&BIG_CHUNK[..])),
                    );
                    axum::response::Response::new(Body::from_stream(chunks))
                }),
            )
            .route(
                "/count",
                any(|body: axum::body::Bytes| async move { body.len().to_string() }),
            )
            .fallback(echo)
            .layer(axum::extract::DefaultBodyLimit::max(64 << 20));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Upstream { address, release })
    }

    /// Ends the `/stream` response in progress.
    pub fn release(&self) {
        self.release.send_modify(|n| *n += 1);
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }
}

/// `/big` answers this many [`BIG_CHUNK`]s.
pub const BIG_CHUNKS: usize = 1024;
/// 64 KiB of one byte.
pub static BIG_CHUNK: [u8; 64 * 1024] = [b'b'; 64 * 1024];

/// A first chunk at once, a last one when released.
fn async_stream(
    mut release: watch::Receiver<u64>,
) -> tokio_stream::wrappers::ReceiverStream<Result<&'static str, std::io::Error>> {
    let (sender, receiver) = tokio::sync::mpsc::channel(2);
    tokio::spawn(async move {
        let _ = sender.send(Ok("first chunk\n")).await;
        tokio::select! {
            _ = release.changed() => {
                let _ = sender.send(Ok("last chunk\n")).await;
            }
            // The proxy dropped the response (its client went away).
            () = sender.closed() => {}
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(receiver)
}

/// A rule file with one route passing everything, no limit.
pub const PASS_ALL: &str = "routes:\n  - { prefix: / }\n";

/// A running `sluicegate proxy`, killed when dropped.
pub struct ProxyProcess {
    pub child: Child,
    pub address: SocketAddr,
    pub admin: SocketAddr,
    pub rules: PathBuf,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl ProxyProcess {
    /// Starts the proxy in front of `upstream` with the rule file `rules` and `extra`
    /// arguments, and waits until it listens.
    ///
    /// A port [`free_port`] found can be taken by another test before the proxy binds it: the
    /// proxy then exits with "address in use", and is started again on other ports.
    pub fn start(upstream: &str, rules: &str, extra: &[&str]) -> Result<ProxyProcess, BoxError> {
        let mut dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("rules.yaml"), rules)?;
        for _ in 0..5 {
            match ProxyProcess::try_start(upstream, dir, extra)? {
                Started::Listening(proxy) => return Ok(proxy),
                Started::PortTaken(back) => dir = back,
            }
        }
        Err("every port tried for the proxy was taken by the time it bound it".into())
    }

    /// Starts the proxy with the rule file in `dir`, on ports found free.
    fn try_start(
        upstream: &str,
        dir: tempfile::TempDir,
        extra: &[&str],
    ) -> Result<Started, BoxError> {
        let rules_path = dir.path().join("rules.yaml");
        let log = dir.path().join("proxy.log");
        let address: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluicegate"))
            .arg("proxy")
            .args(["--upstream", upstream])
            .arg("--config")
            .arg(&rules_path)
            .args(["--listen", &address.to_string()])
            .args(["--admin", &admin.to_string()])
            .args(["--reload-interval", "100ms"])
            .args(extra)
            .env("SLUICEGATE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?;
        // The metrics too: a test may read them before anything else. Its log line says it
        // bound both: a port taken by another test's listener accepts connections too.
        let listening =
            || std::fs::read_to_string(&log).is_ok_and(|t| t.contains("proxy: listening"));
        if let Err(error) = wait_started(&mut child, &[address, admin], listening) {
            let _ = child.kill();
            let _ = child.wait();
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("Address already in use") {
                return Ok(Started::PortTaken(dir));
            }
            return Err(format!("{error}; log:\n{text}").into());
        }
        let proxy = ProxyProcess {
            child,
            address,
            admin,
            rules: rules_path,
            log,
            _dir: dir,
        };
        Ok(Started::Listening(proxy))
    }

    /// Starts the proxy in front of `upstream` with one route passing everything, no limit.
    pub fn passing(upstream: &Upstream, extra: &[&str]) -> Result<ProxyProcess, BoxError> {
        ProxyProcess::start(&upstream.url(), PASS_ALL, extra)
    }

    /// `sent` written by hand on a new connection, then nothing more; what came back until
    /// the proxy closed the connection (bounded by a minute: a bound on a hang, not a timing).
    pub async fn raw_exchange(&self, sent: &[&[u8]]) -> Result<String, BoxError> {
        let answer = raw_exchange(self.address, sent).await?;
        Ok(String::from_utf8_lossy(&answer).into_owned())
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// Replaces the rule file with `text` in one rename, so that the reload loop never reads
    /// half a file (a write in place can be read empty, then whole: two reloads).
    pub fn replace_rules(&self, text: &str) -> std::io::Result<()> {
        let temp = self.rules.with_extension("tmp");
        std::fs::write(&temp, text)?;
        std::fs::rename(temp, &self.rules)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The value of metric line `series` (`name{labels}`), 0 if absent.
    pub async fn metric(&self, series: &str) -> Result<u64, BoxError> {
        let text = reqwest::get(format!("http://{}/metrics", self.admin))
            .await?
            .text()
            .await?;
        Ok(text
            .lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(0))
    }

    /// The sum of every series of metric `name`, whatever its labels.
    pub async fn metric_sum(&self, name: &str) -> Result<u64, BoxError> {
        let text = reqwest::get(format!("http://{}/metrics", self.admin))
            .await?
            .text()
            .await?;
        let mut sum = 0;
        for line in text.lines() {
            let Some(rest) = line.strip_prefix(name) else {
                continue;
            };
            if let Some((labels, value)) = rest.rsplit_once(' ') {
                if labels.is_empty() || labels.starts_with('{') {
                    sum += value.parse::<u64>()?;
                }
            }
        }
        Ok(sum)
    }

    /// Waits (off the runtime's threads) for the process to exit, within `within`, and checks
    /// that it exited cleanly; `waited` says what it waited for if it does not exit in time.
    pub async fn exits_cleanly(
        self,
        within: Duration,
        waited: &'static str,
    ) -> Result<(), BoxError> {
        let mut proxy = self;
        let exited = tokio::time::timeout(
            within,
            tokio::task::spawn_blocking(move || proxy.child.wait()),
        )
        .await;
        let status = exited.map_err(|_| waited)???;
        if !status.success() {
            return Err(format!("the proxy exited with {status:?}").into());
        }
        Ok(())
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) -> Result<(), BoxError> {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()?;
        if !status.success() {
            return Err("kill -TERM failed".into());
        }
        Ok(())
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `sent` written by hand on a new connection to `server`, then nothing more; what came back
/// until the server closed the connection.
pub async fn raw_exchange(server: SocketAddr, sent: &[&[u8]]) -> Result<Vec<u8>, BoxError> {
    exchange_on(tokio::net::TcpStream::connect(server).await?, sent).await
}

/// `sent` written by hand on `stream`, then nothing more; what came back until the server
/// closed the connection (bounded by a minute: a bound on a hang, not a timing).
pub async fn exchange_on(
    mut stream: tokio::net::TcpStream,
    sent: &[&[u8]],
) -> Result<Vec<u8>, BoxError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for bytes in sent {
        stream.write_all(bytes).await?;
    }
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), async {
        // An error (a reset) ends the answer as a close does.
        let _ = stream.read_to_end(&mut answer).await;
    })
    .await
    .map_err(|_| {
        format!(
            "{:?} held a silent client's connection for a minute",
            stream.peer_addr()
        )
    })?;
    Ok(answer)
}

/// Runs `sluicegate proxy` with `rules` and `extra` arguments (listening on a free port unless
/// they say `--listen`, with no admin listener unless they say `--admin`) until it exits (it
/// must not start), and returns its standard error.
pub fn start_refused(dir: &Path, rules: &str, extra: &[&str]) -> Result<String, BoxError> {
    let path = dir.join("rules.yaml");
    std::fs::write(&path, rules)?;
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sluicegate"))
        .args(["proxy", "--upstream", "http://127.0.0.1:1"])
        .args(if extra.contains(&"--admin") {
            &[][..]
        } else {
            &["--admin", "off"][..]
        })
        .args(if extra.contains(&"--listen") {
            &[][..]
        } else {
            &["--listen", "127.0.0.1:0"][..]
        })
        .arg("--config")
        .arg(&path)
        .args(extra)
        .output()?;
    if output.status.success() {
        return Err("the proxy started".into());
    }
    Ok(String::from_utf8_lossy(&output.stderr).into_owned())
}

/// Waits (polling, up to 10 s) until `check` holds: for effects that land "soon" (a reload,
/// a permit given back by a dropped connection), never a timing assertion.
pub async fn eventually<F, Fut>(what: &str, mut check: F) -> Result<(), BoxError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, BoxError>>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if check().await? {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("never happened: {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Debian's nginx run as this user: a temporary prefix, in the foreground, logging to a file.
pub struct Nginx {
    child: Child,
    pub address: SocketAddr,
    dir: tempfile::TempDir,
}

impl Nginx {
    /// Starts nginx with `http_body` (the inside of its `http {}` block, `LISTEN` replaced by
    /// the port it listens on); again on another port if something took the one found free
    /// before nginx bound it.
    pub fn start(http_body: &str) -> Result<Nginx, BoxError> {
        for _ in 0..5 {
            if let Some(nginx) = Nginx::try_start(http_body)? {
                return Ok(nginx);
            }
        }
        Err("every port tried for nginx was taken by the time it bound it".into())
    }

    /// Starts nginx on a port found free; `None` if it was taken before nginx bound it.
    fn try_start(http_body: &str) -> Result<Option<Nginx>, BoxError> {
        let dir = tempfile::tempdir()?;
        let port = free_port()?;
        let address: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        let prefix = dir.path();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {pid};\n\
             error_log {log} warn;\nevents {{ worker_connections 1024; }}\n\
             http {{\n access_log off;\n client_body_temp_path {p}/body;\n \
             proxy_temp_path {p}/proxy;\n fastcgi_temp_path {p}/fastcgi;\n \
             uwsgi_temp_path {p}/uwsgi;\n scgi_temp_path {p}/scgi;\n{body}\n}}\n",
            pid = prefix.join("nginx.pid").display(),
            log = prefix.join("error.log").display(),
            p = prefix.display(),
            body = http_body.replace("LISTEN", &address.to_string()),
        );
        let conf_path = prefix.join("nginx.conf");
        std::fs::write(&conf_path, conf)?;
        let child = Command::new("/usr/sbin/nginx")
            .arg("-p")
            .arg(prefix)
            .arg("-c")
            .arg(&conf_path)
            .args(["-e", "stderr"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(prefix.join("stderr.log"))?)
            .spawn()?;
        let mut nginx = Nginx {
            child,
            address,
            dir,
        };
        // nginx logs nothing once it listens: a port another listener took in the meantime
        // would pass for nginx's (`free_port` hands out no port twice, so not another test's
        // proxy or nginx).
        if let Err(error) = wait_started(&mut nginx.child, &[address], || true) {
            let errors = nginx.errors();
            if errors.contains("Address already in use") {
                return Ok(None);
            }
            return Err(format!("{error}; nginx said:\n{errors}").into());
        }
        Ok(Some(nginx))
    }

    pub fn errors(&self) -> String {
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        read(&self.dir.path().join("stderr.log")) + &read(&self.dir.path().join("error.log"))
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Collects what went wrong, to report every failure of a table at once.
#[derive(Debug, Default)]
pub struct Failures(Vec<String>);

impl Failures {
    pub fn push(&mut self, failure: String) {
        self.0.push(failure);
    }

    /// Records `what` unless `got == expected`.
    pub fn check<T: PartialEq + std::fmt::Debug>(&mut self, what: &str, got: T, expected: T) {
        if got != expected {
            self.0
                .push(format!("{what}: got {got:?}, expected {expected:?}"));
        }
    }

    /// Fails the test with every failure, one a line, and `context` after them.
    pub fn assert_none(self, context: &str) {
        assert!(
            self.0.is_empty(),
            "{} failure(s):\n{}\n{context}",
            self.0.len(),
            self.0.join("\n")
        );
    }
}

/// Reads `stream` until `buf` holds `needle`: the index just past it, or `None` at the end of
/// input.
pub async fn read_past(
    stream: &mut tokio::net::TcpStream,
    buf: &mut Vec<u8>,
    needle: &[u8],
) -> Option<usize> {
    use tokio::io::AsyncReadExt;
    loop {
        if let Some(at) = raw_upstream::find(buf, needle) {
            return Some(at + needle.len());
        }
        match stream.read_buf(buf).await {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}
