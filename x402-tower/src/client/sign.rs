//! Reading a 402's offers and signing a payment for one of them, exactly as the official clients do: `exact`
//! over EIP-3009 in x402 v1 (`X-PAYMENT`, `validAfter = now - 600`) and v2 (`PAYMENT-SIGNATURE`, `validAfter
//! = 0`, the chosen `accepts` entry echoed verbatim, the 402's extensions echoed), and in v2 `exact` over
//! Permit2 and `upto` (Permit2's `PermitWitnessTransferFrom` for the scheme's x402 proxy, the nonce a random
//! 256-bit number written in decimal, `deadline = now + maxTimeoutSeconds`).
//!
//! This is the one place in the workspace that signs payments; [`sign`] takes explicit
//! [`SignOptions`] so tests can also make payments that are wrong on purpose.

use alloy_primitives::{Address, B256, U256};
use alloy_signer::{Signer, SignerSync};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Map, Value, json};

use crate::extensions::payment_identifier as identifier;
use crate::network::{Network, Token};
use crate::proto::{
    Authorization, ExactEvmPayload, PaymentRequirementsV1, PaymentRequirementsV2, SCHEME_EXACT,
};
use crate::scheme::{
    EXACT_PERMIT2_PROXY, FACILITATOR_ADDRESS, Permit2Payment, SCHEME_UPTO, UPTO_PERMIT2_PROXY,
};
use crate::verify::{authorization_digest, domain_separator};

/// Largest `PAYMENT-REQUIRED` header or v1 402 body read (the official servers' are under 2 KiB).
pub const MAX_REQUIREMENTS_BYTES: usize = 64 * 1024;

/// Why a 402's payment requirements could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RequirementsError {
    /// Neither a `PAYMENT-REQUIRED` header nor a JSON body with `accepts`.
    #[error(
        "the 402 carries no payment requirements (no PAYMENT-REQUIRED header, no v1 JSON body)"
    )]
    Missing,
    /// Over [`MAX_REQUIREMENTS_BYTES`].
    #[error("the payment requirements exceed {MAX_REQUIREMENTS_BYTES} bytes")]
    TooLarge,
    /// The header is not standard Base64.
    #[error("PAYMENT-REQUIRED is not Base64: {0}")]
    Base64(#[from] base64::DecodeError),
    /// Not the JSON document of the protocol.
    #[error("the payment requirements are not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// An `x402Version` this client does not speak.
    #[error("unsupported x402Version {0}")]
    Version(u64),
    /// The body of the 402 could not be read.
    #[error("reading the 402 body failed: {0}")]
    Body(#[source] super::BoxError),
}

/// How an offer's payment moves the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferMethod {
    /// `exact` over EIP-3009 (`transferWithAuthorization`).
    Eip3009,
    /// Over Permit2: `exact` (`facilitator: None`) or `upto` (the address that will settle, which the payer
    /// signs). The payer must have approved Permit2 for the token.
    Permit2 {
        /// `extra.facilitatorAddress` of an `upto` offer.
        facilitator: Option<Address>,
    },
}

/// One offer of a 402 this client can sign for: `exact` (over EIP-3009 or Permit2) or `upto` on an EVM
/// network.
#[derive(Debug, Clone, PartialEq)]
pub struct Offer {
    /// 1 or 2.
    pub x402_version: u8,
    /// `exact` or `upto`.
    pub scheme: String,
    /// How the token moves.
    pub method: TransferMethod,
    /// The network (from a v1 name or a CAIP-2 id).
    pub network: Network,
    /// The token contract.
    pub asset: Address,
    /// Who is paid.
    pub pay_to: Address,
    /// The price, in atomic units (for `upto`, the most the server may charge).
    pub amount: U256,
    /// Seconds the server allows for the payment (`validBefore = now + maxTimeoutSeconds`).
    pub max_timeout_seconds: u64,
    /// `extra.name`: the token's EIP-712 domain name, as the server states it.
    pub domain_name: Option<String>,
    /// `extra.version`.
    pub domain_version: Option<String>,
    /// The `accepts` entry exactly as the server sent it (echoed as `accepted` in v2).
    pub raw: Value,
}

impl Offer {
    /// The token the offer names: its asset with the EIP-712 domain of its `extra` (6 decimals, as USDC),
    /// when `extra` has both a name and a version. A client should pay only in tokens it knows
    /// ([`PaymentPolicy`](super::PaymentPolicy) does); tests and load tools trust the server.
    pub fn token(&self) -> Option<Token> {
        Some(Token::new(
            self.asset,
            self.domain_name.clone()?,
            self.domain_version.clone()?,
            6,
        ))
    }
}

/// A 402's payment requirements: the offers this client could sign for, and what it echoes.
#[derive(Debug, Clone, PartialEq)]
pub struct Requirements {
    /// 1 (JSON body) or 2 (`PAYMENT-REQUIRED` header).
    pub x402_version: u8,
    /// The server's `error`, if any (why the payment is required, or what was wrong with the last one).
    pub error: Option<String>,
    /// Signable offers, in the server's order (others, e.g. another scheme, are left out).
    pub offers: Vec<Offer>,
    /// How many `accepts` entries there were, signable or not.
    pub offered: usize,
    /// v2 `resource`, echoed in the payment.
    pub resource: Option<Value>,
    /// v2 `extensions`, echoed in the payment.
    pub extensions: Option<Map<String, Value>>,
}

impl Requirements {
    /// From the value of a `PAYMENT-REQUIRED` header (x402 v2).
    pub fn from_header(value: &[u8]) -> Result<Self, RequirementsError> {
        if value.len() > MAX_REQUIREMENTS_BYTES {
            return Err(RequirementsError::TooLarge);
        }
        let trimmed = value.trim_ascii();
        Self::from_json(&B64.decode(trimmed)?)
    }

    /// From a 402's JSON body (x402 v1; a v2 document in the body is read too).
    pub fn from_body(body: &[u8]) -> Result<Self, RequirementsError> {
        if body.len() > MAX_REQUIREMENTS_BYTES {
            return Err(RequirementsError::TooLarge);
        }
        Self::from_json(body)
    }

    fn from_json(bytes: &[u8]) -> Result<Self, RequirementsError> {
        Self::from_document(&serde_json::from_slice(bytes)?)
    }

    /// From the decoded document (a v2 PaymentRequired, or a v1 402 body).
    pub fn from_document(doc: &Value) -> Result<Self, RequirementsError> {
        let version = doc
            .get("x402Version")
            .and_then(Value::as_u64)
            .ok_or(RequirementsError::Missing)?;
        let accepts = doc
            .get("accepts")
            .and_then(Value::as_array)
            .ok_or(RequirementsError::Missing)?;
        let offers = match version {
            1 => accepts.iter().filter_map(offer_v1).collect(),
            2 => accepts.iter().filter_map(offer_v2).collect(),
            v => return Err(RequirementsError::Version(v)),
        };
        Ok(Requirements {
            x402_version: version as u8,
            error: doc.get("error").and_then(Value::as_str).map(str::to_owned),
            offers,
            offered: accepts.len(),
            resource: doc.get("resource").cloned(),
            extensions: doc.get("extensions").and_then(Value::as_object).cloned(),
        })
    }
}

fn extra(raw: &Option<Value>, key: &str) -> Option<String> {
    raw.as_ref()?.get(key)?.as_str().map(str::to_owned)
}

fn offer_v1(raw: &Value) -> Option<Offer> {
    let r: PaymentRequirementsV1 = serde_json::from_value(raw.clone()).ok()?;
    if r.scheme != SCHEME_EXACT
        || extra(&r.extra, "assetTransferMethod").is_some_and(|m| m != "eip3009")
    {
        return None;
    }
    Some(Offer {
        x402_version: 1,
        scheme: r.scheme.clone(),
        method: TransferMethod::Eip3009,
        network: r.network.parse().ok()?,
        asset: r.asset,
        pay_to: r.pay_to,
        amount: r.max_amount_required,
        max_timeout_seconds: r.max_timeout_seconds,
        domain_name: extra(&r.extra, "name"),
        domain_version: extra(&r.extra, "version"),
        raw: raw.clone(),
    })
}

fn offer_v2(raw: &Value) -> Option<Offer> {
    let r: PaymentRequirementsV2 = serde_json::from_value(raw.clone()).ok()?;
    let method = extra(&r.extra, "assetTransferMethod");
    let method = match (r.scheme.as_str(), method.as_deref()) {
        (SCHEME_EXACT, None | Some("eip3009")) => TransferMethod::Eip3009,
        (SCHEME_EXACT, Some("permit2")) => TransferMethod::Permit2 { facilitator: None },
        (SCHEME_UPTO, None | Some("permit2")) => TransferMethod::Permit2 {
            facilitator: Some(extra(&r.extra, FACILITATOR_ADDRESS)?.parse().ok()?),
        },
        _ => return None,
    };
    Some(Offer {
        x402_version: 2,
        scheme: r.scheme.clone(),
        method,
        network: r.network.parse().ok()?,
        asset: r.asset,
        pay_to: r.pay_to,
        amount: r.amount,
        max_timeout_seconds: r.max_timeout_seconds,
        domain_name: extra(&r.extra, "name"),
        domain_version: extra(&r.extra, "version"),
        raw: raw.clone(),
    })
}

/// How to sign beyond the offer. The defaults are the official clients' choices; tests change them to make
/// payments that are wrong on purpose.
#[derive(Debug, Clone, Default)]
pub struct SignOptions {
    /// Unix seconds "now" (default: the system clock).
    pub now: Option<u64>,
    /// `validAfter` (default v1 `now - 600`, v2 `0`).
    pub valid_after: Option<U256>,
    /// `validBefore` (default `now + maxTimeoutSeconds`).
    pub valid_before: Option<U256>,
    /// The EIP-3009 nonce, or Permit2's as a 256-bit number (default 32 random bytes).
    pub nonce: Option<B256>,
    /// `authorization.from` (default the signer's address): a contract wallet the signer controls.
    pub from: Option<Address>,
    /// The `payment-identifier` id to send when the server declared the extension (default: a new
    /// `pay_` + 32 hex id for each payment).
    pub payment_id: Option<String>,
}

/// A signed payment, ready to send.
#[derive(Debug, Clone, PartialEq)]
pub struct SignedPayment {
    /// 1 or 2.
    pub x402_version: u8,
    /// `PAYMENT-SIGNATURE` (v2) or `X-PAYMENT` (v1).
    pub header_name: &'static str,
    /// Base64 of [`payload`](Self::payload): the header's value.
    pub header_value: String,
    /// The PaymentPayload document.
    pub payload: Value,
    /// The signed authorization. For a Permit2 payment, the permit's fields in these terms: `to` the
    /// witness's recipient, `value` the permitted amount, `validAfter` the witness's, `validBefore` the
    /// deadline, `nonce` Permit2's nonce as 32 bytes; the permit itself is [`permit2`](Self::permit2).
    pub authorization: Authorization,
    /// The Permit2 permit signed, for `exact` over Permit2 and `upto`.
    pub permit2: Option<Permit2Payment>,
    /// The 65-byte signature `r‖s‖v` (or what [`SignOptions`] asked for).
    pub signature: Vec<u8>,
}

/// Unix seconds now.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The authorization the official clients would sign for `offer` (see [`SignOptions`] for the defaults).
pub fn authorization(payer: Address, offer: &Offer, options: &SignOptions) -> Authorization {
    let now = options.now.unwrap_or_else(unix_now);
    Authorization {
        from: options.from.unwrap_or(payer),
        to: offer.pay_to,
        value: offer.amount,
        valid_after: options.valid_after.unwrap_or(if offer.x402_version == 1 {
            U256::from(now.saturating_sub(600))
        } else {
            U256::ZERO
        }),
        valid_before: options
            .valid_before
            .unwrap_or_else(|| U256::from(now.saturating_add(offer.max_timeout_seconds))),
        nonce: options.nonce.unwrap_or_else(B256::random),
    }
}

/// The EIP-712 digest an authorization is signed over: `token`'s domain (name, version, address) on
/// `chain_id`.
pub fn digest(authorization: &Authorization, chain_id: u64, token: &Token) -> B256 {
    authorization_digest(authorization, &domain_separator(chain_id, token))
}

/// Signs `authorization` under `token`'s EIP-712 domain on `chain_id`: the 65-byte signature `r‖s‖v`.
pub async fn sign_authorization(
    signer: &(dyn Signer + Send + Sync),
    authorization: &Authorization,
    chain_id: u64,
    token: &Token,
) -> Result<Vec<u8>, alloy_signer::Error> {
    let hash = digest(authorization, chain_id, token);
    Ok(signer.sign_hash(&hash).await?.as_bytes().to_vec())
}

/// [`sign_authorization`] with a synchronous signer (a local key).
pub fn sign_authorization_sync(
    signer: &dyn SignerSync,
    authorization: &Authorization,
    chain_id: u64,
    token: &Token,
) -> Result<Vec<u8>, alloy_signer::Error> {
    let hash = digest(authorization, chain_id, token);
    Ok(signer.sign_hash_sync(&hash)?.as_bytes().to_vec())
}

/// Signs an EIP-3009 `transferWithAuthorization` for `offer` under `token`'s EIP-712 domain (its name and
/// version; its address should be the offer's asset) and wraps it in the PaymentPayload of the offer's
/// version, echoing `requirements` where v2 asks for it.
pub async fn sign(
    signer: &(dyn Signer + Send + Sync),
    requirements: &Requirements,
    offer: &Offer,
    token: &Token,
    options: &SignOptions,
) -> Result<SignedPayment, alloy_signer::Error> {
    if let TransferMethod::Permit2 { facilitator } = offer.method {
        let permit = permit2(signer.address(), offer, facilitator, options);
        let hash = permit.signing_hash(offer.network.chain_id());
        let signature = signer.sign_hash(&hash).await?.as_bytes().to_vec();
        return Ok(wrap_permit2(
            requirements,
            offer,
            permit,
            signature,
            options,
        ));
    }
    let auth = authorization(signer.address(), offer, options);
    let signature = sign_authorization(signer, &auth, offer.network.chain_id(), token).await?;
    Ok(wrap(requirements, offer, auth, signature, options))
}

/// [`sign`] with a synchronous signer (a local key): for tests and load tools that pre-sign.
pub fn sign_sync<S: Signer + SignerSync>(
    signer: &S,
    requirements: &Requirements,
    offer: &Offer,
    token: &Token,
    options: &SignOptions,
) -> Result<SignedPayment, alloy_signer::Error> {
    if let TransferMethod::Permit2 { facilitator } = offer.method {
        let permit = permit2(signer.address(), offer, facilitator, options);
        let hash = permit.signing_hash(offer.network.chain_id());
        let signature = signer.sign_hash_sync(&hash)?.as_bytes().to_vec();
        return Ok(wrap_permit2(
            requirements,
            offer,
            permit,
            signature,
            options,
        ));
    }
    let auth = authorization(signer.address(), offer, options);
    let signature = sign_authorization_sync(signer, &auth, offer.network.chain_id(), token)?;
    Ok(wrap(requirements, offer, auth, signature, options))
}

/// The Permit2 permit the official clients would sign for `offer` (`exact` over Permit2, or `upto` with
/// its `facilitator`); see [`SignOptions`] for the defaults.
pub fn permit2(
    payer: Address,
    offer: &Offer,
    facilitator: Option<Address>,
    options: &SignOptions,
) -> Permit2Payment {
    let now = options.now.unwrap_or_else(unix_now);
    Permit2Payment {
        signature: Default::default(),
        from: options.from.unwrap_or(payer),
        token: offer.asset,
        amount: offer.amount,
        spender: if facilitator.is_some() {
            UPTO_PERMIT2_PROXY
        } else {
            EXACT_PERMIT2_PROXY
        },
        nonce: U256::from_be_bytes(options.nonce.unwrap_or_else(B256::random).0),
        deadline: options
            .valid_before
            .unwrap_or_else(|| U256::from(now.saturating_add(offer.max_timeout_seconds))),
        to: offer.pay_to,
        facilitator,
        valid_after: options.valid_after.unwrap_or(U256::ZERO),
    }
}

/// The v2 PaymentPayload of a Permit2 permit and its signature (any bytes: tests send wrong ones on purpose),
/// as the official clients write it: the nonce in decimal, `witness.facilitator` for `upto`.
pub fn wrap_permit2(
    requirements: &Requirements,
    offer: &Offer,
    permit: Permit2Payment,
    signature: Vec<u8>,
    options: &SignOptions,
) -> SignedPayment {
    let mut witness = json!({"to": permit.to, "validAfter": permit.valid_after.to_string()});
    if let Some(f) = permit.facilitator {
        witness["facilitator"] = json!(f);
    }
    let scheme_payload = json!({
        "signature": format!("0x{}", alloy_primitives::hex::encode(&signature)),
        "permit2Authorization": {
            "from": permit.from,
            "permitted": {"token": permit.token, "amount": permit.amount.to_string()},
            "spender": permit.spender,
            "nonce": permit.nonce.to_string(),
            "deadline": permit.deadline.to_string(),
            "witness": witness,
        },
    });
    let authorization = Authorization {
        from: permit.from,
        to: permit.to,
        value: permit.amount,
        valid_after: permit.valid_after,
        valid_before: permit.deadline,
        nonce: B256::from(permit.nonce),
    };
    let mut signed = envelope(
        requirements,
        offer,
        scheme_payload,
        authorization,
        signature,
        options,
    );
    signed.permit2 = Some(Permit2Payment {
        signature: signed.signature.clone().into(),
        ..permit
    });
    signed
}

/// The PaymentPayload for an authorization and its signature (any bytes: tests send wrong ones on purpose).
pub fn wrap(
    requirements: &Requirements,
    offer: &Offer,
    authorization: Authorization,
    signature: Vec<u8>,
    options: &SignOptions,
) -> SignedPayment {
    let exact = ExactEvmPayload {
        signature: format!("0x{}", alloy_primitives::hex::encode(&signature)),
        authorization: authorization.clone(),
    };
    let exact = serde_json::to_value(&exact).unwrap_or_default();
    envelope(
        requirements,
        offer,
        exact,
        authorization,
        signature,
        options,
    )
}

/// The PaymentPayload of the offer's version around a scheme's payload.
fn envelope(
    requirements: &Requirements,
    offer: &Offer,
    exact: Value,
    authorization: Authorization,
    signature: Vec<u8>,
    options: &SignOptions,
) -> SignedPayment {
    let (header_name, payload) = if offer.x402_version == 1 {
        let network = offer
            .raw
            .get("network")
            .cloned()
            .unwrap_or_else(|| json!(offer.network.caip2()));
        (
            "X-PAYMENT",
            json!({"x402Version": 1, "scheme": SCHEME_EXACT, "network": network, "payload": exact}),
        )
    } else {
        let mut payload = json!({"x402Version": 2, "accepted": offer.raw, "payload": exact});
        if let Some(resource) = &requirements.resource {
            payload["resource"] = resource.clone();
        }
        if let Some(declared) = &requirements.extensions {
            let mut extensions = declared.clone();
            if let Some(entry) = extensions.get_mut(identifier::KEY)
                && let Some(info) = entry.get_mut("info").and_then(Value::as_object_mut)
            {
                let id = options.payment_id.clone().unwrap_or_else(new_payment_id);
                info.insert("id".to_owned(), Value::String(id));
            }
            payload["extensions"] = Value::Object(extensions);
        }
        ("PAYMENT-SIGNATURE", payload)
    };
    SignedPayment {
        x402_version: offer.x402_version,
        header_name,
        header_value: B64.encode(payload.to_string()),
        payload,
        authorization,
        permit2: None,
        signature,
    }
}

/// A new `payment-identifier` id: `pay_` and 32 random hex digits, as the official client makes them.
pub fn new_payment_id() -> String {
    format!(
        "pay_{}",
        alloy_primitives::hex::encode(&B256::random()[..16])
    )
}
