//! The receipt token id of a payment: one per authorization, sorted by time, unguessable.

use alloy_primitives::U256;
use sha2::{Digest, Sha256};

/// The receipt token id of a payment: `validBefore × 10^67 + (SHA-256 of the payment identity mod 10^67)`
/// in decimal, where the identity is `network`, `asset`, `payer` and `nonce` (lower-cased).
///
/// - **One payment, one token id**: it is computed from the signed authorization alone, so the identical
///   payment sent again (a buyer who lost its answer) yields the same id, which the receipts' key refuses
///   twice; and it reveals nothing a payer did not already publish by paying. (A second authorization
///   reusing a nonce would carry its own `validBefore`, so its own id: the engine's payment record, one
///   settlement per authorization's nonce, and the token contract refuse it before any receipt.)
/// - **Ids sort by time**: `validBefore` leads, and a payment is only accepted while it lies between now and
///   the offer's horizon (`maxTimeoutSeconds`, minutes). So a new receipt's key lands next to the last ones
///   in the receipts' index instead of on a random page of it: a durable purchase writes one index page
///   fewer (docs/bench/reference-server-licensing.md). 67 digits of the hash (222
///   bits) keep an id unguessable for whoever does not know the payment.
/// - A valid ERC-721 token id (a `uint256`: below 10^77 for any `validBefore` before the year 2286; a later
///   one is taken as 9,999,999,999).
///
/// Receipts issued before ids sorted by time (November 2026) have the whole hash as their id ([`legacy_token_id`]); they are found
/// by it as before.
pub fn token_id(network: &str, asset: &str, payer: &str, nonce: &str, valid_before: u64) -> String {
    let split = hash_split();
    let time = U256::from(valid_before.min(MAX_VALID_BEFORE));
    (time * split + identity_hash(network, asset, payer, nonce) % split).to_string()
}

/// The token id receipts had before ids sorted by time: the whole SHA-256 of the payment identity.
pub fn legacy_token_id(network: &str, asset: &str, payer: &str, nonce: &str) -> String {
    identity_hash(network, asset, payer, nonce).to_string()
}

/// Whether `token` is the token id of the payment `network`, `asset`, `payer`, `nonce` in either form
/// ([`token_id`] for some `validBefore`, or [`legacy_token_id`]).
pub fn is_token_of(token: &str, network: &str, asset: &str, payer: &str, nonce: &str) -> bool {
    let Ok(id) = token.parse::<U256>() else {
        return false;
    };
    if id.to_string() != token {
        return false; // Not canonical (a leading zero, a sign): no id is written so.
    }
    let hash = identity_hash(network, asset, payer, nonce);
    let split = hash_split();
    id == hash || (id % split == hash % split && id / split <= U256::from(MAX_VALID_BEFORE))
}

/// The largest `validBefore` a token id carries (in 2286): the id stays below 10^77 < 2^256.
const MAX_VALID_BEFORE: u64 = 9_999_999_999;

/// 10^67: where a token id's time and hash parts meet.
fn hash_split() -> U256 {
    static SPLIT: std::sync::LazyLock<U256> =
        std::sync::LazyLock::new(|| U256::from(10u8).pow(U256::from(67u8)));
    *SPLIT
}

fn identity_hash(network: &str, asset: &str, payer: &str, nonce: &str) -> U256 {
    let mut h = Sha256::new();
    for part in ["x402-license-receipt/1", network, asset, payer, nonce] {
        h.update(part.to_ascii_lowercase().as_bytes());
        h.update([0u8]);
    }
    U256::from_be_bytes::<32>(h.finalize().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_id_is_stable_case_insensitive_and_decimal() {
        let a = token_id("eip155:84532", "0xAbC", "0xDeF", "0x01", 1_800_000_000);
        assert_eq!(
            a,
            token_id("eip155:84532", "0xabc", "0xdef", "0x01", 1_800_000_000)
        );
        assert_ne!(
            a,
            token_id("eip155:84532", "0xabc", "0xdef", "0x02", 1_800_000_000)
        );
        assert!(a.bytes().all(|b| b.is_ascii_digit()));
        assert_eq!(a.len(), 77);
        assert!(a.starts_with("1800000000"));
        assert!(a.parse::<U256>().is_ok());
    }

    #[test]
    fn token_ids_sort_by_valid_before_as_text() {
        let mut ids: Vec<(u64, String)> = (0..200u64)
            .map(|i| {
                let vb = 1_764_000_000 + (i * 7919) % 1000;
                (
                    vb,
                    token_id("eip155:8453", "0xa", "0xb", &format!("0x{i:064x}"), vb),
                )
            })
            .collect();
        ids.sort_by(|a, b| a.1.cmp(&b.1));
        assert!(
            ids.windows(2).all(|w| w[0].0 <= w[1].0),
            "text order is time order"
        );
    }

    #[test]
    fn a_token_id_belongs_to_its_payment_only() {
        let (n, a, p, nonce) = ("eip155:84532", "0xabc", "0xdef", "0x01");
        let id = token_id(n, a, p, nonce, 1_800_000_000);
        assert!(is_token_of(&id, n, a, p, nonce));
        assert!(is_token_of(
            &legacy_token_id(n, a, p, nonce),
            n,
            a,
            p,
            nonce
        ));
        assert!(!is_token_of(&id, n, a, p, "0x02"));
        assert!(!is_token_of(&format!("0{id}"), n, a, p, nonce));
        assert!(!is_token_of("12x", n, a, p, nonce));
        // The largest time an id carries keeps it a uint256; a later validBefore is capped, not wrapped.
        let last = token_id(n, a, p, nonce, u64::MAX);
        assert_eq!(last, token_id(n, a, p, nonce, MAX_VALID_BEFORE));
        assert!(last.len() == 77 && is_token_of(&last, n, a, p, nonce));
        // A time beyond the cap is not an id of the payment.
        let beyond = (U256::from(MAX_VALID_BEFORE + 1) * hash_split()
            + identity_hash(n, a, p, nonce) % hash_split())
        .to_string();
        assert!(!is_token_of(&beyond, n, a, p, nonce));
    }
}
