//! Payment schemes: what a payment of one scheme is, how it is read and checked, and which nonce it spends.
//!
//! The [`PaymentEngine`](crate::PaymentEngine) keeps every money rule (one settlement per authorization,
//! the identical resend redelivered, nothing charged for a request not served, unknown outcomes
//! reconciled) for every scheme alike; a [`Scheme`] decides only what differs between schemes:
//!
//! - which offers it sells ([`Scheme::sells`]: the offer's `scheme` and, for the EVM transfer methods, its
//!   `extra`), and what it adds to their `extra` ([`Scheme::extra`]);
//! - what is computed once per offer ([`Scheme::prepare`]: an EIP-712 domain separator);
//! - reading the payment's `payload` member ([`Scheme::read`]): the payer, the amount authorized, until
//!   when, and the [`PaymentKey`] (the nonce the settlement spends, in the contract that keeps it);
//! - checking it as the contract will judge it ([`Scheme::check`]), returning its fingerprint (identical
//!   payments have the same one; a resend is told from a replay by it);
//! - what the settler receives ([`Authorized::details`]: the scheme's typed payload, for a settler that
//!   talks to the chain).
//!
//! Built in: `exact` over EIP-3009 ([`ExactEip3009`]), `exact` over Permit2 ([`ExactPermit2`], offers
//! with `extra.assetTransferMethod: "permit2"`) and `upto` over Permit2 ([`UptoPermit2`]). Add a scheme with
//! [`PaymentEngineBuilder::scheme`](crate::engine::PaymentEngineBuilder::scheme); an offer is then sold
//! under it when its [`PaymentOffer::scheme`] names it. The engine asks the schemes in the order given,
//! the built-in one last, so a scheme of yours may also take over offers the built-in one would sell.
//!
//! # Example: a scheme of your own
//!
//! A toy scheme whose payload is `{"payer": "0x…", "nonce": "0x…", "code": "…"}` and whose "signature" is
//! a shared code (a real scheme checks a signature): the engine needs no change to sell with it.
//!
//! ```
//! use std::sync::Arc;
//! use alloy_primitives::{Address, B256, U256, address, keccak256};
//! use serde_json::value::RawValue;
//! use x402_tower::scheme::{Authorized, Check, Prepared, Scheme, SchemeOffer};
//! use x402_tower::store::PaymentKey;
//! use x402_tower::verify::{RejectReason, Rejection};
//! use x402_tower::{PaymentEngine, PaymentOffer, Price};
//!
//! #[derive(Debug)]
//! struct SharedCode;
//!
//! #[derive(serde::Deserialize)]
//! struct Payload { payer: Address, nonce: B256, code: String }
//!
//! impl Scheme for SharedCode {
//!     fn name(&self) -> &'static str { "shared-code" }
//!     fn sells(&self, offer: &PaymentOffer) -> bool { offer.scheme == "shared-code" }
//!     fn read(&self, payload: &RawValue, offer: &PaymentOffer) -> Result<Authorized, Rejection> {
//!         let p: Payload = serde_json::from_str(payload.get())
//!             .map_err(|e| Rejection::unreadable("not a shared-code payload", e))?;
//!         let key = PaymentKey {
//!             chain_id: offer.network.chain_id(),
//!             nonce_space: offer.token.address,
//!             from: p.payer,
//!             nonce: p.nonce,
//!         };
//!         Ok(Authorized::new(self.name(), key, offer.amount.atomic_units(), u64::MAX / 2, p))
//!     }
//!     fn check(&self, paid: &Authorized, _: Check<'_>) -> Result<B256, Rejection> {
//!         let p: &Payload = paid.details().expect("read by this scheme");
//!         if p.code != "open sesame" {
//!             return Err(Rejection::new(RejectReason::Signature, "wrong code").with_code("invalid_code"));
//!         }
//!         Ok(keccak256([p.payer.as_slice(), p.nonce.as_slice()].concat()))
//!     }
//! }
//!
//! let engine = PaymentEngine::builder()
//!     .settler(Arc::new(x402_tower::settle::VerifyOnlySettler))
//!     .scheme(Arc::new(SharedCode))
//!     .build()
//!     .unwrap();
//! let offer = PaymentOffer::usdc(
//!     "base-sepolia".parse().unwrap(),
//!     address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
//!     Price::from(1000u64),
//! )
//! .unwrap()
//! .scheme("shared-code");
//! assert_eq!(offer.requirements_v2().scheme, "shared-code");
//! ```

mod charge;
mod compiled;
mod exact_eip3009;
mod permit2;

use std::any::Any;
use std::sync::Arc;

use alloy_primitives::{Address, B256, U256};
use serde_json::value::RawValue;

use crate::offer::PaymentOffer;
use crate::store::PaymentKey;
use crate::verify::Rejection;

pub use charge::{Charge, ChargeError, SETTLEMENT_OVERRIDES};
pub(crate) use compiled::{CompiledOffer, matched};
pub use exact_eip3009::check_authorization;
pub use exact_eip3009::{Eip3009Payment, ExactEip3009, TRANSFER_METHOD as EIP3009_TRANSFER_METHOD};
pub use permit2::{
    EXACT_PERMIT2_PROXY, ExactPermit2, ExactPermitWitnessTransferFrom, FACILITATOR_ADDRESS,
    PERMIT2, PERMIT2_ALLOWANCE_REQUIRED, Permit2Payment, SCHEME_UPTO,
    TRANSFER_METHOD as PERMIT2_TRANSFER_METHOD, UPTO_PERMIT2_PROXY, UptoPermit2,
    UptoPermitWitnessTransferFrom, permit2_domain,
};

/// One payment scheme on one family of networks. Dyn-compatible: the engine holds `Arc<dyn Scheme>`s.
///
/// Nothing here may panic on what a client sends: [`read`](Self::read) and [`check`](Self::check) answer
/// a [`Rejection`] (a 402 with its error string) for anything wrong.
pub trait Scheme: Send + Sync + std::fmt::Debug + 'static {
    /// The wire name (`"exact"`, `"upto"`): the offers' `scheme`, and what a payment names.
    fn name(&self) -> &'static str;

    /// Whether this scheme sells `offer` (its [`PaymentOffer::scheme`], and whatever else tells transfer
    /// methods of one scheme apart, such as `extra.assetTransferMethod`).
    fn sells(&self, offer: &PaymentOffer) -> bool;

    /// Adds this scheme's members to the `extra` of `offer`'s requirements (written after the token's
    /// `name` and `version`, before the offer's own [`PaymentOffer::extra`]). Default: none.
    fn extra(&self, offer: &PaymentOffer, extra: &mut serde_json::Map<String, serde_json::Value>) {
        let _ = (offer, extra);
    }

    /// What can be computed once for `offer` (an EIP-712 domain separator), handed to every
    /// [`check`](Self::check) of a payment for it. `Err` (with the reason in words) when the offer cannot
    /// be sold under this scheme (a token without the EIP-712 name it needs): the engine leaves such an
    /// operator's offer out, logged, and answers a facilitator caller's requirements
    /// `invalid_payment_requirements`. Default: nothing to compute.
    fn prepare(&self, offer: SchemeOffer<'_>) -> Result<Prepared, &'static str> {
        let _ = offer;
        Ok(Prepared::default())
    }

    /// Reads a payment's `payload` member for `offer`, checking nothing but its shape: who pays, how much
    /// (the maximum, for a scheme that charges what was used), until when, and the key of the nonce it
    /// spends. A stored payment is read again to be reconciled, after its time has passed: keep time and
    /// signature checks for [`check`](Self::check).
    fn read(&self, payload: &RawValue, offer: &PaymentOffer) -> Result<Authorized, Rejection>;

    /// Checks a payment read by [`read`](Self::read) against the offer it pays, as the contract will judge
    /// it (recipient, amount, time window, signature), as of `check.now`. Returns the payment's
    /// fingerprint: a hash of everything signed, the same for identical payments and different for any
    /// other (the EIP-712 digest), by which a resend is told from a replay.
    fn check(&self, paid: &Authorized, check: Check<'_>) -> Result<B256, Rejection>;

    /// Whether x402 v1 clients can pay it (v1 knows only `exact` over EIP-3009). Default: `false`; its
    /// offers are then left out of the v1 body of a 402.
    fn speaks_v1(&self) -> bool {
        false
    }

    /// Whether the payer signs a maximum and the server settles what the request used ([`Charge`]), as
    /// `upto` does. The engine then settles the charge the protected service reports (the maximum when it
    /// reports none), never more than the maximum, and nothing at all for a zero charge; such a scheme
    /// cannot be sold on a route that settles before its handler. Default: `false`.
    fn charges_what_was_used(&self) -> bool {
        false
    }
}

/// An offer handed to [`Scheme::prepare`], and whose it is.
#[derive(Debug, Clone, Copy)]
pub struct SchemeOffer<'a> {
    /// The offer.
    pub offer: &'a PaymentOffer,
    /// `true` for the operator's own offers (a route's); `false` for requirements a facilitator caller
    /// sent. A scheme that caches per offer caches only the operator's, so callers cannot fill its cache.
    pub operator: bool,
}

/// What a scheme computed once for an offer ([`Scheme::prepare`]).
#[derive(Clone, Default)]
pub struct Prepared(Option<Arc<dyn Any + Send + Sync>>);

impl Prepared {
    /// Keeps `value`.
    pub fn new<T: Any + Send + Sync>(value: T) -> Self {
        Prepared(Some(Arc::new(value)))
    }

    /// The value kept, if it is a `T`.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.as_deref().and_then(|v| v.downcast_ref())
    }
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Prepared(..)"
        } else {
            "Prepared(none)"
        })
    }
}

/// What [`Scheme::check`] judges against.
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    /// The offer the payment pays.
    pub offer: &'a PaymentOffer,
    /// What [`Scheme::prepare`] computed for it.
    pub prepared: &'a Prepared,
    /// 1 or 2: the x402 version the payment was sent in (v1 pays at least the price, v2 exactly).
    pub x402_version: u8,
    /// Unix seconds to judge the time window at.
    pub now: u64,
    /// The settler judges signatures a contract wallet makes (EIP-1271), before the handler runs
    /// ([`Settler::checks_contract_wallets`](crate::settle::Settler::checks_contract_wallets)): a signature
    /// that does not recover to the payer may be its wallet's, so the scheme leaves it to the settler
    /// instead of refusing it. Everything else is checked as always.
    pub contract_wallets: bool,
}

/// A payment as its scheme read it ([`Scheme::read`]): what the engine and the settlers need of any scheme,
/// and the scheme's own typed payload ([`Authorized::details`]).
#[derive(Clone)]
pub struct Authorized {
    /// The scheme's wire name.
    pub scheme: &'static str,
    /// The nonce the settlement spends, in the contract that keeps it.
    pub key: PaymentKey,
    /// Who pays.
    pub payer: Address,
    /// The amount authorized, atomic units (the maximum, for a scheme that charges what was used).
    pub amount: U256,
    /// Until when the authorization can be settled (unix seconds, saturated to `u64`).
    pub valid_before: u64,
    details: Arc<dyn Any + Send + Sync>,
}

impl Authorized {
    /// A payment of `scheme` by `key.from`, for `amount`, valid before `valid_before`, with the scheme's
    /// typed payload `details`.
    pub fn new<T: Any + Send + Sync>(
        scheme: &'static str,
        key: PaymentKey,
        amount: U256,
        valid_before: u64,
        details: T,
    ) -> Self {
        Authorized {
            scheme,
            payer: key.from,
            key,
            amount,
            valid_before,
            details: Arc::new(details),
        }
    }

    /// The scheme's typed payload, if it is a `T` (`exact` over EIP-3009: [`Eip3009Payment`]). A settler
    /// that moves money asks for the type it knows how to settle.
    pub fn details<T: Any>(&self) -> Option<&T> {
        self.details.downcast_ref()
    }
}

impl std::fmt::Debug for Authorized {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorized")
            .field("scheme", &self.scheme)
            .field("key", &self.key)
            .field("amount", &self.amount)
            .field("valid_before", &self.valid_before)
            .finish_non_exhaustive()
    }
}

/// The schemes an engine sells with, asked in order (the built-in ones last: `exact` over EIP-3009 and over
/// Permit2, `upto` over Permit2).
#[derive(Debug, Clone)]
pub(crate) struct Schemes(Arc<[Arc<dyn Scheme>]>);

impl Default for Schemes {
    fn default() -> Self {
        Schemes::new(Vec::new())
    }
}

impl Schemes {
    /// `added`, then the built-in ones.
    pub(crate) fn new(mut added: Vec<Arc<dyn Scheme>>) -> Self {
        added.push(Arc::new(ExactEip3009::default()));
        added.push(Arc::new(ExactPermit2::default()));
        added.push(Arc::new(UptoPermit2::default()));
        Schemes(added.into())
    }

    /// The scheme that sells `offer`.
    pub(crate) fn for_offer(&self, offer: &PaymentOffer) -> Option<&Arc<dyn Scheme>> {
        self.0.iter().find(|s| s.sells(offer))
    }

    /// Compiles the operator's `offers`: each with the scheme that sells it and what that scheme prepared
    /// for it. An offer no scheme sells (or whose scheme cannot prepare it) is left out, logged: it could
    /// not be paid.
    pub(crate) fn compile(&self, offers: Vec<PaymentOffer>) -> Vec<CompiledOffer> {
        offers
            .into_iter()
            .filter_map(|offer| {
                let Some(scheme) = self.for_offer(&offer) else {
                    tracing::error!(
                        scheme = %offer.scheme,
                        network = offer.network.caip2(),
                        "an offer no scheme of this engine sells is left out"
                    );
                    return None;
                };
                let prepared = scheme.prepare(SchemeOffer {
                    offer: &offer,
                    operator: true,
                });
                match prepared {
                    Ok(prepared) => Some(CompiledOffer::new(offer, scheme.clone(), prepared)),
                    Err(why) => {
                        tracing::error!(
                            scheme = %offer.scheme,
                            network = offer.network.caip2(),
                            why,
                            "an offer its scheme cannot sell is left out"
                        );
                        None
                    }
                }
            })
            .collect()
    }
}

/// What the property tests of the schemes' readers share.
#[cfg(test)]
pub(crate) mod properties {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    /// One of `members` (paths in a valid payload) and a value it does not take (`None`: left out). A
    /// `signature` that is a string but not hex is read (as no signature) and refused by the check, so it
    /// gets no strings.
    pub(crate) fn broken(
        members: &'static [&'static [&'static str]],
    ) -> impl Strategy<Value = (&'static [&'static str], Option<Value>)> {
        (0..members.len(), wrong(false), wrong(true), any::<bool>()).prop_map(
            move |(member, value, text, as_text)| {
                let path = members[member];
                let value = if as_text && path != ["signature"] {
                    text
                } else {
                    value
                };
                (path, value)
            },
        )
    }

    /// `refused` is an unreadable payload whose detail names the last member of `path`.
    pub(crate) fn names_member(
        refused: &crate::verify::Rejection,
        path: &[&str],
    ) -> Result<(), TestCaseError> {
        prop_assert_eq!(refused.reason, crate::verify::RejectReason::InvalidPayload);
        let name = path.last().copied().unwrap_or_default();
        prop_assert!(
            refused.detail.contains(name),
            "{}: {}",
            name,
            refused.detail
        );
        Ok(())
    }

    /// A value no member takes (`None`: the member is left out); `text` adds strings that are not
    /// numbers, addresses or hex.
    pub(crate) fn wrong(text: bool) -> BoxedStrategy<Option<Value>> {
        let mut cases = vec![
            Just(None).boxed(),
            any::<bool>().prop_map(|b| Some(json!(b))).boxed(),
            any::<i64>().prop_map(|n| Some(json!(n))).boxed(),
            Just(Some(Value::Null)).boxed(),
            Just(Some(json!([]))).boxed(),
            Just(Some(json!({}))).boxed(),
        ];
        if text {
            cases.push("[g-z ]{0,12}".prop_map(|s| Some(json!(s))).boxed());
        }
        proptest::strategy::Union::new(cases).boxed()
    }

    /// Sets the member at `path` to `value`, or removes it.
    pub(crate) fn set(v: &mut Value, path: &[&str], value: Option<Value>) {
        let (last, parents) = path.split_last().unwrap();
        let mut at = v;
        for p in parents {
            at = &mut at[*p];
        }
        let object = at.as_object_mut().unwrap();
        match value {
            Some(value) => object.insert((*last).to_owned(), value),
            None => object.remove(*last),
        };
    }
}
