//! An HTTP server whose capacity is bounded, for overload runs (scripts/bench-adaptive-proxy.sh):
//! a fixed pool of workers, each request holding one for its service time while the others
//! wait their turn in arrival order, so that under overload latency grows with the queue as it
//! does in front of a real service (a database pool, a thread pool).
//!
//! ```text
//! cargo run -p sluicegate-http --example bounded_upstream -- --workers 4 --service-ms 20
//! ```
//!
//! Options: `--listen ADDR` (default 127.0.0.1:0; the address is printed), `--workers N`
//! (default 4), `--service-ms MS` (default 20), `--threads N` (runtime threads, default 1).
//! It answers `ok` on every path, and every second prints to stderr how many requests it
//! answered and how many were waiting for a worker.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use tokio::sync::Semaphore;

/// The server's settings, from the command line.
struct Options {
    listen: String,
    workers: usize,
    service: Duration,
    threads: usize,
}

fn parse() -> Result<Options, String> {
    let mut options = Options {
        listen: "127.0.0.1:0".into(),
        workers: 4,
        service: Duration::from_millis(20),
        threads: 1,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag}: `{value}` is not a whole number"))
        };
        match flag.as_str() {
            "--listen" => options.listen = value.clone(),
            "--workers" => {
                options.workers = usize::try_from(number()?).map_err(|e| e.to_string())?
            }
            "--service-ms" => options.service = Duration::from_millis(number()?),
            "--threads" => {
                options.threads = usize::try_from(number()?).map_err(|e| e.to_string())?
            }
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if options.workers == 0 || options.threads == 0 {
        return Err("--workers and --threads must be at least 1".into());
    }
    Ok(options)
}

/// The worker pool and its counters.
struct Pool {
    workers: Semaphore,
    service: Duration,
    waiting: AtomicU64,
    answered: AtomicU64,
}

async fn serve_one(State(pool): State<Arc<Pool>>) -> &'static str {
    pool.waiting.fetch_add(1, Ordering::Relaxed);
    // Tokio's semaphore is fair: workers are handed out in the order requests arrived.
    let worker = pool.workers.acquire().await;
    pool.waiting.fetch_sub(1, Ordering::Relaxed);
    tokio::time::sleep(pool.service).await;
    drop(worker);
    pool.answered.fetch_add(1, Ordering::Relaxed);
    "ok\n"
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = parse().map_err(|message| format!("bounded_upstream: {message}"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(options.threads)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let pool = Arc::new(Pool {
            workers: Semaphore::new(options.workers),
            service: options.service,
            waiting: AtomicU64::new(0),
            answered: AtomicU64::new(0),
        });
        let app = Router::new()
            .fallback(serve_one)
            .with_state(Arc::clone(&pool));
        let listener = tokio::net::TcpListener::bind(&options.listen).await?;
        println!("listening on {}", listener.local_addr()?);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            let mut before = 0;
            loop {
                tick.tick().await;
                let answered = pool.answered.load(Ordering::Relaxed);
                let waiting = pool.waiting.load(Ordering::Relaxed);
                eprintln!("answered/s {} waiting {waiting}", answered - before);
                before = answered;
            }
        });
        axum::serve(listener, app).await?;
        Ok(())
    })
}
