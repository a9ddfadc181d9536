//! A worker's idle connections to the upstream: a stack (the connection idle the shortest
//! time is used first), behind a lock no other thread takes, swept of connections idle too
//! long.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::proxy::upstream::conn::Conn;

/// How long a connection may stay idle in a pool.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// How many idle connections a pool keeps at most.
const MAX_IDLE: usize = 1024;
/// How often idle connections past [`IDLE_TIMEOUT`] are closed.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// One worker's idle connections.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    /// Idle connections, the one idle longest first.
    idle: Mutex<Idle>,
}

#[derive(Debug, Default)]
struct Idle {
    connections: Vec<(Conn, Instant)>,
    sweeping: bool,
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, Idle> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The connection idle the shortest time that is still open.
    pub(crate) fn checkout(&self) -> Option<Conn> {
        loop {
            let (mut conn, since) = self.lock().connections.pop()?;
            if since.elapsed() <= IDLE_TIMEOUT && !conn.io.is_stale() {
                return Some(conn);
            }
        }
    }

    pub(crate) fn put(&self, conn: Conn) {
        let mut idle = self.lock();
        if idle.connections.len() < MAX_IDLE {
            idle.connections.push((conn, Instant::now()));
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
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(SWEEP_EVERY).await;
                let Some(pool) = pool.upgrade() else {
                    return;
                };
                let mut idle = pool.lock();
                idle.connections.retain_mut(|(conn, since)| {
                    since.elapsed() <= IDLE_TIMEOUT && !conn.io.is_stale()
                });
            }
        });
    }
}
