//! A local private key that signs 32-byte digests with libsecp256k1: the one place this crate signs with a
//! key it holds (the offer-receipt issuer's receipts and offers, the on-chain relayer's transactions).
//!
//! libsecp256k1 (the C library alloy-primitives links for recovery, its `secp256k1` feature) signs in 27–35 µs
//! on the project's machine against 75–88 µs for alloy's local signer, which uses k256 (criterion
//! `receipt_sign_only` against `receipt_sign_only_alloy_k256`, BENCHMARKS.md): a receipt is signed on every
//! purchase, a transaction on every on-chain settlement.

use alloy_primitives::{Address, B256, Signature, U256};

/// A private key and libsecp256k1's signing context.
pub(crate) struct SecretSigner {
    key: secp256k1::SecretKey,
    ctx: secp256k1::Secp256k1<secp256k1::SignOnly>,
    address: Address,
}

impl SecretSigner {
    /// `None` when `secret` is not a valid secp256k1 scalar (zero, or not below the group order).
    pub(crate) fn new(secret: B256) -> Option<Self> {
        let key = secp256k1::SecretKey::from_byte_array(secret.0).ok()?;
        let ctx = secp256k1::Secp256k1::signing_only();
        let public = secp256k1::PublicKey::from_secret_key(&ctx, &key).serialize_uncompressed();
        let address = Address::from_raw_public_key(&public[1..]);
        Some(SecretSigner { key, ctx, address })
    }

    /// [`SecretSigner::new`] from hex (64 digits, with or without `0x`; surrounding whitespace ignored).
    #[cfg(any(feature = "onchain", test))]
    pub(crate) fn from_hex(hex: &str) -> Option<Self> {
        hex.trim().parse::<B256>().ok().and_then(Self::new)
    }

    /// The address its signatures recover to.
    pub(crate) fn address(&self) -> Address {
        self.address
    }

    /// Signs `hash` as it is (no prefix): a low-s signature with its recovery parity, as Ethereum takes it.
    pub(crate) fn sign(&self, hash: &B256) -> Signature {
        let message = secp256k1::Message::from_digest(hash.0);
        let (id, rs) = self
            .ctx
            .sign_ecdsa_recoverable(message, &self.key)
            .serialize_compact();
        Signature::new(
            U256::from_be_slice(&rs[..32]),
            U256::from_be_slice(&rs[32..]),
            i32::from(id) == 1,
        )
    }
}

impl std::fmt::Debug for SecretSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("SecretSigner")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::keccak256;

    // anvil's account #1 (a well-known test key).
    const KEY: &str = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
    const ADDRESS: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

    #[test]
    fn signatures_recover_to_the_keys_address_and_match_k256s() {
        let signer = SecretSigner::from_hex(KEY).expect("a valid key");
        assert_eq!(signer.address().to_checksum(None), ADDRESS);
        let reference: alloy_signer_local::PrivateKeySigner = KEY.parse().unwrap();
        for i in 0u8..32 {
            let hash = keccak256([i]);
            let sig = signer.sign(&hash);
            assert_eq!(
                sig.recover_address_from_prehash(&hash).unwrap(),
                signer.address()
            );
            // RFC 6979 nonces and low s on both sides: the same signature, byte for byte.
            let theirs = alloy_signer::SignerSync::sign_hash_sync(&reference, &hash).unwrap();
            assert_eq!(sig.as_bytes(), theirs.as_bytes(), "digest {i}");
        }
    }

    #[test]
    fn invalid_keys_are_refused() {
        assert!(SecretSigner::from_hex("0x00").is_none());
        assert!(SecretSigner::new(B256::ZERO).is_none());
        // The group order n is not a valid scalar.
        let n = "0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141";
        assert!(SecretSigner::from_hex(n).is_none());
        assert!(SecretSigner::from_hex("not hex").is_none());
        assert!(SecretSigner::from_hex(&format!("  {KEY}\n")).is_some());
    }
}
