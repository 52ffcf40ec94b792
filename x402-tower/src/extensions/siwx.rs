//! The `sign-in-with-x` extension (x402 v2, CAIP-122 / EIP-4361): a wallet that already paid for a resource
//! proves it controls its address and reads the resource again without paying.
//!
//! This module knows nothing of Tower. [`SignInWithX`] declares the extension in a 402 (with a fresh
//! nonce) and checks a `SIGN-IN-WITH-X` header; the layer ([`X402Config::sign_in_with_x`]) wires it in,
//! and the client
#![cfg_attr(
    feature = "client",
    doc = "([`client`](crate::client), feature `client`)"
)]
#![cfg_attr(not(feature = "client"), doc = "(`client`, feature `client`)")]
//! signs in before paying when a server offers it.
//!
//! Stricter than the official TypeScript code, as the extension's text asks:
//!
//! - `domain` and `uri` are checked against the layer's configured public URL, never the `Host` header;
//! - the nonce must be one this server issued (an HMAC tag over the nonce and its `issuedAt`, under a key
//!   every instance shares: nothing is stored per 402) and unused: its use is claimed once in the payment
//!   store (its own single-use record, [`PaymentStore::use_nonce`]), so it holds across instances;
//! - `issuedAt` at most the validity old (default 5 minutes) and not in the future, `expirationTime` in the
//!   future, `notBefore` in the past;
//! - the EIP-191 signature of the exact EIP-4361 message must recover the claimed address (ordinary wallets),
//!   or, with [`SignInWithX::contract_wallets`], the contract at that address must accept it (EIP-1271);
//! - finally the application says whether that address paid for this resource ([`PaidCheck`]).
//!
//! [`X402Config::sign_in_with_x`]: crate::X402Config::sign_in_with_x

use std::sync::Arc;

use alloy_primitives::{Address, B256, Signature, U256, eip191_hash_message, keccak256};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};

use sha2::Sha256;

use crate::boxed::BoxFuture;
use crate::store::{PaymentStore, StoreError};

/// The extension's key in `extensions`.
pub const KEY: &str = "sign-in-with-x";
/// The request header carrying the proof (Base64 of its JSON).
pub const HEADER: &str = "sign-in-with-x";
/// Largest proof header read.
pub const MAX_PROOF_BYTES: usize = 8 * 1024;
/// Hex characters of a nonce this server issues (16 bytes).
pub(crate) const NONCE_HEX_LEN: usize = 32;

/// Whether an address paid for a resource: the application's answer (its receipts, its orders).
pub trait PaidCheck: Send + Sync + 'static {
    /// `true` when `payer` bought `resource_url` (the absolute URL the layer sells, query included).
    fn has_paid<'a>(
        &'a self,
        payer: Address,
        resource_url: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
}

/// Asks a contract wallet whether it accepts a signature (EIP-1271 `isValidSignature(hash, signature)`
/// returning `0x1626ba7e`): how a sign-in by a smart wallet is checked. The on-chain settler implements it.
pub trait ContractWallets: Send + Sync + 'static {
    /// `true` when the contract at `wallet` accepts `signature` over `hash`; `false` when it refuses or has
    /// no code.
    fn is_valid_signature<'a>(
        &'a self,
        wallet: Address,
        hash: B256,
        signature: &'a [u8],
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
}

/// The proof a client sends (`SIGN-IN-WITH-X`: Base64 of this JSON): the declaration's `info` echoed, with
/// the signer's `address`, `chainId`, `type` and `signature`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Proof {
    /// The server's domain (host and port).
    pub domain: String,
    /// The signing address (checksummed or not).
    pub address: String,
    /// The resource URL.
    pub uri: String,
    /// `"1"`.
    pub version: String,
    /// CAIP-2 chain (`eip155:8453`).
    pub chain_id: String,
    /// `"eip191"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The server's nonce.
    pub nonce: String,
    /// ISO-8601.
    pub issued_at: String,
    /// ISO-8601.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_time: Option<String>,
    /// ISO-8601.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    /// Opaque.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Human-readable statement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement: Option<String>,
    /// Resources the sign-in is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<String>>,
    /// `0x` + hex of the EIP-191 signature.
    pub signature: String,
    /// A hint (`eip191`, `eip1271`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_scheme: Option<String>,
}

/// The EIP-4361 text a proof signs, byte for byte as `siwe`'s `prepareMessage` writes it; `None` when the
/// chain is not `eip155:<number>`.
pub fn message(p: &Proof) -> Option<String> {
    let chain: u64 = p.chain_id.strip_prefix("eip155:")?.parse().ok()?;
    let mut m = format!(
        "{} wants you to sign in with your Ethereum account:\n{}\n\n",
        p.domain, p.address
    );
    if let Some(statement) = &p.statement {
        m.push_str(statement);
        m.push('\n');
    }
    m.push_str(&format!(
        "\nURI: {}\nVersion: {}\nChain ID: {chain}\nNonce: {}\nIssued At: {}",
        p.uri, p.version, p.nonce, p.issued_at
    ));
    if let Some(t) = &p.expiration_time {
        m.push_str(&format!("\nExpiration Time: {t}"));
    }
    if let Some(t) = &p.not_before {
        m.push_str(&format!("\nNot Before: {t}"));
    }
    if let Some(r) = &p.request_id {
        m.push_str(&format!("\nRequest ID: {r}"));
    }
    if let Some(resources) = &p.resources {
        m.push_str("\nResources:");
        for r in resources {
            m.push_str(&format!("\n- {r}"));
        }
    }
    Some(m)
}

/// Why a sign-in was refused: the 402's `error` (`siwx_` + the reason, [`Refusal::as_str`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not Base64 JSON of a proof, or too large.
    Malformed,
    /// `domain` or `uri` is not this server's.
    Domain,
    /// Not version 1, or a chain or signature type this route does not accept.
    Unsupported,
    /// Outside its time window.
    Expired,
    /// A nonce this server did not issue, or already used.
    Nonce,
    /// The signature does not recover the address (nor does the contract wallet accept it).
    Signature,
    /// The address has not paid for this resource.
    NotPaid,
    /// The payment store or the application's check failed.
    Unavailable,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for Refusal {}

impl Refusal {
    /// The string in the 402's `error`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Refusal::Malformed => "siwx_malformed",
            Refusal::Domain => "siwx_wrong_domain",
            Refusal::Unsupported => "siwx_unsupported",
            Refusal::Expired => "siwx_expired",
            Refusal::Nonce => "siwx_invalid_nonce",
            Refusal::Signature => "siwx_invalid_signature",
            Refusal::NotPaid => "siwx_not_paid",
            Refusal::Unavailable => "siwx_unavailable",
        }
    }
}

/// A request let through by a sign-in instead of a payment: in the request extensions for the handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedIn {
    /// The address that proved it paid.
    pub address: Address,
    /// The resource URL it paid for.
    pub resource_url: String,
}

/// The `sign-in-with-x` extension of a route: see the [module docs](self).
#[derive(Clone)]
pub struct SignInWithX {
    /// The key's length (checked by the layer's builder).
    key_len: usize,
    /// HMAC-SHA256 keyed with the key, once: cloned per tag (`None` if HMAC ever refused the key).
    mac: Option<HmacSha256>,
    paid: Arc<dyn PaidCheck>,
    contracts: Option<Arc<dyn ContractWallets>>,
    statement: Option<String>,
    validity_secs: u64,
    /// `host[:port]` and `scheme://host[:port]` of the layer's public URL (set by the layer).
    domain: String,
    origin: String,
}

impl std::fmt::Debug for SignInWithX {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignInWithX")
            .field("domain", &self.domain)
            .field("validity_secs", &self.validity_secs)
            .finish_non_exhaustive()
    }
}

type HmacSha256 = Hmac<Sha256>;

fn iso(unix: u64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp(unix as i64)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.000Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

fn parse_iso(s: &str) -> Option<u64> {
    if s.len() > 40 {
        return None;
    }
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()?;
    u64::try_from(t.unix_timestamp()).ok()
}

impl SignInWithX {
    /// The extension, with `key` (at least 16 bytes; the same on every instance of a deployment) to tag the
    /// nonces it issues, and `paid` to answer "did this address pay for this resource".
    pub fn new(key: impl AsRef<[u8]>, paid: Arc<dyn PaidCheck>) -> Self {
        SignInWithX {
            key_len: key.as_ref().len(),
            mac: <HmacSha256 as Mac>::new_from_slice(key.as_ref()).ok(),
            paid,
            contracts: None,
            statement: Some("Sign in to read again what you paid for".to_owned()),
            validity_secs: 300,
            domain: String::new(),
            origin: String::new(),
        }
    }

    /// The statement shown to the signer (default "Sign in to read again what you paid for").
    pub fn statement(mut self, statement: Option<String>) -> Self {
        self.statement = statement;
        self
    }

    /// Accepts sign-ins by contract wallets: a signature that does not recover the claimed address is put to
    /// the contract at that address (EIP-1271) through `contracts` (for example the on-chain settler).
    pub fn contract_wallets(mut self, contracts: Arc<dyn ContractWallets>) -> Self {
        self.contracts = Some(contracts);
        self
    }

    /// How long a declaration's nonce is good for, and the oldest `issuedAt` accepted (default 300 s).
    pub fn validity_secs(mut self, secs: u64) -> Self {
        self.validity_secs = secs.clamp(30, 3600);
        self
    }

    /// Whether the key is long enough.
    pub(crate) fn key_ok(&self) -> bool {
        self.key_len >= 16
    }

    /// Binds the extension to the layer's public base URL (`scheme://host[:port][/path]`).
    pub(crate) fn bind(mut self, base_url: &str) -> Self {
        let (scheme, rest) = base_url.split_once("://").unwrap_or(("https", base_url));
        let authority = rest.split('/').next().unwrap_or(rest);
        self.domain = authority.to_owned();
        self.origin = format!("{scheme}://{authority}");
        self
    }

    fn tag(&self, random: &[u8], issued_at: &str) -> [u8; 8] {
        // HMAC accepts keys of any length; were it ever to refuse one, a random tag makes every nonce fail
        // (never a predictable tag).
        let Some(mut mac) = self.mac.clone() else {
            let mut tag = [0u8; 8];
            tag.copy_from_slice(&B256::random()[..8]);
            return tag;
        };
        mac.update(random);
        mac.update(issued_at.as_bytes());
        let out = mac.finalize().into_bytes();
        let mut tag = [0u8; 8];
        tag.copy_from_slice(&out[..8]);
        tag
    }

    /// The declaration for a 402 of `resource_url` offered on `networks` (CAIP-2), with a fresh nonce,
    /// serialised: what a 402 sends (built from a pre-serialised schema, as it is built for every 402).
    pub fn declare_text(&self, resource_url: &str, networks: &[&str], now: u64) -> String {
        self.declare_with_nonce(resource_url, networks, now, &self.nonce(now))
    }

    /// A fresh nonce for a declaration issued at `now`: 8 random bytes and a tag binding them to the
    /// issue time (hex, [`NONCE_HEX_LEN`] characters).
    pub(crate) fn nonce(&self, now: u64) -> String {
        self.nonce_issued_at(&iso(now))
    }

    /// [`Self::nonce`] for the `issuedAt` text `issued_at` (what a pre-built 402 keeps).
    pub(crate) fn nonce_issued_at(&self, issued_at: &str) -> String {
        let random = B256::random();
        let mut nonce = [0u8; 16];
        nonce[..8].copy_from_slice(&random[..8]);
        nonce[8..].copy_from_slice(&self.tag(&random[..8], issued_at));
        alloy_primitives::hex::encode(nonce)
    }

    /// The `issuedAt` text of a declaration issued at `now`.
    pub(crate) fn issued_at(now: u64) -> String {
        iso(now)
    }

    /// [`Self::declare_text`] with `nonce` (hex) as the nonce: the layer builds a 402 once per second and
    /// resource around a placeholder, and puts a fresh nonce from [`Self::nonce`] into each copy.
    pub(crate) fn declare_with_nonce(
        &self,
        resource_url: &str,
        networks: &[&str],
        now: u64,
        nonce: &str,
    ) -> String {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Info<'a> {
            domain: &'a str,
            uri: &'a str,
            version: &'static str,
            nonce: &'a str,
            issued_at: &'a str,
            expiration_time: String,
            #[serde(skip_serializing_if = "Option::is_none")]
            statement: Option<&'a str>,
        }
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Chain<'a> {
            chain_id: &'a str,
            #[serde(rename = "type")]
            kind: &'static str,
        }
        let issued_at = iso(now);
        let mut chains: Vec<&str> = networks.to_vec();
        chains.dedup();
        let info = Info {
            domain: &self.domain,
            uri: resource_url,
            version: "1",
            nonce,
            issued_at: &issued_at,
            // No `resources`: it would repeat `uri` (optional in CAIP-122 and the extension).
            expiration_time: iso(now + self.validity_secs),
            statement: self.statement.as_deref(),
        };
        let chains: Vec<Chain<'_>> = chains
            .iter()
            .map(|c| Chain {
                chain_id: c,
                kind: "eip191",
            })
            .collect();
        // No `schema` (of the proof, which this server checks itself): see "What a 402 declares" in the
        // extensions module.
        let mut out = String::with_capacity(512);
        out.push_str(r#"{"info":"#);
        out.push_str(&serde_json::to_string(&info).unwrap_or_default());
        out.push_str(r#","supportedChains":"#);
        out.push_str(&serde_json::to_string(&chains).unwrap_or_default());
        out.push('}');
        out
    }

    /// Checks a `SIGN-IN-WITH-X` header for `resource_url` offered on `networks`, claiming its nonce in
    /// `store`: the signer when it paid for the resource.
    pub async fn check(
        &self,
        header: &[u8],
        resource_url: &str,
        networks: &[&str],
        store: &dyn PaymentStore,
        now: u64,
    ) -> Result<SignedIn, Refusal> {
        if header.len() > MAX_PROOF_BYTES {
            return Err(Refusal::Malformed);
        }
        let bytes = B64
            .decode(header.trim_ascii())
            .map_err(|_| Refusal::Malformed)?;
        let proof: Proof = serde_json::from_slice(&bytes).map_err(|_| Refusal::Malformed)?;
        if proof.domain != self.domain
            || !(proof.uri == self.origin || proof.uri.starts_with(&format!("{}/", self.origin)))
        {
            return Err(Refusal::Domain);
        }
        if proof.version != "1"
            || proof.kind != "eip191"
            || !networks.contains(&proof.chain_id.as_str())
        {
            return Err(Refusal::Unsupported);
        }
        let issued = parse_iso(&proof.issued_at).ok_or(Refusal::Malformed)?;
        let expires = match &proof.expiration_time {
            Some(t) => parse_iso(t).ok_or(Refusal::Malformed)?,
            None => issued + self.validity_secs,
        };
        let not_before = match &proof.not_before {
            Some(t) => parse_iso(t).ok_or(Refusal::Malformed)?,
            None => 0,
        };
        // 60 s of clock skew for a server's own timestamps; the window itself is the validity.
        if issued > now + 60
            || now > issued + self.validity_secs
            || now >= expires
            || now < not_before
        {
            return Err(Refusal::Expired);
        }
        let nonce = alloy_primitives::hex::decode(&proof.nonce).map_err(|_| Refusal::Nonce)?;
        if nonce.len() != 16 || nonce[8..] != self.tag(&nonce[..8], &proof.issued_at) {
            return Err(Refusal::Nonce);
        }
        let address =
            crate::proto::wire::parse_address(&proof.address).ok_or(Refusal::Malformed)?;
        let text = message(&proof).ok_or(Refusal::Unsupported)?;
        let sig = crate::verify::parse_signature_hex(&proof.signature).ok_or(Refusal::Signature)?;
        let hash = eip191_hash_message(text.as_bytes());
        if recover(&sig, &hash) != Some(address) {
            // Not the key of that address: perhaps a contract wallet that accepts it.
            let Some(contracts) = &self.contracts else {
                return Err(Refusal::Signature);
            };
            match contracts.is_valid_signature(address, hash, &sig).await {
                Ok(true) => {}
                Ok(false) => return Err(Refusal::Signature),
                Err(_) => return Err(Refusal::Unavailable),
            }
        }
        // Single use, across instances: the nonce's own record in the payment store.
        match store
            .use_nonce(&keccak256(&nonce), issued + self.validity_secs + 60, now)
            .await
        {
            Ok(true) => {}
            Ok(false) => return Err(Refusal::Nonce),
            Err(_) => return Err(Refusal::Unavailable),
        }
        match self.paid.has_paid(address, resource_url).await {
            Ok(true) => Ok(SignedIn {
                address,
                resource_url: resource_url.to_owned(),
            }),
            Ok(false) => Err(Refusal::NotPaid),
            Err(_) => Err(Refusal::Unavailable),
        }
    }
}

/// The address an ECDSA signature `r‖s‖v` (v 27/28 or 0/1) over `hash` recovers, if any.
fn recover(sig: &[u8], hash: &B256) -> Option<Address> {
    let sig: &[u8; 65] = sig.try_into().ok()?;
    let parity = match sig[64] {
        27 | 0 => false,
        28 | 1 => true,
        _ => return None,
    };
    Signature::new(
        U256::from_be_slice(&sig[..32]),
        U256::from_be_slice(&sig[32..64]),
        parity,
    )
    .recover_address_from_prehash(hash)
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_is_eip4361_byte_for_byte() {
        // The example of the extension's text (x402-extensions.md part 2).
        let p = Proof {
            domain: "api.example.com".into(),
            address: "0x857b06519E91e3A54538791bDbb0E22373e36b66".into(),
            uri: "https://api.example.com/premium-data".into(),
            version: "1".into(),
            chain_id: "eip155:8453".into(),
            kind: "eip191".into(),
            nonce: "a1b2c3d4e5f67890a1b2c3d4e5f67890".into(),
            issued_at: "2024-01-15T10:30:00.000Z".into(),
            expiration_time: Some("2024-01-15T10:35:00.000Z".into()),
            not_before: None,
            request_id: None,
            statement: Some("Sign in to access premium data".into()),
            resources: Some(vec!["https://api.example.com/premium-data".into()]),
            signature: "0x".into(),
            signature_scheme: None,
        };
        let expected = "api.example.com wants you to sign in with your Ethereum account:\n\
            0x857b06519E91e3A54538791bDbb0E22373e36b66\n\
            \n\
            Sign in to access premium data\n\
            \n\
            URI: https://api.example.com/premium-data\n\
            Version: 1\n\
            Chain ID: 8453\n\
            Nonce: a1b2c3d4e5f67890a1b2c3d4e5f67890\n\
            Issued At: 2024-01-15T10:30:00.000Z\n\
            Expiration Time: 2024-01-15T10:35:00.000Z\n\
            Resources:\n\
            - https://api.example.com/premium-data";
        assert_eq!(message(&p).unwrap(), expected);
        // Without a statement: two empty lines between the address and the fields (EIP-4361's ABNF).
        let bare = Proof {
            statement: None,
            resources: None,
            expiration_time: None,
            ..p
        };
        assert!(message(&bare).unwrap().contains("b66\n\n\nURI: "));
    }

    #[test]
    fn iso_times_round_trip() {
        assert_eq!(iso(1_705_314_600), "2024-01-15T10:30:00.000Z");
        assert_eq!(parse_iso("2024-01-15T10:30:00.000Z"), Some(1_705_314_600));
        assert_eq!(parse_iso("yesterday"), None);
    }
}
