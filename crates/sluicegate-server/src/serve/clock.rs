//! The service's time: the system clock in production, a manual clock in tests, so that no
//! service test depends on where a real second or minute boundary falls.

use sluicegate::store::Now;
use sluicegate::{Clock, ManualClock, Micros, SystemClock};

/// Where the engine reads "now" from. An enum rather than a type parameter: one branch per
/// reading (always the same way in a process), and the engine, its tables and its transports
/// stay one concrete type.
#[derive(Debug, Clone)]
pub enum ServiceClock {
    /// The real clock; Redis decides on its own clock (`TIME`), so replicas agree.
    System(SystemClock),
    /// Moves only when told to: tests set Unix times by hand, and Redis is given them
    /// explicitly.
    Manual(ManualClock),
}

impl ServiceClock {
    /// The real clock.
    pub fn system() -> ServiceClock {
        ServiceClock::System(SystemClock::new())
    }

    /// A manual clock reading `unix_micros` (microseconds since the Unix epoch) until moved;
    /// returns the clock to move it with too (clones share their time).
    pub fn manual(unix_micros: Micros) -> (ServiceClock, ManualClock) {
        let clock = ManualClock::new(unix_micros);
        (ServiceClock::Manual(clock.clone()), clock)
    }

    /// The time a shared store (Redis) decides at: its own clock, or this clock's explicit
    /// time.
    pub(crate) fn store_now(&self) -> Now {
        match self {
            ServiceClock::System(_) => Now::Store,
            ServiceClock::Manual(clock) => Now::At(clock.now()),
        }
    }
}

impl Default for ServiceClock {
    fn default() -> Self {
        ServiceClock::system()
    }
}

impl Clock for ServiceClock {
    #[inline(always)]
    fn now(&self) -> Micros {
        match self {
            ServiceClock::System(clock) => clock.now(),
            ServiceClock::Manual(clock) => clock.now(),
        }
    }
}
