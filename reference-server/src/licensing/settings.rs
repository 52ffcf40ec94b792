//! What interface A is configured with: checked values, built by `crate::config` from the flags.

use std::time::Duration;

use alloy_primitives::Address;
use x402_tower::settle::onchain::{OnchainConfigError, OnchainSettler};

use crate::domain::license::DefaultTerms;
use crate::licensing::bot_auth::BotAuthConfig;

/// Interface A's settings.
#[derive(Debug, Clone)]
pub struct LicensingSettings {
    /// Payment recipient.
    pub pay_to: Address,
    /// The address that settles `upto` payments (`--upto-facilitator`), if given.
    pub upto_facilitator: Option<Address>,
    /// The payment network and token.
    pub payment: PaymentNetwork,
    /// Remote facilitator base URL, if any.
    pub facilitator_url: Option<String>,
    /// Bearer token for the remote facilitator, if any.
    pub facilitator_url_token: Option<String>,
    /// How long to wait for the facilitator's `/settle`.
    pub facilitator_settle_timeout: Duration,
    /// After how long an in-flight payment is taken for the leftover of a request that died (the engine
    /// raises it to the settler's longest wait plus a minute).
    pub payment_stale_after: Duration,
    /// How long a payment's record is kept after its `validBefore` (the engine raises it to the stale time
    /// plus a minute).
    pub payment_keep_after_expiry: Duration,
    /// On-chain settlement (`--rpc-url` + `--settler-key`), if configured.
    pub onchain: Option<OnchainSettings>,
    /// The token `/operator/*` requires: `--api-token`, or one generated at start.
    pub operator_token: OperatorToken,
    /// The media URL signing key, which every instance of a deployment shares: sign-in-with-x nonces are
    /// tagged with a key derived from it.
    pub url_signing_key: Option<Vec<u8>>,
    /// The key that signs offers and receipts.
    pub receipt_key: ReceiptKey,
    /// The license of articles without licenses of their own.
    pub default_terms: DefaultTerms,
    /// Web Bot Auth verification.
    pub bot_auth: BotAuthConfig,
    /// The license-token contract, when purchases mint license tokens.
    pub license_token: Option<Address>,
}

/// On-chain settlement: the node and the relayer key that sends `transferWithAuthorization` (and pays
/// its gas). Checked data; [`OnchainSettings::settler`] builds the settler from it.
#[derive(Clone)]
pub struct OnchainSettings {
    /// The node's JSON-RPC URL.
    pub rpc_url: String,
    /// The relayer's private key (hex).
    relayer_key: String,
    /// The relayer's address.
    pub relayer: Address,
    /// How long to wait for a transaction's receipt.
    pub receipt_timeout: Duration,
    /// Timeout of one JSON-RPC call.
    pub rpc_timeout: Duration,
    /// How many blocks back the token's authorization logs are searched.
    pub log_lookback_blocks: u64,
}

impl OnchainSettings {
    /// Checked settings (`relayer` is `relayer_key`'s address).
    pub fn new(
        rpc_url: String,
        relayer_key: String,
        relayer: Address,
        receipt_timeout: Duration,
        rpc_timeout: Duration,
        log_lookback_blocks: u64,
    ) -> Self {
        Self {
            rpc_url,
            relayer_key,
            relayer,
            receipt_timeout,
            rpc_timeout,
            log_lookback_blocks,
        }
    }

    /// A settler for these settings (its nonce and fee state are its own: build one per process).
    pub fn settler(&self) -> Result<OnchainSettler, OnchainConfigError> {
        OnchainSettler::builder(self.rpc_url.clone(), self.relayer_key.clone())
            .receipt_timeout(self.receipt_timeout)
            .rpc_timeout(self.rpc_timeout)
            .log_lookback_blocks(self.log_lookback_blocks)
            .build()
    }
}

/// The key is never printed by `{:?}`.
impl std::fmt::Debug for OnchainSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnchainSettings")
            .field("rpc_url", &self.rpc_url)
            .field("relayer", &self.relayer)
            .field("receipt_timeout", &self.receipt_timeout)
            .field("rpc_timeout", &self.rpc_timeout)
            .field("log_lookback_blocks", &self.log_lookback_blocks)
            .finish_non_exhaustive()
    }
}

/// The network and token articles are sold in (from x402-tower's network table, or given explicitly).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentNetwork {
    /// The network.
    pub network: x402_tower::network::Network,
    /// The token (its contract and EIP-712 domain).
    pub token: x402_tower::network::Token,
    /// Articles are offered over EIP-3009 (`--transfer-methods eip3009`).
    pub eip3009: bool,
    /// Articles are offered over Permit2 too (`--transfer-methods permit2`), after the EIP-3009 offers.
    pub permit2: bool,
}

impl PaymentNetwork {
    /// CAIP-2 identifier, e.g. `eip155:84532`.
    pub fn caip2(&self) -> &str {
        self.network.caip2()
    }

    /// The v1 name legacy clients know, when there is one (v1 offers are made only then).
    pub fn v1_name(&self) -> Option<&'static str> {
        self.network.legacy_v1_name()
    }
}

/// The key that signs x402 offers and license receipts, and where it came from.
#[derive(Clone)]
pub enum ReceiptKey {
    /// `--receipt-signing-key`.
    Given(alloy_signer_local::PrivateKeySigner),
    /// Derived from `--url-signing-key` (the same on every instance sharing it).
    Derived(alloy_signer_local::PrivateKeySigner),
    /// Generated at start (printed in the banner; receipts signed before a restart keep their old signer).
    Generated(alloy_signer_local::PrivateKeySigner),
}

impl ReceiptKey {
    /// The signer.
    pub fn signer(&self) -> &alloy_signer_local::PrivateKeySigner {
        match self {
            ReceiptKey::Given(k) | ReceiptKey::Derived(k) | ReceiptKey::Generated(k) => k,
        }
    }
}

impl std::fmt::Debug for ReceiptKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = match self {
            ReceiptKey::Given(_) => "Given",
            ReceiptKey::Derived(_) => "Derived",
            ReceiptKey::Generated(_) => "Generated",
        };
        write!(f, "ReceiptKey::{how}({})", self.signer().address())
    }
}

/// The token the operator endpoints require. They always require one: payers' addresses and callers'
/// user agents are not public.
#[derive(Clone, PartialEq, Eq)]
pub enum OperatorToken {
    /// `--api-token`.
    Given(String),
    /// None was given: generated at start (printed in the banner, valid until the process ends).
    Generated(String),
}

impl OperatorToken {
    /// The token.
    pub fn as_str(&self) -> &str {
        match self {
            OperatorToken::Given(t) | OperatorToken::Generated(t) => t,
        }
    }
}

/// Never printed by `{:?}`.
impl std::fmt::Debug for OperatorToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OperatorToken::Given(_) => f.write_str("Given(***)"),
            OperatorToken::Generated(_) => f.write_str("Generated(***)"),
        }
    }
}
