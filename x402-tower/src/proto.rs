//! x402 wire types, v1 and v2, exactly as the official implementations write them.
//!
//! This module knows nothing of HTTP or Tower. Amounts and times are base-10 strings on the wire and
//! [`U256`] here; addresses are written checksummed and read case-insensitively; a nonce is `0x` + 64 hex.
//! Deriving `PartialEq` on these typed forms gives the *semantic* comparison the protocol asks for: key
//! order, address case and amount formatting (`"010"` vs `"10"`) do not matter.

use std::borrow::Cow;

use alloy_primitives::{Address, B256, U256};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

pub use crate::address::checksum;

/// serde helpers for the wire's string encodings.
pub mod wire {
    use super::*;
    use serde::de::Error as _;
    use serde::{Deserializer, Serializer};

    /// Parses `0x` + 40 hex digits, any case.
    pub fn parse_address(s: &str) -> Option<Address> {
        let hex = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?;
        if hex.len() != 40 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        hex.parse().ok()
    }

    /// Parses a base-10 integer string (digits only, at most 78 of them).
    pub fn parse_decimal(s: &str) -> Option<U256> {
        if s.is_empty() || s.len() > 78 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        U256::from_str_radix(s, 10).ok()
    }

    /// Parses `0x` + 64 hex digits.
    pub fn parse_b256(s: &str) -> Option<B256> {
        let hex = s.strip_prefix("0x")?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        hex.parse().ok()
    }

    /// `#[serde(with = "address")]`: checksummed out, case-insensitive in.
    pub mod address {
        use super::*;
        /// Serializes checksummed ([`crate::address::checksum`]: a facilitator's `/verify` and `/settle`
        /// bodies write the requirements' recipient and token on every purchase).
        pub fn serialize<S: Serializer>(a: &Address, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(&crate::address::checksum(a))
        }
        /// Deserializes `0x` + 40 hex.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Address, D::Error> {
            let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
            parse_address(&s)
                .ok_or_else(|| D::Error::custom("expected an address: 0x and 40 hex digits"))
        }
    }

    /// `#[serde(with = "decimal")]`: a U256 as a base-10 string.
    pub mod decimal {
        use super::*;
        /// Serializes as a base-10 string.
        pub fn serialize<S: Serializer>(v: &U256, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(&v.to_string())
        }
        /// Deserializes a base-10 string.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<U256, D::Error> {
            let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
            parse_decimal(&s).ok_or_else(|| D::Error::custom("expected a base-10 integer string"))
        }
    }

    /// `#[serde(with = "bytes32")]`: `0x` + 64 hex.
    pub mod bytes32 {
        use super::*;
        /// Serializes as `0x` + 64 lowercase hex.
        pub fn serialize<S: Serializer>(v: &B256, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(&v.to_string())
        }
        /// Deserializes `0x` + 64 hex.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<B256, D::Error> {
            let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
            parse_b256(&s).ok_or_else(|| D::Error::custom("expected 0x and 64 hex digits"))
        }
    }
}

/// The `exact` scheme: the payer authorizes the price, the price is settled.
pub const SCHEME_EXACT: &str = "exact";

/// `extra` of an EIP-3009 offer: the token's EIP-712 domain name and version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Eip712Extra {
    /// EIP-712 domain name.
    pub name: String,
    /// EIP-712 domain version.
    pub version: String,
}

/// v1 PaymentRequirements (one element of the v1 `accepts`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequirementsV1 {
    /// `"exact"`.
    pub scheme: String,
    /// v1 network name (`"base-sepolia"`).
    pub network: String,
    /// Atomic units, base-10 string.
    #[serde(with = "wire::decimal")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[0-9]{1,78}$"))]
    pub max_amount_required: U256,
    /// Absolute URL of the resource.
    pub resource: String,
    /// Description, `""` allowed, never null.
    #[serde(default)]
    pub description: String,
    /// MIME type, `""` allowed, never null.
    #[serde(default)]
    pub mime_type: String,
    /// Optional output schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Recipient.
    #[serde(with = "wire::address")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^0x[0-9a-fA-F]{40}$"))]
    pub pay_to: Address,
    /// Seconds a client should allow (`validBefore = now + maxTimeoutSeconds`).
    pub max_timeout_seconds: u64,
    /// Token contract.
    #[serde(with = "wire::address")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^0x[0-9a-fA-F]{40}$"))]
    pub asset: Address,
    /// EIP-712 domain name/version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Eip712Extra>))]
    pub extra: Option<Value>,
}

/// v2 PaymentRequirements (an element of `accepts`, and the `accepted` a client echoes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequirementsV2 {
    /// `"exact"`.
    pub scheme: String,
    /// CAIP-2 network (`"eip155:84532"`).
    pub network: String,
    /// Atomic units, base-10 string.
    #[serde(with = "wire::decimal")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[0-9]{1,78}$"))]
    pub amount: U256,
    /// Token contract.
    #[serde(with = "wire::address")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^0x[0-9a-fA-F]{40}$"))]
    pub asset: Address,
    /// Recipient.
    #[serde(with = "wire::address")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^0x[0-9a-fA-F]{40}$"))]
    pub pay_to: Address,
    /// Seconds a client should allow.
    pub max_timeout_seconds: u64,
    /// EIP-712 domain name/version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Eip712Extra>))]
    pub extra: Option<Value>,
}

/// v2 `resource` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ResourceInfo {
    /// Absolute URL.
    pub url: String,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// MIME type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// The v1 402 body: `{x402Version:1, error, accepts}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequiredV1 {
    /// Always 1.
    pub x402_version: u8,
    /// Why the payment is required (or what was wrong with the one sent).
    pub error: String,
    /// Offers.
    pub accepts: Vec<PaymentRequirementsV1>,
}

/// The v2 PaymentRequired document (Base64 in `PAYMENT-REQUIRED`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequiredV2 {
    /// Always 2.
    pub x402_version: u8,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The resource sold.
    pub resource: ResourceInfo,
    /// Offers.
    pub accepts: Vec<PaymentRequirementsV2>,
    /// Extensions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Value>,
}

/// The EIP-3009 authorization a client signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Authorization {
    /// Payer.
    #[serde(with = "wire::address")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^0x[0-9a-fA-F]{40}$"))]
    pub from: Address,
    /// Recipient.
    #[serde(with = "wire::address")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^0x[0-9a-fA-F]{40}$"))]
    pub to: Address,
    /// Amount, atomic units.
    #[serde(with = "wire::decimal")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[0-9]{1,78}$"))]
    pub value: U256,
    /// Unix seconds.
    #[serde(with = "wire::decimal")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[0-9]{1,78}$"))]
    pub valid_after: U256,
    /// Unix seconds.
    #[serde(with = "wire::decimal")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[0-9]{1,78}$"))]
    pub valid_before: U256,
    /// 32-byte nonce.
    #[serde(with = "wire::bytes32")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^0x[0-9a-fA-F]{64}$"))]
    pub nonce: B256,
}

/// `payload` of an `exact` payment over EIP-3009 (what [`ExactEip3009`](crate::scheme::ExactEip3009) reads).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExactEvmPayload {
    /// `0x` + hex; 65 bytes for an ordinary wallet.
    pub signature: String,
    /// The signed authorization.
    pub authorization: Authorization,
}

/// v1 PaymentPayload (Base64 in `X-PAYMENT`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PaymentPayloadV1 {
    /// 1.
    pub x402_version: u8,
    /// `"exact"`.
    pub scheme: String,
    /// v1 network name.
    pub network: String,
    /// The scheme's payload as sent (`exact` over EIP-3009: an [`ExactEvmPayload`]); the
    /// [`Scheme`](crate::scheme::Scheme) that sells the offer reads it.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub payload: Box<RawValue>,
}

/// v2 PaymentPayload (Base64 in `PAYMENT-SIGNATURE`).
///
/// `extensions` is kept as the client wrote it ([`RawValue`]): a server never reads most of what a client
/// echoes (a bazaar schema, a signed offer), so decoding a payment builds no JSON tree for it; parse it
/// when you need it (`serde_json::from_str(raw.get())`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PaymentPayloadV2 {
    /// 2.
    pub x402_version: u8,
    /// The resource as the client saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceInfo>,
    /// The offer the client accepted, echoed.
    pub accepted: PaymentRequirementsV2,
    /// The scheme's payload as sent (`exact` over EIP-3009: an [`ExactEvmPayload`]); the
    /// [`Scheme`](crate::scheme::Scheme) that sells the accepted offer reads it.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub payload: Box<RawValue>,
    /// Extensions, as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub extensions: Option<Box<RawValue>>,
}

/// A decoded payment of either version.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // both are large; boxing would cost an allocation per payment
pub enum PaymentPayload {
    /// x402 v1.
    V1(PaymentPayloadV1),
    /// x402 v2.
    V2(PaymentPayloadV2),
}

impl PaymentPayload {
    /// The protocol version (1 or 2).
    pub fn x402_version(&self) -> u8 {
        match self {
            PaymentPayload::V1(_) => 1,
            PaymentPayload::V2(_) => 2,
        }
    }

    /// The scheme the payment names (v1 `scheme`, v2 `accepted.scheme`).
    pub fn scheme(&self) -> &str {
        match self {
            PaymentPayload::V1(p) => &p.scheme,
            PaymentPayload::V2(p) => &p.accepted.scheme,
        }
    }

    /// The scheme's payload (the `payload` member), as sent.
    pub fn scheme_payload(&self) -> &RawValue {
        match self {
            PaymentPayload::V1(p) => &p.payload,
            PaymentPayload::V2(p) => &p.payload,
        }
    }
}

/// PaymentRequirements of either version (what a facilitator receives next to the payload).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum PaymentRequirements {
    /// x402 v1.
    V1(PaymentRequirementsV1),
    /// x402 v2.
    V2(PaymentRequirementsV2),
}

/// The receipt (Base64 in `X-PAYMENT-RESPONSE` / `PAYMENT-RESPONSE`) and a facilitator's `/settle` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SettleResponse {
    /// Whether the payment settled.
    pub success: bool,
    /// Spec error string on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<String>,
    /// Human-readable detail on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// Transaction hash; `""` on failure.
    #[serde(default)]
    pub transaction: String,
    /// Network (v1 name or CAIP-2, as the client's version).
    #[serde(default)]
    pub network: String,
    /// Payer address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    /// The amount settled, atomic units (base-10): what a scheme that charges what was used (`upto`)
    /// settled, `"0"` when nothing was. Absent for `exact`, which settles its amount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<String>,
    /// Extension answers by key (`offer-receipt`: the signed receipt), as JSON text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub extensions: Option<RawExtensions>,
}

impl SettleResponse {
    /// This answer as JSON, written into one buffer of about its size (`serde_json::to_vec` starts at 128
    /// bytes and doubles, copying a settlement with a signed receipt four times over). A purchase writes
    /// it out twice: its receipt header and its payment record.
    ///
    /// ```
    /// use x402_tower::proto::SettleResponse;
    ///
    /// let sr: SettleResponse = serde_json::from_str(
    ///     r#"{"success": true, "transaction": "0xab", "network": "eip155:8453"}"#,
    /// ).unwrap();
    /// assert_eq!(sr.to_json().unwrap(), serde_json::to_vec(&sr).unwrap());
    /// ```
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        let guess = 256
            + self.transaction.len()
            + self.extensions.as_ref().map_or(0, |e| e.as_str().len())
            + self.error_message.as_ref().map_or(0, String::len);
        let mut out = Vec::with_capacity(guess);
        serde_json::to_writer(&mut out, self)?;
        Ok(out)
    }
}

/// The `extensions` of a settlement answer: a JSON object by extension key, kept as the text it was written
/// or received as. A settlement is cloned, stored, sent and resent several times per purchase; as text that
/// copies a string, where a JSON tree (a signed receipt and its schema) cost hundreds of allocations each
/// time. Read an entry with [`RawExtensions::get`].
///
/// ```
/// use x402_tower::proto::RawExtensions;
///
/// let ext = RawExtensions::default().with("offer-receipt", r#"{"info": {"n": 1}}"#).unwrap();
/// assert_eq!(ext.get("offer-receipt").unwrap()["info"]["n"], 1);
/// assert!(ext.get("bazaar").is_none());
/// // A key written with an escape is the same key.
/// let escaped: RawExtensions = serde_json::from_str(r#"{"offer\u002dreceipt": {"n": 2}}"#).unwrap();
/// assert_eq!(escaped.raw("offer-receipt").unwrap().get(), r#"{"n": 2}"#);
/// assert!(serde_json::from_str::<RawExtensions>("[1]").is_err());
/// ```
#[derive(Debug, Clone, Serialize)]
#[serde(transparent)]
pub struct RawExtensions(Box<RawValue>);

impl Default for RawExtensions {
    fn default() -> Self {
        RawExtensions(RawValue::from_string("{}".to_owned()).unwrap_or_else(|_| unreachable!()))
    }
}

impl<'de> Deserialize<'de> for RawExtensions {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        if !raw.get().trim_start().starts_with('{') {
            return Err(serde::de::Error::custom("extensions must be a JSON object"));
        }
        Ok(RawExtensions(raw))
    }
}

/// The same text (the same server wrote both).
impl PartialEq for RawExtensions {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl Eq for RawExtensions {}

impl RawExtensions {
    /// The JSON text of the whole object.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// The entry `key`, as JSON text, borrowed from the object (found without copying any entry; the last
    /// one if the key repeats).
    pub fn raw(&self, key: &str) -> Option<&RawValue> {
        object_members(self.0.get())?
            .into_iter()
            .rev()
            .find_map(|(k, v)| (k == key).then_some(v))
    }

    /// Whether there is an entry `key`.
    pub fn contains(&self, key: &str) -> bool {
        self.starts_with_key(key) || self.raw(key).is_some()
    }

    /// Whether the object's first member is `key`, written without escapes or spaces, as serde_json writes
    /// it (a settlement's signed receipt as this crate writes it): then the object has the key, which is
    /// seen without reading the members.
    fn starts_with_key(&self, key: &str) -> bool {
        !key.contains(['"', '\\'])
            && self
                .0
                .get()
                .strip_prefix("{\"")
                .and_then(|rest| rest.strip_prefix(key))
                .is_some_and(|rest| rest.starts_with("\":"))
    }

    /// Extensions from the text of a JSON object this crate wrote (not read again).
    #[cfg(feature = "offer-receipt")]
    pub(crate) fn from_object(raw: Box<RawValue>) -> Self {
        debug_assert!(raw.get().starts_with('{'));
        RawExtensions(raw)
    }

    /// The entry `key`, parsed.
    pub fn get(&self, key: &str) -> Option<Value> {
        serde_json::from_str(self.raw(key)?.get()).ok()
    }

    /// These extensions with `key` set to `value` (JSON text), replacing an entry of that key.
    pub fn with(&self, key: &str, value: &str) -> Result<Self, serde_json::Error> {
        let mut entries: std::collections::BTreeMap<String, Box<RawValue>> =
            serde_json::from_str(self.0.get())?;
        entries.insert(key.to_owned(), RawValue::from_string(value.to_owned())?);
        Ok(RawExtensions(serde_json::value::to_raw_value(&entries)?))
    }
}

/// A JSON object key, borrowed from the text unless it has escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// The members of the JSON object `text`, in order, each value the text it was written as (nothing is
/// built). `None` when `text` is not a JSON object.
pub(crate) fn object_members(text: &str) -> Option<Vec<(Cow<'_, str>, &RawValue)>> {
    use serde::de::{Deserializer as _, MapAccess, Visitor};

    struct Members;
    impl<'de> Visitor<'de> for Members {
        type Value = Vec<(Cow<'de, str>, &'de RawValue)>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut members = Vec::new();
            while let Some(Key(k)) = map.next_key()? {
                members.push((k, map.next_value()?));
            }
            Ok(members)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let members = de.deserialize_map(Members).ok()?;
    de.end().ok()?;
    Some(members)
}

/// The byte range of `part` in `text`, when `part` is a slice of `text` (a [`RawValue`] borrowed from it).
pub(crate) fn span_in(text: &str, part: &str) -> Option<std::ops::Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    let end = start.checked_add(part.len())?;
    (end <= text.len()).then_some(start..end)
}

/// Body of a facilitator's `/verify` and `/settle` requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct FacilitatorRequest {
    /// 1 or 2.
    pub x402_version: u8,
    /// The payload as the client sent it (decoded JSON).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub payment_payload: Value,
    /// The matched requirements, in the payload's version.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub payment_requirements: Value,
}

/// A facilitator's `/verify` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct VerifyResponse {
    /// Whether the payment is valid.
    pub is_valid: bool,
    /// Spec error string when invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_reason: Option<String>,
    /// Detail when invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_message: Option<String>,
    /// Payer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
}

/// One kind a facilitator supports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SupportedKind {
    /// 1 or 2.
    pub x402_version: u8,
    /// `"exact"`.
    pub scheme: String,
    /// Network (v1 name or CAIP-2).
    pub network: String,
    /// Scheme-specific.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
}

/// A facilitator's `/supported` answer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SupportedResponse {
    /// Supported kinds.
    pub kinds: Vec<SupportedKind>,
    /// Extensions.
    #[serde(default)]
    pub extensions: Vec<Value>,
    /// Signer addresses by CAIP-2 pattern.
    #[serde(default)]
    pub signers: serde_json::Map<String, Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contains_sees_a_first_key_without_reading_and_any_key_by_reading() {
        let ext = |t: &str| serde_json::from_str::<RawExtensions>(t).unwrap();
        let key = "offer-receipt";
        // First member, as serde_json writes it: seen at once.
        assert!(ext(r#"{"offer-receipt":{"a":1}}"#).starts_with_key(key));
        assert!(ext(r#"{"offer-receipt":{"a":1}}"#).contains(key));
        // Elsewhere, spaced or escaped: found by reading the members.
        for t in [
            r#"{"bazaar":1,"offer-receipt":2}"#,
            r#"{ "offer-receipt": 2}"#,
            r#"{"offer\u002dreceipt":2}"#,
        ] {
            assert!(!ext(t).starts_with_key(key), "{t}");
            assert!(ext(t).contains(key), "{t}");
        }
        // A longer key, a key inside a value, no members: absent.
        for t in [
            r#"{"offer-receipts":1}"#,
            r#"{"offer-receipt-x":{"offer-receipt":1}}"#,
            r#"{"bazaar":"{\"offer-receipt\":1}"}"#,
            "{}",
        ] {
            assert!(!ext(t).contains(key), "{t}");
        }
        // A key that would need escaping is never matched by its raw text.
        assert!(!ext(r#"{"a\"":1}"#).starts_with_key("a\""));
        assert!(ext(r#"{"a\"":1}"#).contains("a\""));
    }

    #[test]
    fn v2_example_from_spec_parses_and_compares_semantically() {
        let json = r#"{"x402Version":2,"payload":{"authorization":{"from":"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","to":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","value":"10000","validAfter":"0","validBefore":"1795276652","nonce":"0xc973d34e26636a2c9af04857a90d9a5b2ea68a001c42e8a9d9608a975a87ff45"},"signature":"0xe3c2"},"resource":{"url":"http://127.0.0.1:4022/weather","description":"probe","mimeType":"application/json"},"accepted":{"scheme":"exact","network":"eip155:84532","amount":"10000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":300,"extra":{"name":"USDC","version":"2"}}}"#;
        let p: PaymentPayloadV2 = serde_json::from_str(json).unwrap();
        let reordered = r#"{"extra":{"version":"2","name":"USDC"},"maxTimeoutSeconds":300,"payTo":"0x209693bc6afc0c5328ba36faf03c514ef312287c","asset":"0x036CBD53842C5426634E7929541EC2318F3DCF7E","amount":"0010000","network":"eip155:84532","scheme":"exact"}"#;
        let r: PaymentRequirementsV2 = serde_json::from_str(reordered).unwrap();
        assert_eq!(p.accepted, r);
        // Written back checksummed, amounts as decimal strings.
        let out = serde_json::to_value(&r).unwrap();
        assert_eq!(out["payTo"], "0x209693Bc6afc0C5328bA36FaF03C514EF312287C");
        assert_eq!(out["amount"], "10000");
    }

    #[test]
    fn strict_strings() {
        assert!(wire::parse_decimal("0x10").is_none());
        assert!(wire::parse_decimal("-1").is_none());
        assert!(wire::parse_decimal(&"1".repeat(79)).is_none());
        assert!(wire::parse_address("0x1234").is_none());
        assert!(wire::parse_b256("0x00").is_none());
    }
}
