//! A WebSocket tunnel: once the upstream has switched (`101`) and the client has been told,
//! bytes go both ways between the two connections as they come, until either side closes or
//! neither sends anything for the idle bound (nginx's `proxy_read_timeout` on an upgraded
//! connection).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use sluicegate_http::rate_limit::HoldPermits;

use crate::plumbing::finish_within;

/// What one direction reads and writes at a time.
const PIECE: usize = 16 * 1024;

/// The tunnels open, for a shutdown: they are given its grace period to end by themselves,
/// then closed.
#[derive(Debug, Default)]
pub(crate) struct Tunnels {
    running: TaskTracker,
    stop: CancellationToken,
    /// How many are open (a metric, shared with the metrics).
    open: Arc<AtomicU64>,
}

impl Tunnels {
    /// Tunnels counted in `open`.
    pub(crate) fn new(open: Arc<AtomicU64>) -> Tunnels {
        Tunnels {
            running: TaskTracker::new(),
            stop: CancellationToken::new(),
            open,
        }
    }

    /// Waits up to `grace` for the tunnels open to end, then closes those left.
    pub(crate) async fn finish(&self, grace: Duration) {
        self.running.close();
        finish_within(grace, self.running.wait(), "proxy: WebSockets").await;
        self.stop.cancel();
        self.running.wait().await;
    }

    /// Joins the client's side of a switch (`client`, ready once hyper has sent the `101`)
    /// with the upstream's (`upstream`, ready once hyper has read its `101`), on a task of its own, until either side closes, neither sends
    /// anything for `idle`, or a shutdown's grace runs out; `held` (the request's
    /// `concurrency` permits) is dropped with the tunnel.
    pub(crate) fn open(
        &self,
        client: OnUpgrade,
        upstream: OnUpgrade,
        idle: Duration,
        held: HoldPermits,
    ) {
        let open = Arc::clone(&self.open);
        let stop = self.stop.clone();
        self.running.spawn(async move {
            let _held = held;
            // Either side gone before its switch ends the tunnel before it began. What either
            // sent right after the switch, read with its head, comes first from its side.
            let (Ok(client), Ok(upstream)) = tokio::join!(client, upstream) else {
                return;
            };
            let _counted = Counted::new(&open);
            let (client, upstream) = (TokioIo::new(client), TokioIo::new(upstream));
            tokio::select! {
                () = join(client, upstream, idle) => {}
                () = stop.cancelled() => {}
            }
        });
    }
}

/// One tunnel counted open until dropped.
struct Counted(Arc<AtomicU64>);

impl Counted {
    fn new(open: &Arc<AtomicU64>) -> Counted {
        open.fetch_add(1, Ordering::Relaxed);
        Counted(Arc::clone(open))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Copies both ways between `a` and `b` until both directions have ended, one has failed,
/// or nothing went either way for `idle`.
async fn join<A, B>(a: A, b: B, idle: Duration)
where
    A: AsyncRead + AsyncWrite,
    B: AsyncRead + AsyncWrite,
{
    let (a_read, a_write) = tokio::io::split(a);
    let (b_read, b_write) = tokio::io::split(b);
    let activity = Activity::new();
    let both_ways = async {
        tokio::try_join!(
            copy(a_read, b_write, &activity),
            copy(b_read, a_write, &activity)
        )
    };
    tokio::select! {
        _ = both_ways => {}
        () = activity.quiet_for(idle) => {}
    }
}

/// When bytes last went through a tunnel, either way.
struct Activity {
    start: Instant,
    /// Milliseconds after `start`.
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn now(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// Returns once nothing has gone through for `idle`.
    async fn quiet_for(&self, idle: Duration) {
        loop {
            let last = self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            if Instant::now() >= last + idle {
                return;
            }
            tokio::time::sleep_until(last + idle).await;
        }
    }
}

/// Copies `from` to `to` until `from` ends (then `to`'s write side is shut, as the peer shut
/// its own), each piece read and each written counted in `activity`.
async fn copy<R, W>(mut from: R, mut to: W, activity: &Activity) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut piece = vec![0u8; PIECE];
    loop {
        let read = from.read(&mut piece).await?;
        activity.now();
        if read == 0 {
            return to.shutdown().await;
        }
        to.write_all(&piece[..read]).await?;
        activity.now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::DuplexStream;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// A tunnel between two in-memory pipes; the far ends are returned.
    fn tunnel(idle: Duration) -> (DuplexStream, DuplexStream, tokio::task::JoinHandle<()>) {
        let (client, client_side) = tokio::io::duplex(64);
        let (upstream, upstream_side) = tokio::io::duplex(64);
        let joined = tokio::spawn(join(client_side, upstream_side, idle));
        (client, upstream, joined)
    }

    #[tokio::test(start_paused = true)]
    async fn bytes_go_both_ways_and_an_end_is_passed_on() -> TestResult {
        let (mut client, mut upstream, joined) = tunnel(Duration::from_secs(60));
        client.write_all(b"ping").await?;
        let mut got = [0u8; 4];
        upstream.read_exact(&mut got).await?;
        assert_eq!(&got, b"ping");
        upstream.write_all(b"pong").await?;
        client.read_exact(&mut got).await?;
        assert_eq!(&got, b"pong");
        // The client ends its side: the upstream reads the end, and can still answer.
        client.shutdown().await?;
        let mut rest = Vec::new();
        upstream.read_to_end(&mut rest).await?;
        assert!(rest.is_empty());
        upstream.write_all(b"bye").await?;
        upstream.shutdown().await?;
        client.read_to_end(&mut rest).await?;
        assert_eq!(rest, b"bye");
        joined.await?;
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_tunnel_quiet_for_the_idle_bound_is_closed_and_a_busy_one_is_not() -> TestResult {
        let idle = Duration::from_secs(60);
        let (mut client, mut upstream, joined) = tunnel(idle);
        // A message every 50 s for five minutes: never quiet for 60 s.
        let mut got = [0u8; 1];
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_secs(50)).await;
            client.write_all(b"x").await?;
            upstream.read_exact(&mut got).await?;
        }
        assert!(!joined.is_finished());
        // Then nothing: the tunnel ends once quiet for the bound (not up to twice it), and
        // both sides read their end.
        let quiet_from = Instant::now();
        joined.await?;
        let quiet = quiet_from.elapsed();
        assert!(
            quiet >= idle && quiet < idle + Duration::from_secs(1),
            "{quiet:?}"
        );
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await?;
        upstream.read_to_end(&mut rest).await?;
        assert!(rest.is_empty());
        Ok(())
    }
}
