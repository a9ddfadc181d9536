//! A worker's idle connections to the upstream: a stack (the connection idle the shortest
//! time is used first), behind a lock no other thread takes, swept of connections idle too
//! long.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::proxy::upstream::conn::Conn;

/// How many idle connections a pool keeps at most.
const MAX_IDLE: usize = 1024;
/// How often, at least, idle connections past the pool's idle timeout are closed.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// One worker's idle connections.
#[derive(Debug)]
pub(crate) struct Pool {
    /// Idle connections, the one idle longest first.
    idle: Mutex<Idle>,
    /// How long a connection may stay idle before it is closed, not used.
    idle_timeout: Duration,
}

#[derive(Debug, Default)]
struct Idle {
    connections: Vec<(Conn, Instant)>,
    /// The worker's h2 connection, shared by its requests, if the upstream speaks h2.
    shared: Option<Conn>,
    sweeping: bool,
}

impl Pool {
    pub(crate) fn new(idle_timeout: Duration) -> Pool {
        Pool {
            idle: Mutex::default(),
            idle_timeout,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Idle> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A stream of the worker's h2 connection, or the HTTP/1.1 connection idle the shortest
    /// time that is still open.
    pub(crate) fn checkout(&self) -> Option<Conn> {
        loop {
            let mut idle = self.lock();
            if let Some(shared) = idle.shared.as_ref() {
                if !shared.is_closed() {
                    return shared.another_stream();
                }
                idle.shared = None;
            }
            let (conn, since) = idle.connections.pop()?;
            drop(idle);
            if since.elapsed() <= self.idle_timeout && !conn.is_closed() {
                return Some(conn);
            }
            conn.close();
        }
    }

    /// Shares `conn`, an h2 connection, with the worker's next requests.
    pub(crate) fn share(&self, conn: &Conn) {
        self.lock().shared = conn.another_stream();
    }

    /// Puts back an HTTP/1.1 connection whose exchange has ended (an h2 stream just ends).
    pub(crate) fn put(&self, conn: Conn) {
        if conn.is_h2() {
            return;
        }
        let mut idle = self.lock();
        if idle.connections.len() < MAX_IDLE && !conn.is_closed() {
            idle.connections.push((conn, Instant::now()));
        } else {
            drop(idle);
            conn.close();
        }
    }

    /// Starts the task that closes connections idle too long (once per pool, on the runtime of
    /// the thread the pool serves).
    pub(crate) fn start_sweeping(self: &Arc<Self>) {
        {
            let mut idle = self.lock();
            if idle.sweeping {
                return;
            }
            idle.sweeping = true;
        }
        let pool: Weak<Pool> = Arc::downgrade(self);
        // Never a busy loop, whatever the timeout (a zero one keeps no connection).
        let every = SWEEP_EVERY
            .min(self.idle_timeout)
            .max(Duration::from_millis(10));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(pool) = pool.upgrade() else {
                    return;
                };
                let idle_timeout = pool.idle_timeout;
                let expired: Vec<Conn> = {
                    let mut idle = pool.lock();
                    let (kept, expired): (Vec<_>, Vec<_>) =
                        std::mem::take(&mut idle.connections).into_iter().partition(
                            |(conn, since)| since.elapsed() <= idle_timeout && !conn.is_closed(),
                        );
                    idle.connections = kept;
                    expired.into_iter().map(|(conn, _)| conn).collect()
                };
                expired.into_iter().for_each(Conn::close);
            }
        });
    }
}
