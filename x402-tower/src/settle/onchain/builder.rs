//! [`OnchainSettlerBuilder`]: the relayer key, the node, and the limits of an [`OnchainSettler`].

use std::sync::Arc;
use std::time::Duration;

use super::nonce::NonceManager;
use super::shared::Shared;
use super::{Inner, OnchainSettler, rpc};
use crate::secp::SecretSigner;

/// Why an [`OnchainSettler`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum OnchainConfigError {
    /// The relayer key is not a 32-byte hex private key.
    #[error("invalid relayer key: {0}")]
    Key(String),
    /// The JSON-RPC URL is not an http(s) URL.
    #[error("invalid JSON-RPC URL {0:?}: expected http:// or https://")]
    Url(String),
    /// The HTTP client could not be built.
    #[error("HTTP client: {0}")]
    Http(String),
}

/// Builder of an [`OnchainSettler`].
#[derive(Debug)]
pub struct OnchainSettlerBuilder {
    rpc_url: String,
    relayer_key: String,
    rpc_timeout: Duration,
    receipt_timeout: Duration,
    poll_interval: Duration,
    gas_margin_percent: u64,
    fee_quote_ttl: Duration,
    log_lookback_blocks: u64,
}

impl OnchainSettlerBuilder {
    /// Timeout of one JSON-RPC call (default 10 s).
    pub fn rpc_timeout(mut self, timeout: Duration) -> Self {
        self.rpc_timeout = timeout;
        self
    }

    /// How long to wait for the receipt after broadcast before the outcome is unknown (default 60 s).
    pub fn receipt_timeout(mut self, timeout: Duration) -> Self {
        self.receipt_timeout = timeout;
        self
    }

    /// The first interval between receipt polls; it doubles up to 1 s (default 20 ms).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Gas limit margin over `eth_estimateGas`, in percent (default 20).
    pub fn gas_margin_percent(mut self, percent: u64) -> Self {
        self.gas_margin_percent = percent;
        self
    }

    /// How long one fee quote (`eth_gasPrice` and `eth_maxPriorityFeePerGas`) serves the transactions sent
    /// after it (default 1 s; zero: a quote is never reused once it has been answered). Concurrent
    /// settlements share one quote instead of asking the node twice each: those that come while it is being
    /// asked for take its answer, whatever the TTL. The transaction's fee cap is twice the quoted gas price
    /// plus the tip, so a quote a second old still covers a base fee that doubled (six full blocks in a
    /// row); a send the node refuses for its fees drops the quote, so the next transaction asks again.
    pub fn fee_quote_ttl(mut self, ttl: Duration) -> Self {
        self.fee_quote_ttl = ttl;
        self
    }

    /// How many blocks back (from the latest) the token's `AuthorizationUsed` / `AuthorizationCanceled` logs
    /// are searched when an authorization turns out used and the transaction that used it is not the one
    /// this settler is waiting for (default 10,000: 5.5 hours of 2-second blocks, 33 hours of 12-second
    /// ones). Keep it longer than a payment record's life (20 minutes by default) and within the range your
    /// provider answers (providers cap `eth_getLogs` differently). A node that refuses the range leaves the
    /// payment unknown (`settlement_pending`), never refused; so does a use older than the lookback when
    /// this settler may have sent it, while one it cannot have sent, already made 64 blocks back, is
    /// refused (see the module docs). Only anvil was tested.
    pub fn log_lookback_blocks(mut self, blocks: u64) -> Self {
        self.log_lookback_blocks = blocks;
        self
    }

    /// Builds the settler. Nothing is sent to the node yet.
    pub fn build(self) -> Result<OnchainSettler, OnchainConfigError> {
        let signer = SecretSigner::from_hex(&self.relayer_key).ok_or_else(|| {
            OnchainConfigError::Key(
                "expected 64 hex digits (with or without 0x), a secp256k1 scalar".into(),
            )
        })?;
        if !(self.rpc_url.starts_with("http://") || self.rpc_url.starts_with("https://")) {
            return Err(OnchainConfigError::Url(self.rpc_url));
        }
        let rpc =
            rpc::Rpc::new(&self.rpc_url, self.rpc_timeout).map_err(OnchainConfigError::Http)?;
        Ok(OnchainSettler {
            inner: Arc::new(Inner {
                rpc,
                rpc_url: self.rpc_url,
                relayer: signer.address(),
                signer,
                chain_id: Shared::new(),
                nonces: NonceManager::default(),
                receipt_timeout: self.receipt_timeout,
                rpc_timeout: self.rpc_timeout,
                poll_interval: self.poll_interval,
                gas_margin_percent: self.gas_margin_percent,
                fees: Shared::new(),
                fee_quote_ttl: self.fee_quote_ttl,
                log_lookback_blocks: self.log_lookback_blocks,
            }),
        })
    }
}

impl OnchainSettler {
    /// Starts a builder from the JSON-RPC URL and the relayer's private key (hex, with or without `0x`).
    pub fn builder(
        rpc_url: impl Into<String>,
        relayer_key: impl Into<String>,
    ) -> OnchainSettlerBuilder {
        OnchainSettlerBuilder {
            rpc_url: rpc_url.into(),
            relayer_key: relayer_key.into(),
            rpc_timeout: Duration::from_secs(10),
            receipt_timeout: Duration::from_secs(60),
            poll_interval: Duration::from_millis(20),
            gas_margin_percent: 20,
            fee_quote_ttl: Duration::from_secs(1),
            log_lookback_blocks: 10_000,
        }
    }
}
