//! Interface A: content licensing behind x402.
//!
//! - [`handlers`]: the thin axum handlers (`/x402Article/list`, `/x402Article`, `/serveLlmsTxt`, receipts).
//! - [`receipt`]: what a license receipt is, its token id, its JSON view and its HTML certificate.
//! - [`llms_txt`]: the licensing instructions text.
//! - [`catalog`]: the deterministic demo catalog.
//! - [`payment`]: the bridge to the x402 layer (network resolution, the verified payment a handler sees).
//! - [`settlements`]: the settlement log, the x402 layer's settlement observer.
//!
//! # Order of work for `GET /x402Article`
//!
//! 0. Only `GET` (and `HEAD`) reach the route's layers: any other method is answered `405` by the router
//!    before anything else (the layers wrap the route's GET only), so nobody is asked to pay for a request that
//!    would not be served. `HEAD` gets the 402 of `GET` and never spends a payment.
//! 1. [`handlers::with_article`] answers 400 (missing `articleId`) or 404 (unknown or unpublished)
//!    **before** the x402 layer, so nobody is asked to pay for something that does not exist, and it
//!    puts the [`Article`](crate::domain::Article) in the request extensions.
//! 2. The x402 layer prices the request from that article (its own price), answers 402 without a valid
//!    payment, and otherwise hands the payment to x402-tower's payment engine, which records it in the
//!    database (`payment_states`, through [`store::payments`](crate::store::payments)) **before** any
//!    settlement and **settles before the handler runs**. It does not ask the settler's verify first
//!    (`settle_without_verify`): the settlement checks the same (a facilitator's `/settle` verifies again,
//!    the on-chain settler's gas estimate simulates the transfer), and a refused one is released just the
//!    same; measured, it saves 20–25% of the CPU of a purchase through a facilitator.
//! 3. [`handlers::get_article`] writes the receipt (with the settlement transaction, or `verify-only`)
//!    and only then answers 200.
//!
//! Settling before the handler is deliberate: the receipt must name the settlement, and it must be
//! stored before the article leaves the server. The risk of settle-first (the payer is charged and the
//! handler then fails) is kept small by steps 0 and 1: the only failure left after payment is a database
//! write error, which is logged with the full payment and counted in `license_receipt_failures_total`; the
//! buyer's resend of the same payment then gets the article (below). The route also runs on its own task
//! (`routes::paid_article`), so a client that hangs up cannot cancel a settlement in flight or the
//! receipt write that follows it.
//!
//! # Delivered at least once, charged at most once
//!
//! The engine's record of every payment is in the database, shared by every instance on it and by the
//! `/facilitator` API, and survives restarts:
//!
//! - a buyer who lost the answer and **resends the identical payment** for the same article gets the same
//!   article, the same receipt and the same `PAYMENT-RESPONSE` transaction, without a second settlement
//!   (the handler finds the receipt the first request wrote);
//! - the same authorization for **another article**, or after it was settled through `/facilitator/settle`,
//!   is refused with 402 `invalid_exact_evm_nonce_already_used` before anything is settled;
//! - an outcome **not known** (the on-chain settler timed out after broadcasting, a facilitator did not
//!   answer `/settle`) is answered 402 with a `PAYMENT-RESPONSE` of `success:false`,
//!   `errorReason:"settlement_pending"` and the transaction hash when there is one; the payment is recorded
//!   as pending. A resend of the identical payment reconciles (the transaction receipt or the token's
//!   `authorizationState`, never a second broadcast): settled → the article; still usable → settled anew;
//!   still pending → the same answer. A background reconciler (every 30 s) resolves pending payments by
//!   itself.
//!
//! # Settlement log: every outcome, durably
//!
//! A receipt exists only for a settled payment whose handler ran. But money may move without one (an
//! unknown outcome). So the engine reports **every** settlement attempt to [`settlements::SettlementLog`]
//! (an x402-tower `SettlementObserver`), which writes a row to the `settlements` table through
//! [`store::settlements`](crate::store::settlements) **before the client is answered**: time, outcome
//! (`settled`, `failed`, `unknown` — an unknown outcome is recorded as such, never as success or failure),
//! payer, `pay_to`, article and resource, amount, network, asset, nonce, x402 version, transaction,
//! reason/message. A reconciliation updates the unknown row to what was found and says so
//! (`resolved_from: "unknown"`, `resolved_at`). The operator reads it at
//! `GET /operator/settlements[?outcome=…][&limit=n]` (same API-token rule as `/operator/llms-txt`) and in
//! `/metrics` (`x402_settlements_recorded_total{outcome}`, `x402_settlement_record_failures_total`). A row
//! that cannot be written is logged (`SETTLEMENT NOT RECORDED`, with the payment) and counted; the client's
//! answer does not change.
//!
//! The receipts table's `UNIQUE (network, asset, payer, nonce)` stays as the last line of defence behind the
//! payment records.

pub mod articles;
pub mod bot_auth;
pub mod catalog;
pub mod discovery;
pub mod handlers;
pub mod interest;
pub mod landing;
pub mod llms_txt;
pub mod minter;
pub mod offers;
pub mod payment;
pub mod receipt;
mod routes;
pub mod rsl;
pub mod settings;
pub mod settlements;
mod sign_in;
mod state;

pub use routes::router;
pub use state::{BuildError, Licensing};

use crate::store::StoreError;
use crate::store::licensing::LicensingStore;

/// Seed the demo catalog when the database holds no article. Returns the number inserted.
pub async fn seed(store: &dyn LicensingStore) -> Result<usize, StoreError> {
    if store.count_articles().await? > 0 {
        return Ok(0);
    }
    store.insert_articles(catalog::demo_articles()).await
}

/// Price in USDC (6 decimals) as a JSON number for the catalog.
pub fn usdc_amount(atomic: u64) -> f64 {
    atomic as f64 / 1_000_000.0
}

/// Render USDC atomic units as a decimal string without float rounding (`10000` → `0.01`).
pub fn usdc_display(atomic: u64) -> String {
    let whole = atomic / 1_000_000;
    let frac = atomic % 1_000_000;
    if frac == 0 {
        return whole.to_string();
    }
    let frac = format!("{frac:06}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usdc_display_is_exact() {
        assert_eq!(usdc_display(10_000), "0.01");
        assert_eq!(usdc_display(1_500_000), "1.5");
        assert_eq!(usdc_display(2_000_000), "2");
        assert_eq!(usdc_display(1), "0.000001");
        assert_eq!(usdc_amount(50_000), 0.05);
    }
}
