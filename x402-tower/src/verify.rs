//! Local verification of a payment: decoding, matching an offer, the refusals and their error strings, and
//! the EIP-712 and signature rules of `exact` over EIP-3009 (the checks themselves are each scheme's:
//! [`crate::scheme`]).
//!
//! This module knows nothing of Tower. [`domain_separator`] and [`check_signature`] are public so another
//! settler (or a facilitator) can reuse them, and [`TransferWithAuthorization`] (the typed EIP-712 message)
//! so a client or a test can sign payments the layer accepts.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use alloy_primitives::{B256, Signature, U256, keccak256};
use alloy_sol_types::{Eip712Domain, SolStruct};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::network::Token;
use crate::proto::{
    Authorization, PaymentPayload, PaymentPayloadV1, PaymentPayloadV2, PaymentRequirementsV2,
    ResourceInfo,
};

#[allow(missing_docs, unreachable_pub)]
mod typed {
    alloy_sol_types::sol! {
        /// EIP-3009 `TransferWithAuthorization`, the EIP-712 message an exact/EVM payment signs.
        ///
        /// Its [`SolStruct::eip712_signing_hash`](alloy_sol_types::SolStruct::eip712_signing_hash) under
        /// the token's domain is what [`authorization_digest`](super::authorization_digest) computes; a
        /// client (or a test) signs that hash to pay.
        struct TransferWithAuthorization {
            address from;
            address to;
            uint256 value;
            uint256 validAfter;
            uint256 validBefore;
            bytes32 nonce;
        }
    }
}

pub use typed::TransferWithAuthorization;

/// `secp256k1n / 2`: USDC (and EIP-2) reject signatures with a larger `s`.
pub const SECP256K1N_HALF: U256 = alloy_primitives::uint!(
    0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0_U256
);

/// Seconds of slack required before `validBefore` (about one block).
pub const VALID_BEFORE_MARGIN: u64 = 6;

/// How far past `now + maxTimeoutSeconds` a `validBefore` may lie, for clock skew between client and server.
///
/// Official clients sign `validBefore = now + maxTimeoutSeconds`. A later `validBefore` is refused: the replay
/// store must keep every key until its `validBefore`, so an unbounded one would let a payer hold a store slot
/// for ever (and, with free verify-only signatures, fill the store).
pub const VALID_BEFORE_SKEW: u64 = 120;

/// Why a payment was rejected. [`RejectReason::as_str`] is the spec's error string sent to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectReason {
    /// The header is too long, not Base64, not JSON, or not a PaymentPayload.
    InvalidPayload = 0,
    /// `x402Version` is neither 1 nor 2.
    InvalidX402Version,
    /// The scheme is not `exact`.
    InvalidScheme,
    /// The network is unknown.
    InvalidNetwork,
    /// No offer matches the payment.
    NoMatchingRequirements,
    /// `authorization.to` is not the offer's `payTo`.
    RecipientMismatch,
    /// v1: `value` below `maxAmountRequired`.
    ValueTooLow,
    /// v2: `value` differs from `amount`.
    ValueMismatch,
    /// `validAfter` is in the future.
    ValidAfter,
    /// `validBefore` has passed (or is within the block margin).
    ValidBefore,
    /// The signature is malformed, not canonical, or not by `from`.
    Signature,
    /// The `(chainId, nonce space, from, nonce)` was already presented.
    NonceAlreadyUsed,
    /// The settler (facilitator) said invalid; the client gets the settler's own string.
    SettlerRejected,
}

impl RejectReason {
    /// Number of reasons.
    pub const COUNT: usize = 13;
    /// Every reason.
    pub const ALL: [RejectReason; Self::COUNT] = [
        Self::InvalidPayload,
        Self::InvalidX402Version,
        Self::InvalidScheme,
        Self::InvalidNetwork,
        Self::NoMatchingRequirements,
        Self::RecipientMismatch,
        Self::ValueTooLow,
        Self::ValueMismatch,
        Self::ValidAfter,
        Self::ValidBefore,
        Self::Signature,
        Self::NonceAlreadyUsed,
        Self::SettlerRejected,
    ];

    /// The spec's error string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InvalidPayload => "invalid_payload",
            Self::InvalidX402Version => "invalid_x402_version",
            Self::InvalidScheme => "invalid_scheme",
            Self::InvalidNetwork => "invalid_network",
            Self::NoMatchingRequirements => "No matching payment requirements",
            Self::RecipientMismatch => "invalid_exact_evm_payload_recipient_mismatch",
            Self::ValueTooLow => "invalid_exact_evm_payload_authorization_value",
            Self::ValueMismatch => "invalid_exact_evm_payload_authorization_value_mismatch",
            Self::ValidAfter => "invalid_exact_evm_payload_authorization_valid_after",
            Self::ValidBefore => "invalid_exact_evm_payload_authorization_valid_before",
            Self::Signature => "invalid_exact_evm_payload_signature",
            Self::NonceAlreadyUsed => "invalid_exact_evm_nonce_already_used",
            Self::SettlerRejected => "settler_rejected",
        }
    }
}

impl std::fmt::Display for RejectReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The EIP-712 domain separator of a token on a chain (depends only on name, version, chain id, address).
pub fn domain_separator(chain_id: u64, token: &Token) -> B256 {
    Eip712Domain::new(
        Some(token.name.clone().into()),
        Some(token.version.clone().into()),
        Some(U256::from(chain_id)),
        Some(token.address),
        None,
    )
    .separator()
}

/// The EIP-712 digest of an authorization under a precomputed domain separator.
pub fn authorization_digest(auth: &Authorization, domain_separator: &B256) -> B256 {
    let msg = typed::TransferWithAuthorization {
        from: auth.from,
        to: auth.to,
        value: auth.value,
        validAfter: auth.valid_after,
        validBefore: auth.valid_before,
        nonce: auth.nonce,
    };
    static TYPE_HASH: TypeHash<typed::TransferWithAuthorization> = TypeHash::new();
    eip712_digest(domain_separator, TYPE_HASH.hash_struct(&msg))
}

/// An EIP-712 struct's type hash, `keccak256(encodeType)`, hashed once per process: alloy's
/// `SolStruct::eip712_hash_struct` hashes the type string again for every message.
pub(crate) struct TypeHash<T>(
    std::sync::OnceLock<B256>,
    std::marker::PhantomData<fn() -> T>,
);

impl<T: SolStruct> TypeHash<T> {
    pub(crate) const fn new() -> Self {
        Self(std::sync::OnceLock::new(), std::marker::PhantomData)
    }

    /// The type hash.
    pub(crate) fn get(&self) -> &B256 {
        self.0
            .get_or_init(|| keccak256(T::eip712_encode_type().as_bytes()))
    }

    /// `hashStruct(message)`: `keccak256(typeHash ‖ encodeData(message))`, the data encoded by alloy.
    pub(crate) fn hash_struct(&self, message: &T) -> B256 {
        let mut hasher = alloy_primitives::Keccak256::new();
        hasher.update(self.get());
        hasher.update(message.eip712_encode_data());
        hasher.finalize()
    }
}

/// The EIP-712 signing hash of a message whose `hashStruct` is `struct_hash`, under the domain whose
/// separator is `domain_separator`: `keccak256(0x1901 ‖ domainSeparator ‖ hashStruct(message))`, for a
/// separator hashed once, not per message as `SolStruct::eip712_signing_hash` does.
pub(crate) fn eip712_digest(domain_separator: &B256, struct_hash: B256) -> B256 {
    let mut buf = [0u8; 66];
    buf[0] = 0x19;
    buf[1] = 0x01;
    buf[2..34].copy_from_slice(domain_separator.as_slice());
    buf[34..].copy_from_slice(struct_hash.as_slice());
    keccak256(buf)
}

/// Checks a signature as USDC does for a payer without code: exactly 65 bytes `r‖s‖v`, `v` 27 or 28,
/// `s <= n/2`, and the address recovered from the digest equals `auth.from`.
pub fn check_signature(
    auth: &Authorization,
    signature: &[u8],
    domain_separator: &B256,
) -> Result<(), RejectReason> {
    check_signature_digest(auth, signature, domain_separator).map(|_| ())
}

/// [`check_signature`], returning the authorization's EIP-712 digest (the payment's fingerprint).
pub(crate) fn check_signature_digest(
    auth: &Authorization,
    signature: &[u8],
    domain_separator: &B256,
) -> Result<B256, RejectReason> {
    let sig: &[u8; 65] = signature.try_into().map_err(|_| RejectReason::Signature)?;
    let v = sig[64];
    if v != 27 && v != 28 {
        return Err(RejectReason::Signature);
    }
    let r = U256::from_be_slice(&sig[..32]);
    let s = U256::from_be_slice(&sig[32..64]);
    if s > SECP256K1N_HALF || s.is_zero() || r.is_zero() {
        return Err(RejectReason::Signature);
    }
    let digest = authorization_digest(auth, domain_separator);
    let recovered = Signature::new(r, s, v == 28)
        .recover_address_from_prehash(&digest)
        .map_err(|_| RejectReason::Signature)?;
    if recovered == auth.from {
        Ok(digest)
    } else {
        Err(RejectReason::Signature)
    }
}

/// Base64 decoder: standard alphabet, padding optional.
const B64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// Why a payment was refused: the spec's reason, and a detail for logs and people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The reason; [`RejectReason::as_str`] is the spec's error string.
    pub reason: RejectReason,
    /// What exactly failed, in words (for a payment that cannot be read: which step, and where in its JSON).
    pub detail: Cow<'static, str>,
    /// A scheme's own error string, sent instead of the reason's ([`Rejection::with_code`]): the official
    /// code of a check the reasons do not name. Counted under `reason`.
    pub code: Option<&'static str>,
}

impl Rejection {
    /// A refusal for `reason`, with what failed in words.
    pub fn new(reason: RejectReason, detail: impl Into<Cow<'static, str>>) -> Self {
        Rejection {
            reason,
            detail: detail.into(),
            code: None,
        }
    }

    /// An `invalid_payload` refusal: `what` failed, and the parser's `why` (which says where), capped at
    /// 200 bytes (it may quote the client's input).
    pub fn unreadable(what: &str, why: impl std::fmt::Display) -> Self {
        let mut detail = format!("{what}: {why}");
        if detail.len() > UNREADABLE_DETAIL_MAX {
            let mut end = UNREADABLE_DETAIL_MAX;
            while !detail.is_char_boundary(end) {
                end -= 1;
            }
            detail.truncate(end);
            detail.push('…');
        }
        Rejection::new(RejectReason::InvalidPayload, detail)
    }

    /// Sends `code` (a scheme's official error string) instead of the reason's.
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// The error string alone: the scheme's [`code`](Self::code), else the reason's.
    pub fn error_code(&self) -> &'static str {
        self.code.unwrap_or(self.reason.as_str())
    }

    /// The `error` of the 402 that refuses it: the spec's string (or the scheme's [`code`](Self::code)),
    /// and for a payment that cannot be read (`invalid_payload`), why, after a colon: a client that
    /// compares the code reads up to the colon, a person learns what to fix.
    pub fn client_error(&self) -> Cow<'static, str> {
        match (self.code, self.reason) {
            (Some(code), _) => Cow::Borrowed(code),
            (None, RejectReason::InvalidPayload) => {
                Cow::Owned(format!("{}: {}", self.reason.as_str(), self.detail))
            }
            (None, reason) => Cow::Borrowed(reason.as_str()),
        }
    }
}

fn reject(reason: RejectReason, detail: &'static str) -> Rejection {
    Rejection::new(reason, detail)
}

/// Most bytes of a parser's message kept in an `invalid_payload` detail (it may quote the client's input).
const UNREADABLE_DETAIL_MAX: usize = 200;

fn unreadable(what: &str, why: impl std::fmt::Display) -> Rejection {
    Rejection::unreadable(what, why)
}

/// Reads `text` as a `T`, refusing it as `what` otherwise, with the member where reading failed named
/// (`permit2Authorization.nonce: invalid type: integer ...`). The usual case is one `serde_json` pass; only
/// a failure is read again to find its path.
pub(crate) fn read_json<'de, T: serde::Deserialize<'de>>(
    text: &'de str,
    what: &str,
) -> Result<T, Rejection> {
    serde_json::from_str(text).map_err(|plain| {
        let mut de = serde_json::Deserializer::from_str(text);
        match serde_path_to_error::deserialize::<_, T>(&mut de) {
            Err(e) if !matches!(e.path().to_string().as_str(), "" | ".") => {
                unreadable(what, format_args!("{}: {}", e.path(), e.inner()))
            }
            _ => unreadable(what, plain),
        }
    })
}

/// Decodes a payment header (already length-capped) into its typed form and its JSON text as sent.
pub(crate) fn decode(header: &[u8]) -> Result<Decoded, Rejection> {
    let trimmed = header.trim_ascii();
    let bytes = B64
        .decode(trimmed)
        .map_err(|e| unreadable("the payment header is not Base64 (standard alphabet)", e))?;
    // JSON is UTF-8: the text is kept as sent (a payment record stores it, a facilitator receives it).
    let text = String::from_utf8(bytes).map_err(|e| {
        unreadable(
            "the decoded payment header is not JSON",
            format_args!("not UTF-8 at byte {}", e.utf8_error().valid_up_to()),
        )
    })?;
    let (payload, extensions_at) = payload_at(&text)?;
    Ok(Decoded {
        payload,
        text: text.into(),
        extensions_at,
    })
}

/// A decoded payment header.
#[derive(Debug, Clone)]
pub(crate) struct Decoded {
    pub(crate) payload: PaymentPayload,
    /// The JSON text as the client sent it.
    pub(crate) text: Arc<str>,
    /// Where the value of its `extensions` member is in `text` ([`payload_at`]).
    pub(crate) extensions_at: Option<Range<usize>>,
}

/// Reads a `PaymentPayload` from its JSON text, dispatching on its `x402Version` (not on the header it came
/// in). The typed form is read straight from the text: no JSON tree is built, and the extensions a client
/// echoes stay text ([`PaymentPayloadV2::extensions`]).
///
/// A facilitator, which receives the payload inside a JSON body rather than Base64, starts here.
///
/// ```
/// use x402_tower::verify::payload_from_str;
///
/// assert!(payload_from_str(r#"{"x402Version": 3}"#).is_err());
/// assert!(payload_from_str("[2]").is_err());
/// ```
pub fn payload_from_str(text: &str) -> Result<PaymentPayload, Rejection> {
    payload_at(text).map(|(payload, _)| payload)
}

/// [`payload_from_str`], and where the value of a v2 payment's `extensions` member is in `text` (a byte
/// range), for [`StoredPayment::kept`](crate::store::StoredPayment::kept) to leave the echoed extensions
/// out without reading the text again.
pub(crate) fn payload_at(text: &str) -> Result<(PaymentPayload, Option<Range<usize>>), Rejection> {
    /// The version alone (any JSON value: a wrong type is a wrong version, not bad JSON); every other
    /// member is skipped without being built.
    #[derive(Deserialize)]
    struct Version {
        #[serde(rename = "x402Version", default)]
        version: serde_json::Value,
    }
    /// A v2 payment with its extensions borrowed from the text (where they are is then known).
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct V2<'a> {
        x402_version: u8,
        #[serde(default)]
        resource: Option<ResourceInfo>,
        accepted: PaymentRequirementsV2,
        #[serde(borrow)]
        payload: &'a RawValue,
        #[serde(default, borrow)]
        extensions: Option<&'a RawValue>,
    }
    impl V2<'_> {
        fn into_payload(self, text: &str) -> (PaymentPayload, Option<Range<usize>>) {
            let at = self
                .extensions
                .and_then(|e| crate::proto::span_in(text, e.get()));
            let payload = PaymentPayloadV2 {
                x402_version: self.x402_version,
                resource: self.resource,
                accepted: self.accepted,
                payload: self.payload.to_owned(),
                extensions: self.extensions.map(RawValue::to_owned),
            };
            (PaymentPayload::V2(payload), at)
        }
    }
    // A struct also deserialises from a JSON array (by position): a payload is an object.
    if !text.trim_start().starts_with('{') {
        return Err(reject(
            RejectReason::InvalidPayload,
            "the decoded payment header is not a JSON object",
        ));
    }
    // The common case in one pass: a v2 payment. Anything else (v1, another version, not a payment) is
    // decided by its version below, with the same answers as if this attempt had not been made.
    if let Ok(payload) = serde_json::from_str::<V2<'_>>(text)
        && payload.x402_version == 2
    {
        return Ok(payload.into_payload(text));
    }
    let version = serde_json::from_str::<Version>(text)
        .map_err(|e| unreadable("the decoded payment header is not JSON", e))?;
    match version.version.as_u64() {
        Some(1) => read_json::<PaymentPayloadV1>(text, "not a v1 PaymentPayload")
            .map(|p| (PaymentPayload::V1(p), None)),
        Some(2) => {
            read_json::<V2<'_>>(text, "not a v2 PaymentPayload").map(|p| p.into_payload(text))
        }
        _ => Err(reject(
            RejectReason::InvalidX402Version,
            "x402Version must be 1 or 2",
        )),
    }
}

/// Parses a payload's `signature`: `0x` + an even number of hex digits (at most 1 KiB of bytes), nothing else.
///
/// ```
/// use x402_tower::verify::parse_signature_hex;
///
/// assert_eq!(parse_signature_hex("0x0aff"), Some(vec![0x0a, 0xff]));
/// assert_eq!(parse_signature_hex("0x+f"), None);
/// assert_eq!(parse_signature_hex("0aff"), None);
/// ```
pub fn parse_signature_hex(s: &str) -> Option<Vec<u8>> {
    let hex = s.strip_prefix("0x")?;
    // Hex digits only: `u8::from_str_radix` alone would also take a sign (`"+f"`).
    if hex.len() % 2 != 0 || hex.len() > 2 * 1024 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
        })
        .collect()
}

/// The one rule for a payment past its `validBefore`, for every door: a check `refused` only because
/// `validBefore` has passed (not because it is too far ahead) is run again as of the payment's last valid
/// second (`validBefore - 6`; `valid_before` is the authorization's). `Ok`: the payment was valid then, and
/// only its record may answer it (it is never settled again, only redelivered or told it is pending).
/// `Err`: the first refusal.
pub(crate) fn as_of_last_valid_second<T>(
    refused: Rejection,
    valid_before: u64,
    now: u64,
    check: impl FnOnce(u64) -> Result<T, Rejection>,
) -> Result<T, Rejection> {
    let at = Some(valid_before)
        .filter(|vb| {
            refused.reason == RejectReason::ValidBefore
                && *vb < now.saturating_add(VALID_BEFORE_MARGIN)
        })
        .and_then(|vb| vb.checked_sub(VALID_BEFORE_MARGIN));
    match at {
        Some(at) => check(at).map_err(|_| refused),
        None => Err(refused),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::{Address, address, b256};

    pub(crate) fn message_m(from: Address) -> Authorization {
        Authorization {
            from,
            to: address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
            value: U256::from(10_000u64),
            valid_after: U256::from(1_740_672_089u64),
            valid_before: U256::from(1_740_672_154u64),
            nonce: b256!("0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"),
        }
    }

    const ACCOUNT0: Address = address!("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266");

    fn domain_a() -> B256 {
        domain_separator(
            84532,
            &Token::new(
                address!("0x036CbD53842c5426634e7929541eC2318f3dCF7e"),
                "USDC",
                "2",
                6,
            ),
        )
    }
    fn domain_b() -> B256 {
        domain_separator(
            8453,
            &Token::new(
                address!("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"),
                "USD Coin",
                "2",
                6,
            ),
        )
    }
    fn sig(s: &str) -> Vec<u8> {
        parse_signature_hex(s).unwrap()
    }
    const SIG_A: &str = "0xdc53a4a579de989368a0fae2ef2172ff2f474b4297013f865d171239f17ef4c3157b4b4030f1bebc53d55ace15c2377dff501a60e1e56c291f1000d6e78f082f1b";

    /// A v2 payment whose `extensions` member is written as `extensions` (JSON text) and placed `where`.
    fn v2_text(extensions: &str, first: bool) -> String {
        let rest = r#""x402Version" : 2, "accepted":{"scheme":"exact","network":"eip155:84532","amount":"10000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":60,"extra":{"name":"USDC","version":"2"}},"payload":{"signature":"0x00","authorization":{"from":"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","to":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","value":"10000","validAfter":"0","validBefore":"9","nonce":"0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"}}"#;
        if first {
            format!(r#"{{ "extensions" :{extensions}, {rest}}}"#)
        } else {
            format!(r#"{{{rest},"extensions": {extensions} }}"#)
        }
    }

    #[test]
    fn a_decoded_payment_locates_its_extensions_for_the_record() {
        use crate::extensions::SERVER_DECLARATIONS;
        use crate::store::StoredPayment;
        for extensions in [
            r#"{"bazaar":{"info":{"a":[1,"}"]}},"payment-identifier":{"info":{"id":"p_1"}}}"#,
            r#"{"baz\u0061ar":{},"terms":{"v":"1"},"offer-receipt":{},"sign-in-with-x":{}}"#,
            r#"{"payment-identifier":{"info":{"id":"p_1"}}}"#,
            "{}",
            "null",
        ] {
            for first in [true, false] {
                let text: Arc<str> = v2_text(extensions, first).into();
                let (payload, at) = payload_at(&text).unwrap();
                let PaymentPayload::V2(v2) = payload else {
                    panic!("a v2 payment");
                };
                // The borrowing decoder reads what the public type's own decoder reads.
                let public: PaymentPayloadV2 = serde_json::from_str(&text).unwrap();
                assert_eq!(
                    serde_json::to_string(&v2).unwrap(),
                    serde_json::to_string(&public).unwrap()
                );
                if extensions == "null" {
                    assert_eq!((at.clone(), v2.extensions.is_none()), (None, true));
                } else {
                    let at = at.clone().unwrap();
                    assert_eq!(&text[at], extensions);
                    assert_eq!(v2.extensions.unwrap().get(), extensions);
                }
                // The record made from the located member is the one a full re-read makes.
                let by_span = StoredPayment::kept(&text, at, Arc::from("{}"), &SERVER_DECLARATIONS);
                assert_eq!(
                    by_span,
                    StoredPayment::new(&text, Arc::from("{}"), &SERVER_DECLARATIONS),
                    "{text}"
                );
            }
        }
        // v1 has no extensions member to locate.
        let v1 = r#"{"x402Version":1,"scheme":"exact","network":"base-sepolia","payload":{"signature":"0x00","authorization":{"from":"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","to":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","value":"10000","validAfter":"0","validBefore":"9","nonce":"0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"}}}"#;
        assert!(matches!(payload_at(v1), Ok((PaymentPayload::V1(_), None))));
        // Two `extensions` members: not a payment.
        let twice = v2_text(r#"{"bazaar":1},"extensions":{}"#, false);
        assert!(payload_at(&twice).is_err());
    }

    #[test]
    fn vectors_domains_and_digests() {
        assert_eq!(
            domain_a(),
            b256!("0x71f17a3b2ff373b803d70a5a07c046c1a2bc8e89c09ef722fcb047abe94c9818")
        );
        assert_eq!(
            domain_b(),
            b256!("0x02fa7265e7c5d81118673727957699e4d68f74cd74b7db77da710fe8a2c7834f")
        );
        let m = message_m(ACCOUNT0);
        assert_eq!(
            authorization_digest(&m, &domain_a()),
            b256!("0x50708d3bf7216e1aeabe7bf22081b9f36c7c287530f92510318f13a03d89dc86")
        );
        assert_eq!(
            authorization_digest(&m, &domain_b()),
            b256!("0x7e9613714edd92ad20fa5b252ec168245031911a3438dd20225f083b6a688f8a")
        );
    }

    #[test]
    fn vector_a_and_its_broken_twins() {
        let m = message_m(ACCOUNT0);
        assert_eq!(check_signature(&m, &sig(SIG_A), &domain_a()), Ok(()));
        let high_s = "0xdc53a4a579de989368a0fae2ef2172ff2f474b4297013f865d171239f17ef4c3ea84b4bfcf0e4143ac2aa531ea3dc880bb5ec285cd633412a0c25db5e8a739121c";
        assert_eq!(
            check_signature(&m, &sig(high_s), &domain_a()),
            Err(RejectReason::Signature)
        );
        let mut v01 = sig(SIG_A);
        v01[64] = 0;
        assert_eq!(
            check_signature(&m, &v01, &domain_a()),
            Err(RejectReason::Signature)
        );
        v01[64] = 1;
        assert_eq!(
            check_signature(&m, &v01, &domain_a()),
            Err(RejectReason::Signature)
        );
        assert_eq!(
            check_signature(&m, &sig(SIG_A)[..64], &domain_a()),
            Err(RejectReason::Signature)
        );
        assert_eq!(
            check_signature(&m, &sig(SIG_A), &domain_b()),
            Err(RejectReason::Signature)
        );
    }

    #[test]
    fn vector_b_and_spec_example() {
        let m = message_m(ACCOUNT0);
        let sig_b = "0xa70a7d235fd4218a3ed6625525892efed6fd1ac6a193ba612bb9da921620bce74885a8f7f56d2dc2f46005b7d6a089ae3469455a911004b6c4a6ab600677f56c1c";
        assert_eq!(check_signature(&m, &sig(sig_b), &domain_b()), Ok(()));
        let spec_from = address!("0x857b06519E91e3A54538791bDbb0E22373e36b66");
        let m2 = message_m(spec_from);
        assert_eq!(
            authorization_digest(&m2, &domain_a()),
            b256!("0xf256992871671abcb27ff92885a7afa46218724e5fc0bac35d050115aa1d22e6")
        );
        let spec_sig = "0x2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c";
        assert_eq!(check_signature(&m2, &sig(spec_sig), &domain_a()), Ok(()));
        assert_eq!(
            check_signature(&m2, &sig(spec_sig), &domain_b()),
            Err(RejectReason::Signature)
        );
    }

    #[test]
    fn decode_garbage_never_panics() {
        for h in [
            &b""[..],
            b"!!!",
            b"bnVsbA==",
            b"e30=",
            b"eyJ4NDAyVmVyc2lvbiI6M30=",
            b"eyJ4NDAyVmVyc2lvbiI6MX0=",
        ] {
            assert!(decode(h).is_err());
        }
        assert_eq!(
            decode(b"eyJ4NDAyVmVyc2lvbiI6M30=").unwrap_err().reason,
            RejectReason::InvalidX402Version
        );
    }
}
