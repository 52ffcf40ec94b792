//! `exact` and `upto` over Permit2: the payer signs Permit2's `PermitWitnessTransferFrom` for the x402
//! proxy of the scheme, with the recipient (and, for `upto`, the address that will settle) as witness;
//! whoever settles calls the proxy's `settle`. Any ERC-20 works once the payer approved Permit2. The nonce
//! is Permit2's (one bitmap per owner), so both schemes share one key space: a nonce settles once whichever
//! of them presents it.
//!
//! Wire format, addresses, checks and error codes as the official `@x402/evm` 2.27 facilitator has them
//! (`src/exact/facilitator/permit2.ts`, `src/upto/facilitator/permit2.ts`).

use alloy_primitives::{Address, B256, Bytes, Signature, U256, address};
use alloy_sol_types::Eip712Domain;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Authorized, Check, Prepared, Scheme, SchemeOffer};
use crate::offer::PaymentOffer;
use crate::proto::wire;
use crate::store::PaymentKey;
use crate::verify::{
    RejectReason, Rejection, TypeHash, VALID_BEFORE_MARGIN, VALID_BEFORE_SKEW, eip712_digest,
    parse_signature_hex,
};

/// Uniswap's Permit2, at the same address on every chain.
pub const PERMIT2: Address = address!("0x000000000022D473030F116dDEE9F6B43aC78BA3");
/// The official `x402ExactPermit2Proxy` (the `spender` of an `exact` payment over Permit2).
pub const EXACT_PERMIT2_PROXY: Address = address!("0x402085c248EeA27D92E8b30b2C58ed07f9E20001");
/// The official `x402UptoPermit2Proxy` (the `spender` of an `upto` payment).
pub const UPTO_PERMIT2_PROXY: Address = address!("0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002");
/// `extra.assetTransferMethod` of an offer paid over Permit2.
pub const TRANSFER_METHOD: &str = "permit2";
/// The `upto` scheme: the payer authorizes a maximum, the server settles what the request used.
pub const SCHEME_UPTO: &str = "upto";
/// A settler's refusal of a Permit2 payment whose payer has not approved Permit2 for the token (the
/// official facilitator's code): the layer answers it 412, as the official servers do, with the offers.
pub const PERMIT2_ALLOWANCE_REQUIRED: &str = "permit2_allowance_required";
/// `extra.facilitatorAddress` of an `upto` offer: the only address the proxy lets settle.
pub const FACILITATOR_ADDRESS: &str = "facilitatorAddress";

#[allow(missing_docs, unreachable_pub)]
mod typed {
    alloy_sol_types::sol! {
        /// Permit2's `TokenPermissions`.
        struct TokenPermissions {
            address token;
            uint256 amount;
        }
        /// The witness of an `exact` payment over Permit2.
        struct Witness {
            address to;
            uint256 validAfter;
        }
        /// Permit2's `PermitWitnessTransferFrom` with the `exact` witness: what the payer signs.
        struct PermitWitnessTransferFrom {
            TokenPermissions permitted;
            address spender;
            uint256 nonce;
            uint256 deadline;
            Witness witness;
        }
    }
}

#[allow(missing_docs, unreachable_pub)]
mod typed_upto {
    alloy_sol_types::sol! {
        /// Permit2's `TokenPermissions`.
        struct TokenPermissions {
            address token;
            uint256 amount;
        }
        /// The witness of an `upto` payment: the recipient, and the only address that may settle.
        struct Witness {
            address to;
            address facilitator;
            uint256 validAfter;
        }
        /// Permit2's `PermitWitnessTransferFrom` with the `upto` witness: what the payer signs.
        struct PermitWitnessTransferFrom {
            TokenPermissions permitted;
            address spender;
            uint256 nonce;
            uint256 deadline;
            Witness witness;
        }
    }
}

// One EIP-712 type name, two witnesses: each in a module of its own, named apart here.
pub use typed::PermitWitnessTransferFrom as ExactPermitWitnessTransferFrom;
pub use typed_upto::PermitWitnessTransferFrom as UptoPermitWitnessTransferFrom;

/// Permit2's EIP-712 domain on `chain_id`: `{name: "Permit2", chainId, verifyingContract}`, no version.
pub fn permit2_domain(chain_id: u64) -> Eip712Domain {
    Eip712Domain::new(
        Some("Permit2".into()),
        None,
        Some(U256::from(chain_id)),
        Some(PERMIT2),
        None,
    )
}

/// A Permit2 payment as the official clients send it (`ExactPermit2Payload`; `upto` adds
/// `witness.facilitator`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permit2Payment {
    /// The signature's bytes (empty when the payload's was not hex).
    pub signature: Bytes,
    /// The payer (`permit2Authorization.from`).
    pub from: Address,
    /// `permitted.token`.
    pub token: Address,
    /// `permitted.amount`: the price (`exact`) or the maximum (`upto`).
    pub amount: U256,
    /// The proxy allowed to spend (`spender`).
    pub spender: Address,
    /// Permit2's nonce (the client writes it in decimal; hex is read too).
    pub nonce: U256,
    /// Unix seconds after which Permit2 refuses it.
    pub deadline: U256,
    /// `witness.to`: the recipient.
    pub to: Address,
    /// `witness.facilitator` (`upto` only): the address that must call `settle`.
    pub facilitator: Option<Address>,
    /// `witness.validAfter`.
    pub valid_after: U256,
}

/// `exact` or `upto` over Permit2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Exact,
    Upto,
}

impl Kind {
    fn spender(self) -> Address {
        match self {
            Kind::Exact => EXACT_PERMIT2_PROXY,
            Kind::Upto => UPTO_PERMIT2_PROXY,
        }
    }
}

/// `exact` over Permit2 (`extra.assetTransferMethod: "permit2"`), built into every engine: any ERC-20 the
/// payer approved Permit2 for. Checks, in the official order and with its codes: `spender` is the exact
/// proxy (`invalid_permit2_spender`), `witness.to` is `payTo` (`invalid_permit2_recipient_mismatch`),
/// `deadline >= now + 6` (`permit2_deadline_expired`), `validAfter <= now` (`permit2_not_yet_valid`),
/// `permitted.amount` is the price exactly (`permit2_amount_mismatch`), `permitted.token` is the asset
/// (`permit2_token_mismatch`), then the signature, recovered to `from` under Permit2's domain
/// (`invalid_permit2_signature`; a contract wallet's EIP-1271 signature is the settler's to check). A
/// `deadline` further ahead than `maxTimeoutSeconds` + 120 s is refused too (`permit2_deadline_too_far`):
/// the payment store keeps every key until then.
#[derive(Debug, Default)]
pub struct ExactPermit2 {
    _private: (),
}

/// `upto` over Permit2: the payer signs a maximum (the offer's amount), the server settles what the request
/// used ([`Charge`](crate::scheme::Charge)). Its offers carry `extra.facilitatorAddress`, the only address
/// the upto proxy lets settle, which the payer signs as `witness.facilitator` (`upto_facilitator_mismatch`
/// otherwise). Every other check is [`ExactPermit2`]'s, against the upto proxy.
#[derive(Debug, Default)]
pub struct UptoPermit2 {
    _private: (),
}

/// What a Permit2 scheme computes once per offer: Permit2's domain separator on its chain.
#[derive(Debug, Clone, Copy)]
struct Permit2Prepared {
    separator: B256,
    facilitator: Option<Address>,
}

fn prepare(kind: Kind, offer: &PaymentOffer) -> Result<Prepared, &'static str> {
    let facilitator = match kind {
        Kind::Exact => None,
        Kind::Upto => Some(
            offer
                .extra
                .get(FACILITATOR_ADDRESS)
                .and_then(|a| wire::parse_address(a))
                .ok_or("extra.facilitatorAddress (the address that will settle) is required")?,
        ),
    };
    Ok(Prepared::new(Permit2Prepared {
        separator: permit2_domain(offer.network.chain_id()).separator(),
        facilitator,
    }))
}

/// The payload's JSON members.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePayload {
    signature: String,
    permit2_authorization: WireAuthorization,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireAuthorization {
    #[serde(with = "wire::address")]
    from: Address,
    permitted: WirePermitted,
    #[serde(with = "wire::address")]
    spender: Address,
    nonce: String,
    #[serde(with = "wire::decimal")]
    deadline: U256,
    witness: WireWitness,
}

#[derive(Deserialize)]
struct WirePermitted {
    #[serde(with = "wire::address")]
    token: Address,
    #[serde(with = "wire::decimal")]
    amount: U256,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireWitness {
    #[serde(with = "wire::address")]
    to: Address,
    #[serde(default, with = "optional_address")]
    facilitator: Option<Address>,
    #[serde(with = "wire::decimal")]
    valid_after: U256,
}

mod optional_address {
    use alloy_primitives::Address;
    use serde::{Deserialize, Deserializer, de::Error as _};

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Address>, D::Error> {
        let s = <Option<std::borrow::Cow<'de, str>>>::deserialize(d)?;
        s.map(|s| {
            crate::proto::wire::parse_address(&s)
                .ok_or_else(|| D::Error::custom("expected an address: 0x and 40 hex digits"))
        })
        .transpose()
    }
}

/// A Permit2 nonce: a base-10 integer (what the official client writes) or `0x` + up to 64 hex digits.
fn parse_nonce(s: &str) -> Option<U256> {
    match s.strip_prefix("0x") {
        Some(hex)
            if !hex.is_empty() && hex.len() <= 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            U256::from_str_radix(hex, 16).ok()
        }
        Some(_) => None,
        None => wire::parse_decimal(s),
    }
}

fn read(
    kind: Kind,
    name: &'static str,
    payload: &RawValue,
    offer: &PaymentOffer,
) -> Result<Authorized, Rejection> {
    let p: WirePayload = crate::verify::read_json(payload.get(), "not a Permit2 payload")?;
    let a = p.permit2_authorization;
    let nonce = parse_nonce(&a.nonce).ok_or_else(|| {
        Rejection::new(
            RejectReason::InvalidPayload,
            "permit2Authorization.nonce is neither a base-10 integer nor 0x-prefixed hex",
        )
    })?;
    if kind == Kind::Upto && a.witness.facilitator.is_none() {
        return Err(Rejection::unreadable(
            "not an upto Permit2 payload",
            "witness.facilitator is missing",
        ));
    }
    let key = PaymentKey {
        chain_id: offer.network.chain_id(),
        nonce_space: PERMIT2,
        from: a.from,
        nonce: B256::from(nonce),
    };
    let valid_before = u64::try_from(a.deadline).unwrap_or(u64::MAX);
    let payment = Permit2Payment {
        signature: parse_signature_hex(&p.signature).unwrap_or_default().into(),
        from: a.from,
        token: a.permitted.token,
        amount: a.permitted.amount,
        spender: a.spender,
        nonce,
        deadline: a.deadline,
        to: a.witness.to,
        facilitator: a.witness.facilitator,
        valid_after: a.witness.valid_after,
    };
    Ok(Authorized::new(
        name,
        key,
        payment.amount,
        valid_before,
        payment,
    ))
}

fn refuse(reason: RejectReason, code: &'static str, detail: &'static str) -> Rejection {
    Rejection::new(reason, detail).with_code(code)
}

/// The official checks, in their order, then the signature. Returns the EIP-712 digest.
fn check(kind: Kind, paid: &Authorized, check: Check<'_>) -> Result<B256, Rejection> {
    let Some(p) = paid.details::<Permit2Payment>() else {
        return Err(Rejection::new(
            RejectReason::InvalidPayload,
            "not a Permit2 payload",
        ));
    };
    let Some(prepared) = check.prepared.get::<Permit2Prepared>() else {
        return Err(Rejection::new(
            RejectReason::NoMatchingRequirements,
            "an offer this scheme did not prepare",
        ));
    };
    let offer = check.offer;
    let now = U256::from(check.now);
    if p.spender != kind.spender() {
        return Err(refuse(
            RejectReason::RecipientMismatch,
            "invalid_permit2_spender",
            "spender is not the scheme's x402 proxy",
        ));
    }
    if p.to != offer.pay_to {
        return Err(refuse(
            RejectReason::RecipientMismatch,
            "invalid_permit2_recipient_mismatch",
            "witness.to is not payTo",
        ));
    }
    if kind == Kind::Upto && p.facilitator != prepared.facilitator {
        return Err(refuse(
            RejectReason::RecipientMismatch,
            "upto_facilitator_mismatch",
            "witness.facilitator is not the offer's facilitatorAddress",
        ));
    }
    if p.deadline < now + U256::from(VALID_BEFORE_MARGIN) {
        return Err(refuse(
            RejectReason::ValidBefore,
            "permit2_deadline_expired",
            "deadline has passed or is too close",
        ));
    }
    let horizon = now + U256::from(offer.max_timeout_seconds) + U256::from(VALID_BEFORE_SKEW);
    if p.deadline > horizon {
        return Err(refuse(
            RejectReason::ValidBefore,
            "permit2_deadline_too_far",
            "deadline is further ahead than the offer's maxTimeoutSeconds allows",
        ));
    }
    if p.valid_after > now {
        return Err(refuse(
            RejectReason::ValidAfter,
            "permit2_not_yet_valid",
            "witness.validAfter is in the future",
        ));
    }
    if p.amount != offer.amount.atomic_units() {
        return Err(refuse(
            RejectReason::ValueMismatch,
            "permit2_amount_mismatch",
            "permitted.amount differs from the offer's amount",
        ));
    }
    if p.token != offer.token.address {
        return Err(refuse(
            RejectReason::NoMatchingRequirements,
            "permit2_token_mismatch",
            "permitted.token is not the asset",
        ));
    }
    let digest = digest(kind, p, &prepared.separator);
    if p.signature.is_empty() {
        return Err(refuse(
            RejectReason::Signature,
            "invalid_permit2_signature",
            "signature is not 0x-prefixed hex",
        ));
    }
    // A contract wallet's signature (EIP-1271), of any length, is its contract's to judge: a settler that
    // asks it (Permit2 does, in the settlement) gets it.
    let bad_signature = || {
        if check.contract_wallets {
            Ok(digest)
        } else {
            Err(refuse(
                RejectReason::Signature,
                "invalid_permit2_signature",
                "signature is not a 65-byte signature by permit2Authorization.from",
            ))
        }
    };
    let Ok(sig) = <&[u8; 65]>::try_from(p.signature.as_ref()) else {
        return bad_signature();
    };
    let parity = match sig[64] {
        27 | 0 => false,
        28 | 1 => true,
        _ => return bad_signature(),
    };
    let signature = Signature::new(
        U256::from_be_slice(&sig[..32]),
        U256::from_be_slice(&sig[32..64]),
        parity,
    );
    match signature.recover_address_from_prehash(&digest) {
        Ok(signer) if signer == p.from => Ok(digest),
        _ => bad_signature(),
    }
}

impl Permit2Payment {
    /// The EIP-712 hash the payer signs on `chain_id`: `PermitWitnessTransferFrom` under Permit2's domain,
    /// with the `upto` witness when [`facilitator`](Self::facilitator) is set, else the `exact` one.
    pub fn signing_hash(&self, chain_id: u64) -> B256 {
        let kind = if self.facilitator.is_some() {
            Kind::Upto
        } else {
            Kind::Exact
        };
        digest(kind, self, &permit2_domain(chain_id).separator())
    }
}

/// The EIP-712 digest the payer signed. `hashStruct` is put together here from its members' hashes, each
/// type hash computed once per process ([`TypeHash`]): alloy's `eip712_encode_data` of a struct with struct
/// members hashes their type strings again for every message.
fn digest(kind: Kind, p: &Permit2Payment, separator: &B256) -> B256 {
    static PERMITTED: TypeHash<typed::TokenPermissions> = TypeHash::new();
    let permitted = PERMITTED.hash_struct(&typed::TokenPermissions {
        token: p.token,
        amount: p.amount,
    });
    let (type_hash, witness) = match kind {
        Kind::Exact => {
            static TYPE_HASH: TypeHash<ExactPermitWitnessTransferFrom> = TypeHash::new();
            static WITNESS: TypeHash<typed::Witness> = TypeHash::new();
            let witness = WITNESS.hash_struct(&typed::Witness {
                to: p.to,
                validAfter: p.valid_after,
            });
            (TYPE_HASH.get(), witness)
        }
        Kind::Upto => {
            static TYPE_HASH: TypeHash<UptoPermitWitnessTransferFrom> = TypeHash::new();
            static WITNESS: TypeHash<typed_upto::Witness> = TypeHash::new();
            let witness = WITNESS.hash_struct(&typed_upto::Witness {
                to: p.to,
                facilitator: p.facilitator.unwrap_or_default(),
                validAfter: p.valid_after,
            });
            (TYPE_HASH.get(), witness)
        }
    };
    let mut hasher = alloy_primitives::Keccak256::new();
    hasher.update(type_hash);
    hasher.update(permitted);
    hasher.update(p.spender.into_word());
    hasher.update(p.nonce.to_be_bytes::<32>());
    hasher.update(p.deadline.to_be_bytes::<32>());
    hasher.update(witness);
    eip712_digest(separator, hasher.finalize())
}

/// Whether `offer` is paid over Permit2.
fn over_permit2(offer: &PaymentOffer) -> bool {
    offer.extra.get("assetTransferMethod").map(String::as_str) == Some(TRANSFER_METHOD)
}

impl Scheme for ExactPermit2 {
    fn name(&self) -> &'static str {
        crate::proto::SCHEME_EXACT
    }

    fn sells(&self, offer: &PaymentOffer) -> bool {
        offer.scheme == crate::proto::SCHEME_EXACT && over_permit2(offer)
    }

    fn prepare(&self, offer: SchemeOffer<'_>) -> Result<Prepared, &'static str> {
        prepare(Kind::Exact, offer.offer)
    }

    fn read(&self, payload: &RawValue, offer: &PaymentOffer) -> Result<Authorized, Rejection> {
        read(Kind::Exact, self.name(), payload, offer)
    }

    fn check(&self, paid: &Authorized, c: Check<'_>) -> Result<B256, Rejection> {
        check(Kind::Exact, paid, c)
    }
}

impl Scheme for UptoPermit2 {
    fn name(&self) -> &'static str {
        SCHEME_UPTO
    }

    fn sells(&self, offer: &PaymentOffer) -> bool {
        offer.scheme == SCHEME_UPTO
            && offer
                .extra
                .get("assetTransferMethod")
                .is_none_or(|m| m == TRANSFER_METHOD)
    }

    fn extra(&self, offer: &PaymentOffer, extra: &mut serde_json::Map<String, serde_json::Value>) {
        if !offer.extra.contains_key("assetTransferMethod") {
            extra.insert("assetTransferMethod".into(), TRANSFER_METHOD.into());
        }
    }

    fn prepare(&self, offer: SchemeOffer<'_>) -> Result<Prepared, &'static str> {
        prepare(Kind::Upto, offer.offer)
    }

    fn read(&self, payload: &RawValue, offer: &PaymentOffer) -> Result<Authorized, Rejection> {
        read(Kind::Upto, self.name(), payload, offer)
    }

    fn check(&self, paid: &Authorized, c: Check<'_>) -> Result<B256, Rejection> {
        check(Kind::Upto, paid, c)
    }

    fn charges_what_was_used(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_sol_types::SolStruct;

    #[test]
    fn the_digest_is_alloys_eip712_signing_hash() {
        let p = Permit2Payment {
            signature: Default::default(),
            from: Address::repeat_byte(1),
            token: Address::repeat_byte(2),
            amount: U256::from(10_000u64),
            spender: EXACT_PERMIT2_PROXY,
            nonce: U256::from(123_456_789u64),
            deadline: U256::from(1_800_000_000u64),
            to: Address::repeat_byte(3),
            facilitator: None,
            valid_after: U256::from(5u64),
        };
        let domain = permit2_domain(84532);
        let exact = ExactPermitWitnessTransferFrom {
            permitted: typed::TokenPermissions {
                token: p.token,
                amount: p.amount,
            },
            spender: p.spender,
            nonce: p.nonce,
            deadline: p.deadline,
            witness: typed::Witness {
                to: p.to,
                validAfter: p.valid_after,
            },
        };
        assert_eq!(p.signing_hash(84532), exact.eip712_signing_hash(&domain));
        let upto = Permit2Payment {
            facilitator: Some(Address::repeat_byte(4)),
            spender: UPTO_PERMIT2_PROXY,
            ..p
        };
        let typed = UptoPermitWitnessTransferFrom {
            permitted: typed_upto::TokenPermissions {
                token: upto.token,
                amount: upto.amount,
            },
            spender: upto.spender,
            nonce: upto.nonce,
            deadline: upto.deadline,
            witness: typed_upto::Witness {
                to: upto.to,
                facilitator: Address::repeat_byte(4),
                validAfter: upto.valid_after,
            },
        };
        assert_eq!(upto.signing_hash(84532), typed.eip712_signing_hash(&domain));
    }

    #[test]
    fn the_signed_types_are_the_official_ones() {
        assert_eq!(
            ExactPermitWitnessTransferFrom::eip712_encode_type(),
            "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,uint256 validAfter)"
        );
        assert_eq!(
            UptoPermitWitnessTransferFrom::eip712_encode_type(),
            "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)"
        );
    }

    mod properties {
        use proptest::prelude::*;
        use serde_json::{Value, json};

        use super::super::*;
        use crate::scheme::properties::{broken, names_member, set};

        /// A valid payload's members, by path.
        const MEMBERS: [&[&str]; 9] = [
            &["signature"],
            &["permit2Authorization", "from"],
            &["permit2Authorization", "permitted", "token"],
            &["permit2Authorization", "permitted", "amount"],
            &["permit2Authorization", "spender"],
            &["permit2Authorization", "nonce"],
            &["permit2Authorization", "deadline"],
            &["permit2Authorization", "witness", "to"],
            &["permit2Authorization", "witness", "validAfter"],
        ];

        fn valid() -> Value {
            json!({
                "signature": format!("0x{}1b", "11".repeat(64)),
                "permit2Authorization": {
                    "from": Address::repeat_byte(1), "spender": EXACT_PERMIT2_PROXY,
                    "permitted": {"token": Address::repeat_byte(2), "amount": "10000"},
                    "nonce": "12345", "deadline": "1800000000",
                    "witness": {"to": Address::repeat_byte(3), "validAfter": "0"},
                },
            })
        }

        fn offer() -> PaymentOffer {
            PaymentOffer::usdc(
                "base-sepolia".parse().unwrap(),
                Address::repeat_byte(3),
                crate::Price::from(10_000u64),
            )
            .unwrap()
            .extra("assetTransferMethod", TRANSFER_METHOD)
        }

        proptest! {
            /// One member missing or of the wrong kind: refused before anything else, naming the member.
            #[test]
            fn a_payload_with_one_wrong_member_is_refused_naming_it((path, value) in broken(&MEMBERS)) {
                let mut payload = valid();
                set(&mut payload, path, value.clone());
                let raw = RawValue::from_string(payload.to_string()).unwrap();
                let refused = read(Kind::Exact, "exact", &raw, &offer()).unwrap_err();
                names_member(&refused, path)?;
            }

            /// Any text at all: an answer, never a panic.
            #[test]
            fn any_text_is_answered(text in ".{0,200}") {
                if let Ok(raw) = RawValue::from_string(json!(text).to_string()) {
                    prop_assert!(read(Kind::Upto, "upto", &raw, &offer()).is_err());
                }
                if let Ok(raw) = RawValue::from_string(text.clone()) {
                    let _ = read(Kind::Exact, "exact", &raw, &offer());
                }
            }
        }
    }
}
