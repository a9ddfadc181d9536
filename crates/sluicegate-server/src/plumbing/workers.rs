//! Worker threads, as nginx's worker processes: each runs its own single-threaded runtime and
//! accepts on the one listening socket, serving a connection itself or handing it to the
//! worker serving fewest (`loads`). A connection's work then never crosses threads: no
//! work-stealing scheduler, no wake-up of another core. The proxy serves its clients this way,
//! and `serve` its gRPC connections.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::plumbing::listener::accept_next;
use crate::plumbing::loads::{Counted, Loads};

/// What a worker serves its connections with: made on the worker's own thread, so whatever it
/// spawns runs on that worker's runtime.
pub(crate) trait WorkerServer: 'static {
    /// Serves `stream` from `peer` until it closes, on the calling worker's runtime;
    /// `counted` is dropped when the connection no longer counts as served.
    fn serve(&self, stream: TcpStream, peer: SocketAddr, counted: Counted);

    /// Once the worker has stopped accepting: lets the connections being served finish,
    /// within `grace` where the server bounds it.
    fn finish(self, grace: Duration) -> impl Future<Output = ()>;
}

/// Waits up to `grace` for `done`, the end of what a shutdown lets finish, and gives its
/// output; past it, logs that `what` is still open and stops waiting (`None`).
pub(crate) async fn finish_within<T>(
    grace: Duration,
    done: impl Future<Output = T>,
    what: &str,
) -> Option<T> {
    let finished = tokio::time::timeout(grace, done).await.ok();
    if finished.is_none() {
        tracing::warn!(?grace, "{what} still open after the shutdown grace");
    }
    finished
}

/// How the workers are named and started.
pub(crate) struct Workers {
    /// How many.
    pub(crate) count: usize,
    /// Their threads' name, numbered from 1 (`sluicegate-proxy` makes `sluicegate-proxy-1`).
    pub(crate) thread_name: &'static str,
    /// How long connections may take to finish once the workers stop accepting.
    pub(crate) grace: Duration,
}

/// A connection on its way to the worker that serves it: the socket is out of the accepting
/// worker's runtime until the receiving one registers it.
type Handed = (std::net::TcpStream, SocketAddr, Counted);

/// Binds `listen` and starts each worker's thread, each with its own single-threaded runtime
/// accepting on its own handle of that one socket and serving with the server `server(n)`
/// makes on its thread (`n` from 1); the task returned ends when every worker has finished,
/// once `stopped` changes. An error: the socket could not be bound, or a thread or runtime
/// could not be made.
///
/// One socket rather than one `SO_REUSEPORT` socket per worker: a second process started on
/// the same address fails with "address in use" instead of silently taking half of the
/// connections.
pub(crate) fn start_workers<S, F>(
    listen: SocketAddr,
    workers: &Workers,
    server: F,
    loads: &Arc<Loads>,
    stopped: &watch::Receiver<bool>,
) -> std::io::Result<(JoinHandle<()>, SocketAddr)>
where
    S: WorkerServer,
    F: Fn(usize) -> S + Send + Clone + 'static,
{
    let listener = std_listener(listen)?;
    let address = listener.local_addr()?;
    let main = start_workers_on(&listener, workers, server, loads, stopped)?;
    Ok((main, address))
}

/// [`start_workers`] on a socket already listening (non-blocking, as tokio's `into_std`
/// leaves one); the task returned ends when every worker has finished.
pub(crate) fn start_workers_on<S, F>(
    listener: &std::net::TcpListener,
    workers: &Workers,
    server: F,
    loads: &Arc<Loads>,
    stopped: &watch::Receiver<bool>,
) -> std::io::Result<JoinHandle<()>>
where
    S: WorkerServer,
    F: Fn(usize) -> S + Send + Clone + 'static,
{
    let (inboxes, receivers): (Vec<_>, Vec<_>) = (0..workers.count)
        .map(|_| mpsc::unbounded_channel())
        .unzip();
    let inboxes: Arc<[mpsc::UnboundedSender<Handed>]> = inboxes.into();
    let mut done = Vec::with_capacity(workers.count);
    let grace = workers.grace;
    for (worker, inbox) in receivers.into_iter().enumerate() {
        // The runtime is built, and the socket registered with it, here, so that a failure is
        // the caller's error, not a log line.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let listener = {
            let _entered = runtime.enter();
            TcpListener::from_std(listener.try_clone()?)?
        };
        let (finished, finished_rx) = oneshot::channel::<()>();
        let worker_loop = Worker {
            index: worker,
            loads: Arc::clone(loads),
            inboxes: Arc::clone(&inboxes),
        };
        let server = server.clone();
        let stopped = stopped.clone();
        let name = workers.thread_name;
        std::thread::Builder::new()
            .name(format!("{name}-{}", worker + 1))
            .spawn(move || {
                runtime.block_on(async move {
                    let server = server(worker + 1);
                    worker_loop
                        .run(listener, inbox, server, stopped, grace)
                        .await;
                });
                // Connections and the tasks they spawned end with the runtime, before the
                // caller hears that the workers have stopped.
                drop(runtime);
                let _ = finished.send(());
            })?;
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
    Ok(main)
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
        server: impl WorkerServer,
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
                        Err(error) => tracing::warn!(%error, "worker: cannot take a connection"),
                    }
                }
                (stream, peer) = accept_next(&listener, "worker") => {
                    self.place(&server, stream, peer);
                }
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
    fn place(&self, server: &impl WorkerServer, stream: TcpStream, peer: SocketAddr) {
        let counted = self.loads.assign(self.index);
        if counted.worker() == self.index {
            server.serve(stream, peer, counted);
            return;
        }
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(%error, "worker: cannot hand a connection over");
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
