//! What the floor proxies share: their arguments, and a thread per worker, each running a
//! single-threaded runtime with its own `SO_REUSEPORT` listening socket.

use std::future::Future;
use std::net::SocketAddr;

use tokio::net::{TcpSocket, TcpStream};

pub(crate) type Error = Box<dyn std::error::Error + Send + Sync>;

/// Where to listen, the upstream, and how many workers: `LISTEN UPSTREAM [WORKERS]` (default 2).
pub(crate) struct Arguments {
    pub(crate) listen: SocketAddr,
    pub(crate) upstream: SocketAddr,
    pub(crate) workers: usize,
}

impl Arguments {
    /// Reads the command line; `name` is the program's, for the usage line.
    pub(crate) fn parse(name: &str) -> Result<Arguments, Error> {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let (Some(listen), Some(upstream)) = (args.first(), args.get(1)) else {
            return Err(format!("usage: {name} LISTEN UPSTREAM [WORKERS]").into());
        };
        Ok(Arguments {
            listen: listen.parse()?,
            upstream: upstream.parse()?,
            workers: args.get(2).map_or(Ok(2), |w| w.parse())?,
        })
    }
}

/// Runs `workers` threads that accept on `listen` and serve each connection (its stream and
/// its peer) on a task of their own, until one of them fails.
pub(crate) fn run_workers<S, F>(listen: SocketAddr, workers: usize, serve: S) -> Result<(), Error>
where
    S: Fn(TcpStream, SocketAddr) -> F + Clone + Send + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    let threads: Vec<_> = (0..workers)
        .map(|_| {
            let serve = serve.clone();
            std::thread::spawn(move || -> Result<(), String> {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                runtime
                    .block_on(accept(listen, serve))
                    .map_err(|e| e.to_string())
            })
        })
        .collect();
    for thread in threads {
        thread.join().map_err(|_| "a worker panicked")??;
    }
    Ok(())
}

async fn accept<S, F>(listen: SocketAddr, serve: S) -> Result<(), Error>
where
    S: Fn(TcpStream, SocketAddr) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    let socket = if listen.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseport(true)?;
    socket.bind(listen)?;
    let listener = socket.listen(1024)?;
    loop {
        let (stream, peer) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve(stream, peer));
    }
}
