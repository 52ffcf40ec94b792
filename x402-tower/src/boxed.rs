//! The one boxed future type of the crate's traits.

use std::future::Future;
use std::pin::Pin;

/// A boxed, `Send` future: what the methods of this crate's traits ([`Settler`](crate::Settler),
/// [`PaymentStore`](crate::PaymentStore), [`PriceSource`](crate::PriceSource), ...) return, so that they can be
/// used as trait objects. Re-exported by each module whose trait returns it.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
