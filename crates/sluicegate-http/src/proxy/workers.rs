//! The worker threads and how new connections are spread over them.
//!
//! Every worker accepts on the one listening socket, and a connection accepted by a worker that
//! serves more connections than another is handed to the one serving fewest. Accepting alone
//! is not enough: the kernel wakes every worker for a new connection, and the one already
//! running takes every connection of a burst before the others are scheduled (measured: after
//! an idle second, all 64 connections of a `wrk` run on one of two workers, half the
//! requests per second of an even split). nginx avoids it with `EPOLLEXCLUSIVE` and one accept
//! per wake-up, which tokio does not offer.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::proxy::error::ProxyError;
use crate::proxy::pool::Pools;
use crate::proxy::server::{ConnectionServer, ProxyConfig, State};

/// The connections each worker serves, shared by the workers and the metrics.
#[derive(Debug)]
pub(crate) struct Loads {
    /// Open connections by worker (index 0: the first worker).
    open: Box<[AtomicUsize]>,
    /// Workers that no longer take connections (their thread ended).
    gone: Box<[AtomicBool]>,
    /// No workers: one count, of the connections on the caller's runtime.
    no_workers: bool,
}

impl Loads {
    /// The counts of `workers` workers (0: of the caller's runtime).
    pub(crate) fn new(workers: usize) -> Arc<Loads> {
        let slots = workers.max(1);
        Arc::new(Loads {
            open: (0..slots).map(|_| AtomicUsize::new(0)).collect(),
            gone: (0..slots).map(|_| AtomicBool::new(false)).collect(),
            no_workers: workers == 0,
        })
    }

    /// Open connections by worker.
    fn open(&self) -> impl Iterator<Item = usize> + '_ {
        self.open.iter().map(|n| n.load(Ordering::Relaxed))
    }

    /// Open connections by worker number as `--workers` counts them (1 to N; 0 alone when
    /// there are no workers).
    pub(crate) fn by_worker(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let first = usize::from(!self.no_workers);
        self.open().enumerate().map(move |(i, n)| (i + first, n))
    }

    /// Counts a new connection against `worker` until the returned guard is dropped.
    pub(crate) fn count(self: &Arc<Self>, worker: usize) -> Counted {
        self.open[worker].fetch_add(1, Ordering::Relaxed);
        Counted {
            loads: Arc::clone(self),
            worker,
        }
    }

    /// The worker that serves a connection worker `me` accepted, counted against it.
    fn assign(self: &Arc<Self>, me: usize) -> Counted {
        let open: Vec<Option<usize>> = self
            .open
            .iter()
            .zip(&self.gone)
            .map(|(n, gone)| (!gone.load(Ordering::Relaxed)).then(|| n.load(Ordering::Relaxed)))
            .collect();
        self.count(least_loaded(&open, me))
    }
}

/// `me`, unless another worker still taking connections (`Some`) serves fewer: then the first
/// of those serving fewest.
fn least_loaded(open: &[Option<usize>], me: usize) -> usize {
    let mine = open[me].unwrap_or(usize::MAX);
    open.iter()
        .enumerate()
        .filter_map(|(worker, n)| Some((worker, (*n)?)))
        .filter(|&(_, n)| n < mine)
        .min_by_key(|&(_, n)| n)
        .map_or(me, |(worker, _)| worker)
}

/// A connection counted in its worker's load until dropped (with the connection's task).
#[derive(Debug)]
pub(crate) struct Counted {
    loads: Arc<Loads>,
    worker: usize,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.loads.open[self.worker].fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection on its way to the worker that serves it: the socket is out of the accepting
/// worker's runtime until the receiving one registers it.
type Handed = (std::net::TcpStream, SocketAddr, Counted);

/// Binds the listening socket and starts each worker's thread, each with its own
/// single-threaded runtime accepting on its own handle of that one socket; the task returned
/// ends when every worker has finished.
///
/// One socket rather than one `SO_REUSEPORT` socket per worker: a second proxy started on the
/// same address fails with "address in use" instead of silently taking half of the
/// connections.
pub(crate) fn start_workers(
    config: &ProxyConfig,
    state: &Arc<State>,
    loads: &Arc<Loads>,
    stopped: &watch::Receiver<bool>,
) -> Result<(JoinHandle<()>, SocketAddr), ProxyError> {
    let fail = |source| ProxyError::Bind {
        address: config.listen,
        source,
    };
    let listener = std_listener(config.listen).map_err(fail)?;
    let address = listener.local_addr().map_err(fail)?;
    let (inboxes, receivers): (Vec<_>, Vec<_>) = (0..config.workers)
        .map(|_| mpsc::unbounded_channel())
        .unzip();
    let inboxes: Arc<[mpsc::UnboundedSender<Handed>]> = inboxes.into();
    let mut done = Vec::with_capacity(config.workers);
    for (worker, inbox) in receivers.into_iter().enumerate() {
        let listener = listener.try_clone().map_err(fail)?;
        // The runtime is built here so that a failure is the caller's error, not a log line.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(fail)?;
        let (finished, finished_rx) = oneshot::channel::<()>();
        let worker_loop = Worker {
            index: worker,
            loads: Arc::clone(loads),
            inboxes: Arc::clone(&inboxes),
        };
        let state = Arc::clone(state);
        let stopped = stopped.clone();
        let grace = config.shutdown_grace;
        std::thread::Builder::new()
            .name(format!("sluicegate-proxy-{}", worker + 1))
            .spawn(move || {
                Pools::enter_worker(worker + 1);
                runtime.block_on(async move {
                    match TcpListener::from_std(listener) {
                        Ok(listener) => {
                            worker_loop
                                .run(
                                    listener,
                                    inbox,
                                    ConnectionServer::new(state),
                                    stopped,
                                    grace,
                                )
                                .await;
                        }
                        Err(error) => {
                            tracing::error!(%error, "proxy: worker {} cannot listen", worker + 1);
                        }
                    }
                });
                // Upstream connections and pool tasks end with the runtime, before the proxy
                // says it has stopped.
                drop(runtime);
                let _ = finished.send(());
            })
            .map_err(fail)?;
        done.push(finished_rx);
    }
    let loads = Arc::clone(loads);
    let main = tokio::spawn(async move {
        for (worker, finished) in done.into_iter().enumerate() {
            // An error: the worker panicked (and said so); the others still finish.
            let _ = finished.await;
            loads.gone[worker].store(true, Ordering::Relaxed);
        }
    });
    Ok((main, address))
}

/// A non-blocking listening socket with `SO_REUSEADDR` (connections of a previous run in
/// TIME_WAIT do not keep the address), not yet registered with any runtime.
fn std_listener(address: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = if address.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    // `listen` registers the socket with the calling runtime; `into_std` takes it back for the
    // workers' own.
    socket.listen(1024)?.into_std()
}

/// One worker's accept loop.
struct Worker {
    index: usize,
    loads: Arc<Loads>,
    inboxes: Arc<[mpsc::UnboundedSender<Handed>]>,
}

impl Worker {
    async fn run(
        self,
        listener: TcpListener,
        mut inbox: mpsc::UnboundedReceiver<Handed>,
        server: ConnectionServer,
        mut stopped: watch::Receiver<bool>,
        grace: Duration,
    ) {
        loop {
            tokio::select! {
                biased;
                _ = stopped.changed() => break,
                Some((stream, peer, counted)) = inbox.recv() => {
                    match TcpStream::from_std(stream) {
                        Ok(stream) => server.serve(stream, peer, counted),
                        Err(error) => tracing::warn!(%error, "proxy: cannot take a connection"),
                    }
                }
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => self.place(&server, stream, peer),
                    Err(error) => {
                        // Out of file descriptors, mostly: wait a little rather than spin.
                        tracing::warn!(%error, "proxy: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
            }
        }
        // Stops taking connections: those already handed over are served by whoever took
        // them, and none is handed here any more.
        self.loads.gone[self.index].store(true, Ordering::Relaxed);
        drop(listener);
        inbox.close();
        while let Some((stream, peer, counted)) = inbox.recv().await {
            if let Ok(stream) = TcpStream::from_std(stream) {
                server.serve(stream, peer, counted);
            }
        }
        server.finish(grace).await;
    }

    /// Serves a connection this worker accepted, or hands it to the worker serving fewest.
    fn place(&self, server: &ConnectionServer, stream: TcpStream, peer: SocketAddr) {
        let _ = stream.set_nodelay(true);
        let counted = self.loads.assign(self.index);
        if counted.worker == self.index {
            server.serve(stream, peer, counted);
            return;
        }
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(%error, "proxy: cannot hand a connection over");
                return;
            }
        };
        let target = counted.worker;
        if let Err(mpsc::error::SendError((stream, peer, counted))) =
            self.inboxes[target].send((stream, peer, counted))
        {
            // That worker has stopped: it is not chosen again, and this one serves.
            self.loads.gone[target].store(true, Ordering::Relaxed);
            drop(counted);
            if let Ok(stream) = TcpStream::from_std(stream) {
                server.serve(stream, peer, self.loads.count(self.index));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Places `n` connections all accepted by worker `me`, as a burst the first worker to wake
    /// takes whole.
    fn burst(loads: &Arc<Loads>, me: usize, n: usize) -> Vec<Counted> {
        (0..n).map(|_| loads.assign(me)).collect()
    }

    #[test]
    fn a_burst_accepted_by_one_worker_is_spread_evenly() {
        let loads = Loads::new(2);
        let held = burst(&loads, 1, 64);
        assert_eq!(loads.open().collect::<Vec<_>>(), [32, 32]);
        let loads = Loads::new(3);
        let _held3 = burst(&loads, 0, 64);
        assert_eq!(loads.open().collect::<Vec<_>>(), [22, 21, 21]);
        drop(held);
    }

    #[test]
    fn closed_connections_make_room_where_they_were() {
        let loads = Loads::new(2);
        let mut held = burst(&loads, 0, 4);
        // Worker 0's two connections close: the next two go to it even when worker 1 accepts.
        held.retain(|c| c.worker == 1);
        assert_eq!(loads.open().collect::<Vec<_>>(), [0, 2]);
        let more = burst(&loads, 1, 2);
        assert!(more.iter().all(|c| c.worker == 0));
        assert_eq!(loads.open().collect::<Vec<_>>(), [2, 2]);
    }

    #[test]
    fn a_worker_gone_is_never_chosen() {
        let loads = Loads::new(3);
        loads.gone[2].store(true, Ordering::Relaxed);
        let held = burst(&loads, 0, 10);
        assert_eq!(loads.open().collect::<Vec<_>>(), [5, 5, 0]);
        drop(held);
        assert_eq!(loads.open().collect::<Vec<_>>(), [0, 0, 0]);
    }

    #[test]
    fn ties_keep_the_connection_where_it_was_accepted() {
        assert_eq!(least_loaded(&[Some(3), Some(3)], 1), 1);
        assert_eq!(least_loaded(&[Some(3), Some(4), Some(2)], 1), 2);
        assert_eq!(least_loaded(&[None, Some(9)], 0), 1);
    }
}
