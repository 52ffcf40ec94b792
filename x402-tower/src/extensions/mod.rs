//! The x402 extensions this crate speaks: each one a module that knows nothing of Tower.
//!
//! | module | extension key | what it does |
//! |---|---|---|
//! | [`payment_identifier`] | `payment-identifier` | a client-chosen id per purchase: a retry is told from a new purchase |
//! | [`siwx`] | `sign-in-with-x` | a wallet that paid reads the resource again by signing in, without paying |
//! | [`offer_receipt`] | `offer-receipt` | signed offers in the 402, a signed receipt of every settlement |
//! | [`bazaar`] | `bazaar` | how a paid route is called, for a facilitator's discovery catalogue |
//! | [`terms`] | `terms` | the license terms a payment buys under |
//!
//! The layer declares them in its 402 ([`X402Config`](crate::X402Config) has one setting per extension); the
//! engine reads what a payment echoes back.

pub mod bazaar;
pub mod offer_receipt;
pub mod payment_identifier;
pub mod siwx;
pub mod terms;

/// Extensions a v2 client copies from the 402 into its payment that neither a settlement nor a
/// reconciliation reads: the server's own declarations of discovery ([`bazaar`]), its signed offers
/// ([`offer_receipt`]), sign-in-with-x (signing in is a header of its own, [`siwx`]) and its license terms
/// ([`terms`]): 3.4 KB of the 4.3 KB payment an official client sends for one of the reference server's
/// articles (944 bytes are kept). A payment record does not keep them
/// ([`StoredPayment::new`](crate::store::StoredPayment::new)): they were most of the database pages a
/// durable purchase wrote.
pub const ECHOED_EXTENSIONS: [&str; 4] = [bazaar::KEY, offer_receipt::KEY, siwx::KEY, terms::KEY];
