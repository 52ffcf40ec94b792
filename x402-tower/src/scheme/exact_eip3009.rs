//! `exact` over EIP-3009: the payer signs USDC's `TransferWithAuthorization` for the price; whoever settles
//! calls `transferWithAuthorization` on the token. The nonce is the token's (`authorizationState`).

use std::collections::HashMap;
use std::sync::Mutex;

use alloy_primitives::{Address, B256, Bytes, U256};
use serde_json::value::RawValue;

use super::{Authorized, Check, Prepared, Scheme, SchemeOffer};
use crate::network::Token;
use crate::offer::PaymentOffer;
use crate::proto::{Authorization, ExactEvmPayload, PaymentPayload, SCHEME_EXACT};
use crate::store::PaymentKey;
use crate::verify::{
    RejectReason, Rejection, VALID_BEFORE_MARGIN, VALID_BEFORE_SKEW, check_signature_digest,
    domain_separator, parse_signature_hex,
};

/// `extra.assetTransferMethod` of an offer sold over EIP-3009 (also what an offer without the member is).
pub const TRANSFER_METHOD: &str = "eip3009";

/// The payload of an `exact` payment over EIP-3009, as [`ExactEip3009`] read it: what a settler needs to
/// call `transferWithAuthorization` ([`Authorized::details`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eip3009Payment {
    /// The signed authorization.
    pub authorization: Authorization,
    /// The signature's bytes (65 bytes `r‖s‖v` once checked; empty when the payload's was not hex).
    pub signature: Bytes,
}

/// Domain separators cached (per chain and token contract) at most.
const DOMAIN_CACHE: usize = 256;

/// A cached domain separator of a (chain, token contract): the token's EIP-712 name and version it was
/// computed for, and the separator.
type DomainEntry = (String, String, B256);

/// `exact` over EIP-3009 (USDC's `transferWithAuthorization`), built into every engine. It sells the
/// offers whose `scheme` is `exact` and whose `extra.assetTransferMethod` is absent or `eip3009`.
///
/// Checks, in the spec's order: recipient, amount (v1 at least the price, v2 exactly), time window
/// (`validAfter <= now`, `now + 6 <= validBefore <= now + maxTimeoutSeconds + 120`), then the signature as
/// USDC checks it (65 bytes, `v` 27/28, low `s`, recovered address == `from`) under the token's domain
/// separator, computed once per offer.
#[derive(Debug, Default)]
pub struct ExactEip3009 {
    domains: Mutex<HashMap<(u64, Address), DomainEntry>>,
}

impl ExactEip3009 {
    /// The EIP-712 domain separator of `token` on `chain_id`, from the cache when it is there; a new one
    /// is remembered (up to [`DOMAIN_CACHE`]) when `remember`.
    fn separator(&self, chain_id: u64, token: &Token, remember: bool) -> B256 {
        let key = (chain_id, token.address);
        let lock = || self.domains.lock().unwrap_or_else(|e| e.into_inner());
        // Looked up by reference: nothing is cloned or allocated for a separator already there.
        let cached = lock().get(&key).and_then(|(name, version, s)| {
            (*name == token.name && *version == token.version).then_some(*s)
        });
        cached.unwrap_or_else(|| {
            let s = domain_separator(chain_id, token);
            let mut cache = lock();
            if remember && cache.len() < DOMAIN_CACHE {
                cache
                    .entry(key)
                    .or_insert_with(|| (token.name.clone(), token.version.clone(), s));
            }
            s
        })
    }
}

impl Scheme for ExactEip3009 {
    fn name(&self) -> &'static str {
        SCHEME_EXACT
    }

    fn sells(&self, offer: &PaymentOffer) -> bool {
        offer.scheme == SCHEME_EXACT
            && offer
                .extra
                .get("assetTransferMethod")
                .is_none_or(|m| m == TRANSFER_METHOD)
    }

    fn prepare(&self, offer: SchemeOffer<'_>) -> Result<Prepared, &'static str> {
        let token = &offer.offer.token;
        if !token.eip3009 {
            return Err(
                "the token has no EIP-3009 transferWithAuthorization: sell it over Permit2 \
                 (extra.assetTransferMethod \"permit2\")",
            );
        }
        if token.name.is_empty() || token.version.is_empty() {
            return Err("extra.name and extra.version are required");
        }
        // A facilitator caller's USDC of a known network is remembered too; any other token it names is not.
        let remember = offer.operator || token.is_usdc_on(&offer.offer.network);
        let separator = self.separator(offer.offer.network.chain_id(), token, remember);
        Ok(Prepared::new(separator))
    }

    fn read(&self, payload: &RawValue, offer: &PaymentOffer) -> Result<Authorized, Rejection> {
        let exact: ExactEvmPayload =
            crate::verify::read_json(payload.get(), "not an exact/EVM payload")?;
        let auth = exact.authorization;
        let key = PaymentKey {
            chain_id: offer.network.chain_id(),
            nonce_space: offer.token.address,
            from: auth.from,
            nonce: auth.nonce,
        };
        let valid_before = u64::try_from(auth.valid_before).unwrap_or(u64::MAX);
        let signature = parse_signature_hex(&exact.signature).unwrap_or_default();
        Ok(Authorized::new(
            SCHEME_EXACT,
            key,
            auth.value,
            valid_before,
            Eip3009Payment {
                authorization: auth,
                signature: signature.into(),
            },
        ))
    }

    fn speaks_v1(&self) -> bool {
        true
    }

    fn check(&self, paid: &Authorized, check: Check<'_>) -> Result<B256, Rejection> {
        let Some(payment) = paid.details::<Eip3009Payment>() else {
            return Err(Rejection::new(
                RejectReason::InvalidPayload,
                "not an exact/EVM payload",
            ));
        };
        let separator = match check.prepared.get::<B256>() {
            Some(s) => *s,
            None => domain_separator(check.offer.network.chain_id(), &check.offer.token),
        };
        check_eip3009(
            payment,
            check.x402_version,
            check.offer,
            &separator,
            check.now,
            check.contract_wallets,
        )
    }
}

/// Steps 2 to 5 of the spec's verification of an EIP-3009 payment against the offer it pays for:
/// recipient, amount (v1 at least, v2 exactly), time window, then the signature under USDC's rules.
/// Returns the authorization's EIP-712 digest.
pub(crate) fn check_eip3009(
    payment: &Eip3009Payment,
    x402_version: u8,
    offer: &PaymentOffer,
    domain_separator: &B256,
    now: u64,
    contract_wallets: bool,
) -> Result<B256, Rejection> {
    let auth = &payment.authorization;
    // 2. recipient.
    if auth.to != offer.pay_to {
        return Err(Rejection::new(
            RejectReason::RecipientMismatch,
            "authorization.to is not payTo",
        ));
    }
    // 3. amount.
    let amount = offer.amount.atomic_units();
    if x402_version == 1 && auth.value < amount {
        return Err(Rejection::new(
            RejectReason::ValueTooLow,
            "authorization.value is below the price",
        ));
    }
    if x402_version != 1 && auth.value != amount {
        return Err(Rejection::new(
            RejectReason::ValueMismatch,
            "authorization.value differs from the price",
        ));
    }
    // 4. time window.
    if auth.valid_after > U256::from(now) {
        return Err(Rejection::new(
            RejectReason::ValidAfter,
            "validAfter is in the future",
        ));
    }
    if auth.valid_before < U256::from(now) + U256::from(VALID_BEFORE_MARGIN) {
        return Err(Rejection::new(
            RejectReason::ValidBefore,
            "validBefore has passed or is too close",
        ));
    }
    let horizon =
        U256::from(now) + U256::from(offer.max_timeout_seconds) + U256::from(VALID_BEFORE_SKEW);
    if auth.valid_before > horizon {
        return Err(Rejection::new(
            RejectReason::ValidBefore,
            "validBefore is further ahead than the offer's maxTimeoutSeconds allows",
        ));
    }
    // 5. signature.
    if payment.signature.is_empty() {
        return Err(Rejection::new(
            RejectReason::Signature,
            "signature is not 0x-prefixed hex",
        ));
    }
    match check_signature_digest(auth, &payment.signature, domain_separator) {
        Ok(digest) => Ok(digest),
        // A contract wallet's signature (EIP-1271), of any length: the token asks the wallet in the
        // settlement, which the settler simulates first.
        Err(_) if contract_wallets => {
            Ok(crate::verify::authorization_digest(auth, domain_separator))
        }
        Err(r) => Err(Rejection::new(
            r,
            "signature is not a canonical 65-byte signature by authorization.from",
        )),
    }
}

/// Steps 2 to 5 of the spec's verification of an `exact` payment over EIP-3009 against the offer it pays
/// for: recipient, amount (v1 at least, v2 exactly), time window (`validAfter <= now`, `now + 6 <=
/// validBefore <= now + maxTimeoutSeconds + 120`), then the signature under USDC's rules. Returns the
/// signature's bytes. What [`ExactEip3009`] checks, for a caller with a
/// payload and an offer in hand.
///
/// `domain_separator` is [`domain_separator`] of the offer's chain and token.
pub fn check_authorization(
    payload: &PaymentPayload,
    offer: &PaymentOffer,
    domain_separator: &B256,
    now: u64,
) -> Result<Vec<u8>, Rejection> {
    let paid = ExactEip3009::default().read(payload.scheme_payload(), offer)?;
    let Some(payment) = paid.details::<Eip3009Payment>() else {
        return Err(Rejection::new(
            RejectReason::InvalidPayload,
            "not an exact/EVM payload",
        ));
    };
    check_eip3009(
        payment,
        payload.x402_version(),
        offer,
        domain_separator,
        now,
        false,
    )?;
    Ok(payment.signature.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_separators_are_remembered_only_when_asked() {
        let scheme = ExactEip3009::default();
        let network: crate::network::Network = "base-sepolia".parse().unwrap();
        let chain = network.chain_id();
        let usdc = Token::usdc(&network).unwrap();
        let junk = Token::new(Address::repeat_byte(7), "Junk", "1", 6);
        let cached = || scheme.domains.lock().unwrap().len();
        // A token a facilitator caller chose: computed, not remembered.
        assert_eq!(
            scheme.separator(chain, &junk, false),
            domain_separator(chain, &junk)
        );
        assert_eq!(cached(), 0);
        // An offer's token: remembered, then found whoever asks.
        assert_eq!(
            scheme.separator(chain, &usdc, true),
            domain_separator(chain, &usdc)
        );
        assert_eq!(cached(), 1);
        assert_eq!(
            scheme.separator(chain, &usdc, false),
            domain_separator(chain, &usdc)
        );
        assert_eq!(cached(), 1);
        // The same contract under another name is another domain: not the cached separator.
        let renamed = Token::new(usdc.address, "Renamed Coin", usdc.version.clone(), 6);
        assert_eq!(
            scheme.separator(chain, &renamed, true),
            domain_separator(chain, &renamed)
        );
        assert_ne!(
            domain_separator(chain, &renamed),
            domain_separator(chain, &usdc)
        );
        assert_eq!(
            scheme.separator(chain, &usdc, false),
            domain_separator(chain, &usdc)
        );
    }

    #[test]
    fn sells_exact_offers_over_eip3009_only() {
        let pay_to = Address::repeat_byte(1);
        let offer = PaymentOffer::usdc("base".parse().unwrap(), pay_to, 1u64.into()).unwrap();
        let scheme = ExactEip3009::default();
        assert!(scheme.sells(&offer));
        assert!(scheme.sells(&offer.clone().extra("assetTransferMethod", "eip3009")));
        assert!(!scheme.sells(&offer.clone().extra("assetTransferMethod", "permit2")));
        assert!(!scheme.sells(&offer.scheme("upto")));
    }

    mod properties {
        use proptest::prelude::*;
        use serde_json::json;

        use super::super::*;
        use crate::scheme::properties::{broken, names_member, set};

        const MEMBERS: [&[&str]; 7] = [
            &["signature"],
            &["authorization", "from"],
            &["authorization", "to"],
            &["authorization", "value"],
            &["authorization", "validAfter"],
            &["authorization", "validBefore"],
            &["authorization", "nonce"],
        ];

        proptest! {
            /// One member missing or of the wrong kind: refused before anything else, naming the member.
            #[test]
            fn a_payload_with_one_wrong_member_is_refused_naming_it((path, value) in broken(&MEMBERS)) {
                let mut payload = json!({
                    "signature": format!("0x{}1b", "11".repeat(64)),
                    "authorization": {
                        "from": Address::repeat_byte(1), "to": Address::repeat_byte(3), "value": "10000",
                        "validAfter": "0", "validBefore": "1800000000", "nonce": B256::repeat_byte(9),
                    },
                });
                set(&mut payload, path, value.clone());
                let raw = RawValue::from_string(payload.to_string()).unwrap();
                let offer = crate::PaymentOffer::usdc(
                    "base-sepolia".parse().unwrap(),
                    Address::repeat_byte(3),
                    crate::Price::from(10_000u64),
                )
                .unwrap();
                let refused = ExactEip3009::default().read(&raw, &offer).unwrap_err();
                names_member(&refused, path)?;
            }
        }
    }
}
