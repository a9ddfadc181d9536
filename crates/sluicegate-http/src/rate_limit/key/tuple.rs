//! Tuples of extractors: a key made of several parts (`(PeerIp, Route)`: each client on each
//! route). The first part that cannot be read is the error.

use crate::rate_limit::key::RequestHead;

use crate::rate_limit::error::KeyError;
use crate::rate_limit::key::KeyExtractor;

macro_rules! tuple_extractor {
    ($($name:ident),+) => {
        impl<$($name: KeyExtractor),+> KeyExtractor for ($($name,)+) {
            type Key = ($($name::Key,)+);

            #[allow(non_snake_case)]
            fn extract(&self, request: &RequestHead<'_>) -> Result<Self::Key, KeyError> {
                let ($($name,)+) = self;
                Ok(($($name.extract(request)?,)+))
            }
        }
    };
}

tuple_extractor!(A, B);
tuple_extractor!(A, B, C);
tuple_extractor!(A, B, C, D);
tuple_extractor!(A, B, C, D, E);
