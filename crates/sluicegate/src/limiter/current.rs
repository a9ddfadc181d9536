//! [`CurrentAlgorithm`]: a limiter's algorithm as it is at one moment, for limiters whose
//! algorithm can be changed through a shared reference.

use std::sync::Arc;

/// A limiter's algorithm as it is now, read through [`KeyedLimiter::algorithm`] or
/// [`DirectLimiter::algorithm`]: a later `set_algorithm` does not change the one held.
///
/// [`KeyedLimiter::algorithm`]: crate::KeyedLimiter::algorithm
/// [`DirectLimiter::algorithm`]: crate::DirectLimiter::algorithm
pub struct CurrentAlgorithm<'a, A>(pub(crate) Held<'a, A>);

/// Where the algorithm is: in the limiter (never changed yet) or swapped in.
pub(crate) enum Held<'a, A> {
    /// A direct limiter's first algorithm, kept in place.
    InPlace(&'a A),
    /// A keyed limiter's, read through its `ArcSwap`.
    Guarded(arc_swap::Guard<Arc<A>>),
    /// A direct limiter's since a change.
    Shared(Arc<A>),
}

impl<A> std::ops::Deref for CurrentAlgorithm<'_, A> {
    type Target = A;

    fn deref(&self) -> &A {
        match &self.0 {
            Held::InPlace(algorithm) => algorithm,
            Held::Guarded(guard) => guard,
            Held::Shared(algorithm) => algorithm,
        }
    }
}

impl<A: std::fmt::Debug> std::fmt::Debug for CurrentAlgorithm<'_, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}
