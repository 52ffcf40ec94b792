//! Plain domain types, shared by the parts and the stores: no HTTP, no database.
//!
//! - [`article`]: an article of the catalog and a license receipt.
//! - [`license`]: what a buyer may do with an article (RSL 1.0's vocabulary), and the site's default terms.
//! - [`token`]: the receipt token id of a payment.

pub mod article;
pub mod license;
pub mod token;

pub use article::{Article, Receipt};
