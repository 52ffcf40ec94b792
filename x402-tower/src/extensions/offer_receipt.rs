//! The `offer-receipt` extension (x402 v2 and v1, `specs/extensions/extension-offer-and-receipt.md`): the
//! server signs each offer of its 402 and a receipt of every successful settlement, so a buyer (or anyone
//! it shows them to) can prove offline what was offered and that it paid, without trusting a database.
//!
//! This module knows nothing of Tower. The wire types ([`SignedOffer`], [`SignedReceipt`] and their
//! payloads) and the checks ([`SignedOffer::signer`], [`SignedReceipt::verify`]) are always available; the
//! issuer
#![cfg_attr(feature = "offer-receipt", doc = "[`OfferReceipt`]")]
#![cfg_attr(not(feature = "offer-receipt"), doc = "`OfferReceipt`")]
//! (feature `offer-receipt`) signs with any local alloy signer and is wired into the layer with
#![cfg_attr(
    feature = "offer-receipt",
    doc = "[`X402Config::offer_receipt`](crate::X402Config::offer_receipt)."
)]
#![cfg_attr(not(feature = "offer-receipt"), doc = "`X402Config::offer_receipt`.")]
//!
//! Only the EIP-712 form is produced (the JWS form is optional in the extension). The domain is
//! `{name: "x402 offer" | "x402 receipt", version: "1", chainId: 1}` with no verifying contract, and the
//! types are, exactly:
//!
//! ```text
//! Offer(uint256 version,string resourceUrl,string scheme,string network,string asset,string payTo,string amount,uint256 validUntil)
//! Receipt(uint256 version,string network,string resourceUrl,string payer,uint256 issuedAt,string transaction)
//! ```
//!
//! An absent `validUntil` is signed as `0` and an absent `transaction` as `""` (receipts leave the
//! transaction out unless
#![cfg_attr(
    feature = "offer-receipt",
    doc = "[`OfferReceipt::include_transaction`]"
)]
#![cfg_attr(
    not(feature = "offer-receipt"),
    doc = "`OfferReceipt::include_transaction`"
)]
//! is set: privacy by default).
//!
//! # One receipt per payment
//!
//! The layer's payment engine signs the receipt before it records the settlement, so a resend of the same
//! payment (a lost answer, another instance sharing the store) answers the receipt of the first delivery,
//! and a settlement found by reconciling a pending payment on a resend is signed before it is recorded too.
//! A settlement recorded without a receipt (by the background reconciler, which serves no route, or before
//! a signer was configured) is signed when it is delivered, with `issuedAt` the time its record was
//! written: signatures are deterministic (RFC 6979), so every delivery, from every instance with the same
//! key, answers the same receipt.
//!
//! # Checking a receipt as a third party
//!
//! ```
//! use x402_tower::extensions::offer_receipt::{ReceiptCheck, SignedReceipt};
//! # fn check(receipt_json: &str, published: alloy_primitives::Address) -> Result<(), Box<dyn std::error::Error>> {
//! let receipt: SignedReceipt = serde_json::from_str(receipt_json)?;
//! receipt.verify(&ReceiptCheck {
//!     signer: published,                                       // the server's published key address
//!     resource_url: Some("https://news.example/x402Article?articleId=a1"),
//!     payer: None,                                             // or Some(the buyer's address)
//! })?;
//! # Ok(()) }
//! ```

use alloy_primitives::{Address, B256, Signature, U256};
use alloy_sol_types::Eip712Domain;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::proto::SettleResponse;
use crate::verify::{TypeHash, eip712_digest};

/// The extension's key in `extensions`.
pub const KEY: &str = "offer-receipt";
/// The payload version this module signs and understands.
pub const VERSION: u64 = 1;
/// The only signature format produced.
pub const FORMAT_EIP712: &str = "eip712";

mod typed {
    alloy_sol_types::sol! {
        /// The signed offer (EIP-712 primary type `Offer`).
        struct Offer {
            uint256 version;
            string resourceUrl;
            string scheme;
            string network;
            string asset;
            string payTo;
            string amount;
            uint256 validUntil;
        }
        /// The signed receipt (EIP-712 primary type `Receipt`).
        struct Receipt {
            uint256 version;
            string network;
            string resourceUrl;
            string payer;
            uint256 issuedAt;
            string transaction;
        }
    }
}

fn domain(name: &'static str) -> Eip712Domain {
    Eip712Domain::new(
        Some(name.into()),
        Some("1".into()),
        Some(U256::from(1u64)),
        None,
        None,
    )
}

/// The separators of the two domains (version 1, chain id 1), each hashed once per process: a separator
/// is four Keccak hashes and a type string built at run time, the same for every offer and receipt.
static OFFER_DOMAIN: std::sync::LazyLock<B256> =
    std::sync::LazyLock::new(|| domain("x402 offer").separator());
static RECEIPT_DOMAIN: std::sync::LazyLock<B256> =
    std::sync::LazyLock::new(|| domain("x402 receipt").separator());

/// What an offer commits to (`payload` of an EIP-712 signed offer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct OfferPayload {
    /// Payload version (1).
    pub version: u64,
    /// The absolute URL sold.
    pub resource_url: String,
    /// `exact`.
    pub scheme: String,
    /// CAIP-2 network (`eip155:8453`), whatever version the 402 speaks.
    pub network: String,
    /// Token contract, as in the matching `accepts` entry.
    pub asset: String,
    /// Recipient, as in the matching `accepts` entry.
    pub pay_to: String,
    /// Atomic units, base 10.
    pub amount: String,
    /// Unix seconds after which the server may refuse the offer (`0`/absent: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<u64>,
}

impl OfferPayload {
    /// The EIP-712 hash the signature covers.
    pub fn signing_hash(&self) -> B256 {
        static TYPE_HASH: TypeHash<typed::Offer> = TypeHash::new();
        eip712_digest(&OFFER_DOMAIN, TYPE_HASH.hash_struct(&self.typed()))
    }

    /// The EIP-712 struct the signature covers.
    fn typed(&self) -> typed::Offer {
        typed::Offer {
            version: U256::from(self.version),
            resourceUrl: self.resource_url.clone(),
            scheme: self.scheme.clone(),
            network: self.network.clone(),
            asset: self.asset.clone(),
            payTo: self.pay_to.clone(),
            amount: self.amount.clone(),
            validUntil: U256::from(self.valid_until.unwrap_or(0)),
        }
    }
}

/// What a receipt attests (`payload` of an EIP-712 signed receipt).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ReceiptPayload {
    /// Payload version (1).
    pub version: u64,
    /// CAIP-2 network the payment settled on.
    pub network: String,
    /// The absolute URL paid for.
    pub resource_url: String,
    /// The payer's address (checksummed).
    pub payer: String,
    /// Unix seconds when the receipt was signed.
    pub issued_at: u64,
    /// The settlement transaction, or `""` when the server keeps it private (the default).
    #[serde(default)]
    pub transaction: String,
}

impl ReceiptPayload {
    /// The EIP-712 hash the signature covers.
    pub fn signing_hash(&self) -> B256 {
        static TYPE_HASH: TypeHash<typed::Receipt> = TypeHash::new();
        // `encodeData` written here rather than by alloy (`typed()`, tested equal): one is signed per
        // purchase, and this copies none of its four strings and does not hash the empty `transaction`
        // (the default) again.
        let string = |s: &str| {
            if s.is_empty() {
                alloy_primitives::KECCAK256_EMPTY
            } else {
                alloy_primitives::keccak256(s)
            }
        };
        let mut data = [0u8; 7 * 32];
        let words = [
            *TYPE_HASH.get(),
            U256::from(self.version).into(),
            string(&self.network),
            string(&self.resource_url),
            string(&self.payer),
            U256::from(self.issued_at).into(),
            string(&self.transaction),
        ];
        for (at, word) in data.chunks_exact_mut(32).zip(words) {
            at.copy_from_slice(word.as_slice());
        }
        eip712_digest(&RECEIPT_DOMAIN, alloy_primitives::keccak256(data))
    }

    /// The EIP-712 struct the signature covers (what [`Self::signing_hash`] encodes by hand).
    #[cfg(test)]
    fn typed(&self) -> typed::Receipt {
        typed::Receipt {
            version: U256::from(self.version),
            network: self.network.clone(),
            resourceUrl: self.resource_url.clone(),
            payer: self.payer.clone(),
            issuedAt: U256::from(self.issued_at),
            transaction: self.transaction.clone(),
        }
    }
}

/// A signed offer as it travels in `extensions["offer-receipt"].info.offers[]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SignedOffer {
    /// `eip712`.
    pub format: String,
    /// Index of the `accepts` entry it signs (a hint, not signed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accept_index: Option<usize>,
    /// The signed fields.
    pub payload: OfferPayload,
    /// 65 bytes `r ‖ s ‖ v`, `0x`-hex.
    pub signature: String,
}

/// A signed receipt as it travels in `PAYMENT-RESPONSE`'s `extensions["offer-receipt"].info.receipt`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SignedReceipt {
    /// `eip712`.
    pub format: String,
    /// The signed fields.
    pub payload: ReceiptPayload,
    /// 65 bytes `r ‖ s ‖ v`, `0x`-hex.
    pub signature: String,
}

/// Why a signed offer or receipt does not check out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProofError {
    /// Another format than `eip712` (JWS is not read).
    #[error("unsupported format {0:?} (only eip712 is read)")]
    Format(String),
    /// Another payload version than 1.
    #[error("unsupported payload version {0}")]
    Version(u64),
    /// The signature is not 65 bytes of hex or recovers no key.
    #[error("malformed signature")]
    Signature,
    /// The signature was made by another key.
    #[error("signed by {found}, expected {expected}")]
    WrongSigner {
        /// The key that signed.
        found: Address,
        /// The key that should have.
        expected: Address,
    },
    /// The receipt is for another resource.
    #[error("the receipt is for {0:?}")]
    WrongResource(String),
    /// The receipt names another payer.
    #[error("the receipt names payer {0:?}")]
    WrongPayer(String),
}

fn recover(format: &str, version: u64, hash: B256, signature: &str) -> Result<Address, ProofError> {
    if format != FORMAT_EIP712 {
        return Err(ProofError::Format(format.to_owned()));
    }
    if version != VERSION {
        return Err(ProofError::Version(version));
    }
    let hex = signature.strip_prefix("0x").unwrap_or(signature);
    if hex.len() != 130 {
        return Err(ProofError::Signature);
    }
    let bytes = alloy_primitives::hex::decode(hex).map_err(|_| ProofError::Signature)?;
    let sig = Signature::try_from(bytes.as_slice()).map_err(|_| ProofError::Signature)?;
    sig.recover_address_from_prehash(&hash)
        .map_err(|_| ProofError::Signature)
}

impl SignedOffer {
    /// The address that signed this offer (check it against the server's published key, or `payTo`).
    pub fn signer(&self) -> Result<Address, ProofError> {
        recover(
            &self.format,
            self.payload.version,
            self.payload.signing_hash(),
            &self.signature,
        )
    }
}

/// What a [`SignedReceipt`] must show to be accepted.
#[derive(Debug, Clone, Copy)]
pub struct ReceiptCheck<'a> {
    /// The server's published signing address.
    pub signer: Address,
    /// The resource the receipt must be for, if known.
    pub resource_url: Option<&'a str>,
    /// The payer it must name, if known.
    pub payer: Option<Address>,
}

impl SignedReceipt {
    /// The address that signed this receipt.
    pub fn signer(&self) -> Result<Address, ProofError> {
        recover(
            &self.format,
            self.payload.version,
            self.payload.signing_hash(),
            &self.signature,
        )
    }

    /// Checks the signature against the expected signer, and the resource and payer when given.
    pub fn verify(&self, check: &ReceiptCheck<'_>) -> Result<(), ProofError> {
        let found = self.signer()?;
        if found != check.signer {
            return Err(ProofError::WrongSigner {
                found,
                expected: check.signer,
            });
        }
        if let Some(url) = check.resource_url
            && url != self.payload.resource_url
        {
            return Err(ProofError::WrongResource(self.payload.resource_url.clone()));
        }
        if let Some(payer) = check.payer
            && self.payload.payer.parse::<Address>().ok() != Some(payer)
        {
            return Err(ProofError::WrongPayer(self.payload.payer.clone()));
        }
        Ok(())
    }

    /// The signed receipt carried by a settlement answer (`PAYMENT-RESPONSE` decoded), if any.
    pub fn from_settlement(settlement: &SettleResponse) -> Option<Self> {
        serde_json::from_str(Self::text_in(settlement)?.get()).ok()
    }

    /// The signed receipt carried by a settlement answer as the JSON text it travels as
    /// (`extensions["offer-receipt"].info.receipt`), borrowed from the settlement: the text a buyer got in
    /// `PAYMENT-RESPONSE`, to store or to send again without reading it into a [`SignedReceipt`] and
    /// writing it out. The entry is found with [`RawExtensions::raw`](crate::proto::RawExtensions::raw)
    /// (the last one if the key repeats); `None` when there is none, or when it has no `info.receipt`.
    ///
    /// ```
    /// use x402_tower::extensions::offer_receipt::SignedReceipt;
    /// use x402_tower::proto::SettleResponse;
    ///
    /// let settlement: SettleResponse = serde_json::from_str(
    ///     r#"{"success": true, "transaction": "verify-only", "network": "eip155:8453",
    ///         "extensions": {"bazaar": {}, "offer-receipt": {"info": {"receipt": {"format": "eip712"}},
    ///                                                         "schema": {"type": "object"}}}}"#,
    /// ).unwrap();
    /// assert_eq!(SignedReceipt::text_in(&settlement).unwrap().get(), r#"{"format": "eip712"}"#);
    /// ```
    pub fn text_in(settlement: &SettleResponse) -> Option<&serde_json::value::RawValue> {
        #[derive(Deserialize)]
        struct Entry<'a> {
            #[serde(borrow)]
            info: Info<'a>,
        }
        #[derive(Deserialize)]
        struct Info<'a> {
            #[serde(borrow)]
            receipt: &'a serde_json::value::RawValue,
        }
        /// Extensions of this one entry alone, as [`OfferReceipt`] writes a settlement's: read in one pass.
        /// Any other key, or this one twice, fails, and the general path below answers.
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Only<'a> {
            #[serde(rename = "offer-receipt", borrow)]
            entry: Entry<'a>,
        }
        let extensions = settlement.extensions.as_ref()?;
        if let Ok(only) = serde_json::from_str::<Only<'_>>(extensions.as_str()) {
            return Some(only.entry.info.receipt);
        }
        let entry = extensions.raw(KEY)?;
        serde_json::from_str::<Entry<'_>>(entry.get())
            .ok()
            .map(|e| e.info.receipt)
    }
}

/// The signed offers a 402 declares (`extensions["offer-receipt"].info.offers`), those that parse.
pub fn offers_of(extensions: &serde_json::Map<String, Value>) -> Vec<SignedOffer> {
    extensions
        .get(KEY)
        .and_then(|e| e.pointer("/info/offers"))
        .and_then(Value::as_array)
        .map(|offers| {
            offers
                .iter()
                .take(64)
                .filter_map(|o| serde_json::from_value(o.clone()).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The extension's `schema` in a settlement answer.
#[cfg(feature = "offer-receipt")]
fn receipt_schema() -> &'static serde_json::value::RawValue {
    static SCHEMA: std::sync::LazyLock<Box<serde_json::value::RawValue>> =
        std::sync::LazyLock::new(|| {
            serde_json::value::to_raw_value(&receipt_schema_value())
                .unwrap_or_else(|_| unreachable!("a JSON value is written out"))
        });
    &SCHEMA
}

/// `extensions["offer-receipt"]` of a settlement answer, as it is written.
#[cfg(feature = "offer-receipt")]
#[derive(Serialize)]
struct ReceiptEntry<'a> {
    info: ReceiptInfo<'a>,
    schema: &'a serde_json::value::RawValue,
}

#[cfg(feature = "offer-receipt")]
#[derive(Serialize)]
struct ReceiptInfo<'a> {
    receipt: &'a SignedReceipt,
}

/// Settlement extensions holding only the signed receipt.
#[cfg(feature = "offer-receipt")]
#[derive(Serialize)]
struct OnlyReceipt<'a> {
    #[serde(rename = "offer-receipt")]
    entry: ReceiptEntry<'a>,
}

#[cfg(feature = "offer-receipt")]
fn receipt_schema_value() -> Value {
    serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"receipt": {"type": "object", "properties": {
            "format": {"type": "string"},
            "payload": {"type": "object", "properties": {
                "version": {"type": "integer"}, "network": {"type": "string"},
                "resourceUrl": {"type": "string"}, "payer": {"type": "string"},
                "issuedAt": {"type": "integer"}, "transaction": {"type": "string"}
            }, "required": ["version", "network", "resourceUrl", "payer", "issuedAt"]},
            "signature": {"type": "string"}
        }, "required": ["format", "signature"]}},
        "required": ["receipt"]
    })
}

#[cfg(feature = "offer-receipt")]
#[cfg_attr(docsrs, doc(cfg(feature = "offer-receipt")))]
pub use issuer::{InvalidKey, IssueError, OfferReceipt};

/// Signs every offer of a 402 and the receipt of every successful settlement.
#[cfg(feature = "offer-receipt")]
#[cfg_attr(docsrs, doc(cfg(feature = "offer-receipt")))]
impl crate::extensions::Extension for OfferReceipt {
    fn key(&self) -> &str {
        KEY
    }

    fn declare(
        &self,
        offered: &crate::extensions::Offered<'_>,
    ) -> Option<crate::extensions::Declaration> {
        let (json, until) = self.declare(offered.resource_url, offered.offers, offered.now)?;
        Some(crate::extensions::Declaration::until(json, until))
    }

    /// The signed receipt is added to the settlement before the engine records it, so a redelivery answers
    /// the same receipt. A recorded settlement without one (recorded by the background reconciler, or
    /// before a signer was configured) is signed as of its record's time: the same receipt on every
    /// delivery, from any instance with this key.
    fn on_settled(
        &self,
        settlement: &mut SettleResponse,
        resource_url: &str,
        settled: crate::extensions::Settled,
    ) {
        use crate::extensions::Settled;
        match settled {
            Settled::Now(now) => self.enrich(settlement, resource_url, now),
            Settled::Recorded(at) => {
                if !settlement
                    .extensions
                    .as_ref()
                    .is_some_and(|e| e.contains(KEY))
                {
                    self.enrich(settlement, resource_url, at);
                }
            }
        }
    }
}

#[cfg(feature = "offer-receipt")]
mod issuer {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    use alloy_primitives::Address;
    use alloy_signer::SignerSync;
    use serde_json::json;

    use super::*;
    use crate::scheme::CompiledOffer;

    /// The signed offers of one resource and offer list, serialised, and when to sign them anew.
    struct SignedEntry {
        /// The `accepts` entries' JSON.
        keys: Vec<Arc<str>>,
        text: Arc<str>,
        until: u64,
    }

    /// Resources whose signed offers are kept; past it the cache starts over.
    const CACHED_RESOURCES: usize = 4096;

    /// Why signing failed (the signer's own error, e.g. a hardware key unplugged).
    #[derive(Debug, thiserror::Error)]
    #[error("signing failed: {0}")]
    pub struct IssueError(#[source] pub alloy_signer::Error);

    /// Signs offers and receipts with an operator's key (any local alloy signer: `PrivateKeySigner`, a
    /// Ledger through a sync wrapper...). Clone-cheap behind `Arc`; give it to
    /// [`X402Config::offer_receipt`](crate::X402Config::offer_receipt).
    ///
    /// ```
    /// use alloy_signer_local::PrivateKeySigner;
    /// use x402_tower::extensions::offer_receipt::OfferReceipt;
    ///
    /// let key = PrivateKeySigner::random();
    /// let issuer = OfferReceipt::new(key).offer_validity_seconds(120);
    /// println!("receipts are signed by {}", issuer.address());
    /// ```
    pub struct OfferReceipt {
        signer: Key,
        address: Address,
        include_transaction: bool,
        offer_validity: Option<u64>,
        /// Signed offers by resource URL.
        cache: Mutex<HashMap<String, Vec<SignedEntry>>>,
    }

    impl std::fmt::Debug for OfferReceipt {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("OfferReceipt")
                .field("address", &self.address)
                .field("include_transaction", &self.include_transaction)
                .field("offer_validity", &self.offer_validity)
                .finish_non_exhaustive()
        }
    }

    /// How signatures are made.
    enum Key {
        /// Any alloy signer.
        Alloy(Box<dyn SignerSync + Send + Sync>),
        /// A private key, signed with libsecp256k1.
        Secret(crate::secp::SecretSigner),
    }

    /// The private key given to [`OfferReceipt::from_secret`] is not a secp256k1 scalar.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
    #[error("not a secp256k1 private key")]
    pub struct InvalidKey;

    impl OfferReceipt {
        /// Signs with `signer` (its address is what buyers check signatures against: publish it).
        pub fn new<S>(signer: S) -> Self
        where
            S: SignerSync + alloy_signer::Signer + Send + Sync + 'static,
        {
            let address = alloy_signer::Signer::address(&signer);
            Self::with_key(Key::Alloy(Box::new(signer)), address)
        }

        /// Signs with a private key through libsecp256k1 (35 µs a signature against 88 µs for alloy's local
        /// signer, which uses k256; BENCHMARKS.md): a receipt is signed on every purchase.
        pub fn from_secret(secret: B256) -> Result<Self, InvalidKey> {
            let key = crate::secp::SecretSigner::new(secret).ok_or(InvalidKey)?;
            let address = key.address();
            Ok(Self::with_key(Key::Secret(key), address))
        }

        fn with_key(signer: Key, address: Address) -> Self {
            OfferReceipt {
                signer,
                address,
                include_transaction: false,
                offer_validity: None,
                cache: Mutex::new(HashMap::new()),
            }
        }

        /// Puts the settlement transaction in receipts (default: `""`, so a receipt shown to a third party
        /// does not lead to the payer's other transactions).
        pub fn include_transaction(mut self, include: bool) -> Self {
            self.include_transaction = include;
            self
        }

        /// How long a signed offer stays valid (`validUntil - now` when signed). Default: the offer's
        /// `maxTimeoutSeconds`, as the official server does. A 402 reuses a signed offer while at least half
        /// of this is left, so a 402 rarely costs a signature.
        pub fn offer_validity_seconds(mut self, seconds: u64) -> Self {
            self.offer_validity = Some(seconds.max(2));
            self
        }

        /// The address signatures recover to.
        pub fn address(&self) -> Address {
            self.address
        }

        fn sign(&self, hash: B256) -> Result<String, IssueError> {
            let bytes: [u8; 65] = match &self.signer {
                Key::Alloy(signer) => signer.sign_hash_sync(&hash).map_err(IssueError)?.as_bytes(),
                Key::Secret(key) => key.sign(&hash).as_bytes(),
            };
            Ok(format!("0x{}", alloy_primitives::hex::encode(bytes)))
        }

        /// Signs `payload` as an offer.
        pub fn sign_offer(&self, payload: OfferPayload) -> Result<SignedOffer, IssueError> {
            let signature = self.sign(payload.signing_hash())?;
            Ok(SignedOffer {
                format: FORMAT_EIP712.to_owned(),
                accept_index: None,
                payload,
                signature,
            })
        }

        /// Signs a receipt for `payer` having paid `resource_url` on `network` (CAIP-2) at `issued_at`; the
        /// transaction is kept only with [`OfferReceipt::include_transaction`].
        pub fn sign_receipt(
            &self,
            resource_url: &str,
            payer: &str,
            network: &str,
            transaction: &str,
            issued_at: u64,
        ) -> Result<SignedReceipt, IssueError> {
            let payload = ReceiptPayload {
                version: VERSION,
                network: network.to_owned(),
                resource_url: resource_url.to_owned(),
                payer: payer.to_owned(),
                issued_at,
                transaction: if self.include_transaction {
                    transaction.to_owned()
                } else {
                    String::new()
                },
            };
            let signature = self.sign(payload.signing_hash())?;
            Ok(SignedReceipt {
                format: FORMAT_EIP712.to_owned(),
                payload,
                signature,
            })
        }

        /// The 402's `extensions["offer-receipt"]`, serialised: one signed offer per `accepts` entry; and
        /// the unix time until which it may be sent again (`None` when nothing could be signed). Kept per
        /// resource and offer list while half the validity is left; signed outside the lock.
        pub(crate) fn declare(
            &self,
            resource_url: &str,
            offers: &[CompiledOffer],
            now: u64,
        ) -> Option<(Arc<str>, u64)> {
            let same = |e: &SignedEntry| {
                now < e.until
                    && e.keys.len() == offers.len()
                    && e.keys
                        .iter()
                        .zip(offers)
                        .all(|(k, o)| Arc::ptr_eq(k, &o.v2_json) || **k == *o.v2_json)
            };
            let lock = || self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(e) = lock()
                .get(resource_url)
                .and_then(|l| l.iter().find(|e| same(e)))
            {
                return Some((e.text.clone(), e.until));
            }
            let mut signed = Vec::with_capacity(offers.len());
            let mut validity = u64::MAX;
            for (index, o) in offers.iter().enumerate() {
                let valid_for = self.offer_validity.unwrap_or(o.v2.max_timeout_seconds);
                validity = validity.min(valid_for);
                let payload = OfferPayload {
                    version: VERSION,
                    resource_url: resource_url.to_owned(),
                    scheme: o.v2.scheme.clone(),
                    network: o.v2.network.clone(),
                    asset: o.v2.asset.to_checksum(None),
                    pay_to: o.v2.pay_to.to_checksum(None),
                    amount: o.v2.amount.to_string(),
                    valid_until: Some(now + valid_for),
                };
                match self.sign_offer(payload) {
                    Ok(mut offer) => {
                        offer.accept_index = Some(index);
                        signed.push(offer);
                    }
                    Err(e) => tracing::error!(error = %e, "could not sign an x402 offer"),
                }
            }
            if signed.is_empty() {
                return None;
            }
            // No `schema`: see "What a 402 declares" in the extensions module.
            let text: Arc<str> = json!({"info": {"offers": signed}}).to_string().into();
            let until = now + validity / 2;
            let mut cache = lock();
            if cache.len() >= CACHED_RESOURCES && !cache.contains_key(resource_url) {
                cache.clear();
            }
            let entries = cache.entry(resource_url.to_owned()).or_default();
            entries.retain(|e| now < e.until);
            if entries.len() < 8 {
                entries.push(SignedEntry {
                    keys: offers.iter().map(|o| o.v2_json.clone()).collect(),
                    text: text.clone(),
                    until,
                });
            }
            Some((text, until))
        }

        /// Adds the signed receipt of a successful settlement of `resource_url` to its `extensions`.
        pub(crate) fn enrich(&self, settlement: &mut SettleResponse, resource_url: &str, now: u64) {
            if !settlement.success {
                return;
            }
            let Some(payer) = settlement.payer.as_deref() else {
                return;
            };
            let network = settlement
                .network
                .parse::<crate::network::Network>()
                .map(|n| n.caip2().to_owned())
                .unwrap_or_else(|_| settlement.network.clone());
            match self.sign_receipt(resource_url, payer, &network, &settlement.transaction, now) {
                Ok(receipt) => {
                    let entry = ReceiptEntry {
                        info: ReceiptInfo { receipt: &receipt },
                        schema: receipt_schema(),
                    };
                    // Usually the settlement's only extension: written out once. Beside others, merged.
                    let written = match &settlement.extensions {
                        None => serde_json::value::to_raw_value(&OnlyReceipt { entry })
                            .map(crate::proto::RawExtensions::from_object),
                        Some(e) => serde_json::to_string(&entry).and_then(|t| e.with(KEY, &t)),
                    };
                    match written {
                        Ok(extensions) => settlement.extensions = Some(extensions),
                        Err(e) => tracing::error!(error = %e, "could not write an x402 receipt"),
                    }
                }
                Err(e) => tracing::error!(error = %e, "could not sign an x402 receipt"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_sol_types::SolStruct;

    fn offer() -> OfferPayload {
        OfferPayload {
            version: 1,
            resource_url: "https://api.example.com/premium-data".into(),
            scheme: "exact".into(),
            network: "eip155:8453".into(),
            asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913".into(),
            pay_to: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into(),
            amount: "10000".into(),
            valid_until: Some(1_703_123_756),
        }
    }

    #[test]
    fn type_strings_are_the_extensions() {
        assert_eq!(
            typed::Offer::eip712_encode_type(),
            "Offer(uint256 version,string resourceUrl,string scheme,string network,string asset,string payTo,string amount,uint256 validUntil)"
        );
        assert_eq!(
            typed::Receipt::eip712_encode_type(),
            "Receipt(uint256 version,string network,string resourceUrl,string payer,uint256 issuedAt,string transaction)"
        );
        // Absent fields are signed as 0 / "".
        let mut o = offer();
        let with_zero = OfferPayload {
            valid_until: Some(0),
            ..o.clone()
        };
        o.valid_until = None;
        assert_eq!(o.signing_hash(), with_zero.signing_hash());
    }

    #[test]
    fn signing_hashes_are_alloys_under_the_cached_separators() {
        let o = offer();
        assert_eq!(
            o.signing_hash(),
            o.typed().eip712_signing_hash(&domain("x402 offer"))
        );
        // The receipt's encodeData is written by hand: alloy's for every shape of field (empty strings,
        // a URL longer than Keccak's 136-byte block, non-ASCII text, the largest numbers).
        let base = ReceiptPayload {
            version: 1,
            network: "eip155:8453".into(),
            resource_url: o.resource_url.clone(),
            payer: "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266".into(),
            issued_at: 1_703_123_456,
            transaction: String::new(),
        };
        let receipts = [
            base.clone(),
            ReceiptPayload {
                transaction: format!("0x{}", "ab".repeat(32)),
                ..base.clone()
            },
            ReceiptPayload {
                version: u64::MAX,
                network: String::new(),
                resource_url: format!("https://example.com/{}?q=é€", "a".repeat(300)),
                payer: String::new(),
                issued_at: u64::MAX,
                transaction: "x".into(),
            },
            ReceiptPayload {
                version: 0,
                issued_at: 0,
                resource_url: String::new(),
                ..base
            },
        ];
        for r in receipts {
            assert_eq!(
                r.signing_hash(),
                r.typed().eip712_signing_hash(&domain("x402 receipt")),
                "{r:?}"
            );
        }
        assert_ne!(*OFFER_DOMAIN, *RECEIPT_DOMAIN);
    }

    #[test]
    fn the_receipt_text_is_found_whatever_else_the_extensions_hold() {
        let receipt_in = |extensions: &str| {
            let settlement: SettleResponse = serde_json::from_str(&format!(
                r#"{{"success": true, "transaction": "0x01", "network": "eip155:8453", "extensions": {extensions}}}"#
            ))
            .unwrap();
            SignedReceipt::text_in(&settlement).map(|r| r.get().to_owned())
        };
        let entry = |r: &str| format!(r#"{{"info": {{"receipt": {r}}}, "schema": {{}}}}"#);
        // The entry alone (as this crate writes it): one pass.
        assert_eq!(
            receipt_in(&format!(r#"{{"offer-receipt": {}}}"#, entry("[1]"))).as_deref(),
            Some("[1]")
        );
        // The key written with an escape is the same key.
        assert_eq!(
            receipt_in(&format!(r#"{{"offer\u002dreceipt": {}}}"#, entry("[1]"))).as_deref(),
            Some("[1]")
        );
        // Beside other entries, before or after them.
        assert_eq!(
            receipt_in(&format!(
                r#"{{"bazaar": {{}}, "offer-receipt": {}}}"#,
                entry("[2]")
            ))
            .as_deref(),
            Some("[2]")
        );
        assert_eq!(
            receipt_in(&format!(
                r#"{{"offer-receipt": {}, "bazaar": {{}}}}"#,
                entry("[3]")
            ))
            .as_deref(),
            Some("[3]")
        );
        // Twice: the last one, as `RawExtensions::raw` finds it.
        assert_eq!(
            receipt_in(&format!(
                r#"{{"offer-receipt": {}, "offer-receipt": {}}}"#,
                entry("[4]"),
                entry("[5]")
            ))
            .as_deref(),
            Some("[5]")
        );
        // No receipt in the entry, or no entry.
        assert_eq!(receipt_in(r#"{"offer-receipt": {"info": {}}}"#), None);
        assert_eq!(receipt_in(r#"{"offer-receipt": 7}"#), None);
        assert_eq!(receipt_in(r#"{"bazaar": {}}"#), None);
        assert_eq!(receipt_in("{}"), None);
    }

    #[test]
    fn refusals() {
        let o = SignedOffer {
            format: "jws".into(),
            accept_index: None,
            payload: offer(),
            signature: "0x00".into(),
        };
        assert_eq!(o.signer(), Err(ProofError::Format("jws".into())));
        let o = SignedOffer {
            format: "eip712".into(),
            ..o
        };
        assert_eq!(o.signer(), Err(ProofError::Signature));
        let mut v2 = o.clone();
        v2.payload.version = 2;
        assert_eq!(v2.signer(), Err(ProofError::Version(2)));
        let junk = SignedOffer {
            signature: format!("0x{}", "zz".repeat(65)),
            ..o
        };
        assert_eq!(junk.signer(), Err(ProofError::Signature));
    }

    fn settled(extensions: Option<&str>) -> SettleResponse {
        SettleResponse {
            success: true,
            error_reason: None,
            error_message: None,
            transaction: "verify-only".into(),
            network: "eip155:8453".into(),
            payer: Some("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266".into()),
            extensions: extensions.map(|e| serde_json::from_str(e).unwrap()),
            amount: None,
        }
    }

    #[test]
    fn the_receipt_text_is_found_last_entry_first() {
        let text =
            |e: Option<&str>| SignedReceipt::text_in(&settled(e)).map(|r| r.get().to_owned());
        assert_eq!(text(None), None);
        assert_eq!(text(Some("{}")), None);
        assert_eq!(text(Some(r#"{"bazaar": {"info": 1}}"#)), None);
        assert_eq!(
            text(Some(
                r#"{"offer-receipt": {"info": {"receipt": {"a": 1}}, "schema": {}}}"#
            )),
            Some(r#"{"a": 1}"#.into())
        );
        // Another extension before it, a key written with an escape, a repeated key (the last one).
        assert_eq!(
            text(Some(
                r#"{"bazaar": [1, {"x": "}"}], "offer\u002dreceipt": {"info": {"receipt": 1}},
                   "offer-receipt": {"schema": {}, "info": {"other": 0, "receipt": [2]}}}"#
            )),
            Some("[2]".into())
        );
        // An entry that holds no receipt.
        assert_eq!(text(Some(r#"{"offer-receipt": {"info": {}}}"#)), None);
        assert_eq!(text(Some(r#"{"offer-receipt": 7}"#)), None);
    }

    #[cfg(feature = "offer-receipt")]
    #[test]
    fn a_receipt_alone_is_written_as_the_merge_wrote_it() {
        use alloy_signer_local::PrivateKeySigner;

        let issuer = OfferReceipt::new(PrivateKeySigner::random());
        let url = "https://api.example.com/premium-data";
        let mut alone = settled(None);
        issuer.enrich(&mut alone, url, 1_703_123_456);
        let written = alone.extensions.clone().unwrap();
        // The text the generic merge writes for the same receipt (what this server wrote before).
        let receipt = SignedReceipt::from_settlement(&alone).unwrap();
        let entry = format!(
            r#"{{"info":{{"receipt":{}}},"schema":{}}}"#,
            serde_json::to_string(&receipt).unwrap(),
            receipt_schema_value()
        );
        let merged = crate::proto::RawExtensions::default()
            .with(KEY, &entry)
            .unwrap();
        assert_eq!(written.as_str(), merged.as_str());
        assert!(written.contains(KEY));
        assert_eq!(receipt.signer(), Ok(issuer.address()));
        assert_eq!(
            SignedReceipt::text_in(&alone).unwrap().get(),
            serde_json::to_string(&receipt).unwrap()
        );

        // Beside another extension: merged, both kept.
        let mut beside = settled(Some(r#"{"bazaar": {"n": 1}}"#));
        issuer.enrich(&mut beside, url, 1_703_123_456);
        let both = beside.extensions.clone().unwrap();
        assert_eq!(both.get("bazaar").unwrap()["n"], 1);
        assert!(both.contains(KEY));
        assert_eq!(
            SignedReceipt::from_settlement(&beside).unwrap().signer(),
            Ok(issuer.address())
        );

        // An entry of the same key already there (whoever wrote it) is replaced by this signer's.
        let mut forged = settled(Some(
            r#"{"offer-receipt": {"info": {"receipt": "forged"}}, "bazaar": {}}"#,
        ));
        issuer.enrich(&mut forged, url, 1_703_123_456);
        assert_eq!(
            SignedReceipt::from_settlement(&forged).unwrap().signer(),
            Ok(issuer.address())
        );
        assert!(!forged.extensions.unwrap().as_str().contains("forged"));
    }
}
