//! The worker threads: each runs its own single-threaded runtime and accepts on the one
//! listening socket, serving a connection itself or handing it to the worker serving fewest
//! (`loads`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::proxy::connection::{ConnectionServer, State};
use crate::proxy::error::ProxyError;
use crate::proxy::loads::{Counted, Loads};
use crate::proxy::upstream::UpstreamClient;

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
    listen: SocketAddr,
    workers: usize,
    grace: Duration,
    state: &Arc<State>,
    loads: &Arc<Loads>,
    stopped: &watch::Receiver<bool>,
) -> Result<(JoinHandle<()>, SocketAddr), ProxyError> {
    let fail = |source| ProxyError::Bind {
        address: listen,
        flag: "--listen",
        source,
    };
    let listener = std_listener(listen).map_err(fail)?;
    let address = listener.local_addr().map_err(fail)?;
    let (inboxes, receivers): (Vec<_>, Vec<_>) =
        (0..workers).map(|_| mpsc::unbounded_channel()).unzip();
    let inboxes: Arc<[mpsc::UnboundedSender<Handed>]> = inboxes.into();
    let mut done = Vec::with_capacity(workers);
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
        std::thread::Builder::new()
            .name(format!("sluicegate-proxy-{}", worker + 1))
            .spawn(move || {
                UpstreamClient::enter_worker(worker + 1);
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
            loads.stop_choosing(worker);
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
        self.loads.stop_choosing(self.index);
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
        if counted.worker() == self.index {
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
        let target = counted.worker();
        if let Err(mpsc::error::SendError((stream, peer, counted))) =
            self.inboxes[target].send((stream, peer, counted))
        {
            // That worker has stopped: it is not chosen again, and this one serves.
            self.loads.stop_choosing(target);
            drop(counted);
            if let Ok(stream) = TcpStream::from_std(stream) {
                server.serve(stream, peer, self.loads.count(self.index));
            }
        }
    }
}
