//! [`CurrentAlgorithm`]: a limiter's algorithm as it is at one moment, for limiters whose
//! algorithm can be changed through a shared reference.

use std::sync::Arc;

/// A limiter's algorithm as it is now, read through [`KeyedLimiter::algorithm`] or
/// [`DirectLimiter::algorithm`]: a later `set_algorithm` does not change the one held.
///
/// [`KeyedLimiter::algorithm`]: crate::KeyedLimiter::algorithm
/// [`DirectLimiter::algorithm`]: crate::DirectLimiter::algorithm
pub struct CurrentAlgorithm<A>(pub(crate) arc_swap::Guard<Arc<A>>);

impl<A> std::ops::Deref for CurrentAlgorithm<A> {
    type Target = A;

    fn deref(&self) -> &A {
        &self.0
    }
}

impl<A: std::fmt::Debug> std::fmt::Debug for CurrentAlgorithm<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}
