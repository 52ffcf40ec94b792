//! The node, through alloy's provider (`alloy-provider` over its reqwest transport, rustls on ring), with
//! this crate's error type: every failure says which JSON-RPC method failed and whether the node refused
//! (nothing happened) or the answer was lost (something may have happened).
//!
//! Quantities, addresses and transactions are typed by alloy; the two answers this settler reads only a
//! little of (a receipt's status and logs, a transaction's presence) are read into small local types with
//! `raw_request`, so a chain whose receipts carry extra fields is read the same way.

use std::borrow::Cow;
use std::time::Duration;

use alloy_eips::BlockId;
use alloy_primitives::{Address, B256, Bytes};
use alloy_provider::transport::{TransportError, TransportErrorKind};
use alloy_provider::{Provider, ProviderBuilder, RootProvider};
use alloy_rpc_types_eth::{TransactionInput, TransactionRequest};
use serde::de::DeserializeOwned;

/// Why a JSON-RPC call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RpcError {
    /// The request did not get an answer in time. It may have reached the node.
    #[error("JSON-RPC {method}: timed out")]
    Timeout {
        /// The method called.
        method: &'static str,
    },
    /// The node could not be reached, or the HTTP exchange failed.
    #[error("JSON-RPC {method}: transport error: {message}")]
    Transport {
        /// The method called.
        method: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The node answered with a JSON-RPC error (a revert, a rejected transaction, ...).
    #[error("JSON-RPC {method}: error {code}: {message}")]
    Node {
        /// The method called.
        method: &'static str,
        /// JSON-RPC error code (3 = execution reverted).
        code: i64,
        /// The node's message.
        message: String,
        /// The error's `data` (revert data for a revert), when it is hex.
        data: Option<Bytes>,
    },
    /// The answer was not a JSON-RPC answer of the expected shape.
    #[error("JSON-RPC {method}: bad answer: {message}")]
    BadResponse {
        /// The method called.
        method: &'static str,
        /// What was wrong.
        message: String,
    },
}

impl RpcError {
    /// Whether the request certainly did not take effect on the node (it answered with an error).
    pub fn is_rejection(&self) -> bool {
        matches!(self, RpcError::Node { .. })
    }

    fn from_transport(method: &'static str, error: TransportError) -> Self {
        use alloy_provider::transport::RpcError as E;
        match error {
            E::ErrorResp(payload) => RpcError::Node {
                method,
                code: payload.code,
                data: payload.as_revert_data(),
                message: payload.message.into_owned(),
            },
            E::Transport(kind) => {
                let timed_out = matches!(&kind, TransportErrorKind::Custom(e)
                    if e.downcast_ref::<reqwest::Error>().is_some_and(reqwest::Error::is_timeout));
                if timed_out {
                    RpcError::Timeout { method }
                } else {
                    RpcError::Transport {
                        method,
                        message: kind.to_string(),
                    }
                }
            }
            other => RpcError::BadResponse {
                method,
                message: other.to_string(),
            },
        }
    }
}

/// A call from `from` to `to` with `data`, as `eth_call` and `eth_estimateGas` take it. The calldata goes
/// in both `input` and `data`: nodes read one or the other.
pub(crate) fn call_request(from: Option<Address>, to: Address, data: Bytes) -> TransactionRequest {
    TransactionRequest {
        from,
        to: Some(to.into()),
        input: TransactionInput::both(data),
        ..Default::default()
    }
}

/// The part of an `eth_getLogs` entry the settler reads.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FoundLog {
    pub(crate) address: Address,
    pub(crate) topics: Vec<B256>,
    #[serde(default)]
    pub(crate) data: Bytes,
    pub(crate) transaction_hash: Option<B256>,
    #[serde(default)]
    pub(crate) removed: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Rpc {
    provider: RootProvider,
}

impl Rpc {
    /// A provider for `url` whose every request times out after `timeout` (connecting: at most 10 s).
    pub(crate) fn new(url: &str, timeout: Duration) -> Result<Self, String> {
        // reqwest is built with `rustls-no-provider`: make ring the default if nothing else was chosen.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let url: reqwest::Url = url.parse().map_err(|e| format!("{e}"))?;
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| e.to_string())?;
        // No fillers: this settler sets the nonce, gas and fees itself and signs locally.
        let provider = ProviderBuilder::new()
            .disable_recommended_fillers()
            .connect_reqwest(http, url);
        Ok(Rpc { provider })
    }

    pub(crate) async fn chain_id(&self) -> Result<u64, RpcError> {
        let r = self.provider.get_chain_id().await;
        r.map_err(|e| RpcError::from_transport("eth_chainId", e))
    }

    /// `eth_call` at the latest block: the returned data, or the node's error (a revert).
    pub(crate) async fn call(&self, tx: TransactionRequest) -> Result<Bytes, RpcError> {
        self.call_at(tx, BlockId::latest()).await
    }

    /// `eth_call` at `block`.
    pub(crate) async fn call_at(
        &self,
        tx: TransactionRequest,
        block: BlockId,
    ) -> Result<Bytes, RpcError> {
        let r = self.provider.call(tx).block(block).await;
        r.map_err(|e| RpcError::from_transport("eth_call", e))
    }

    pub(crate) async fn estimate_gas(&self, tx: TransactionRequest) -> Result<u64, RpcError> {
        let r = self.provider.estimate_gas(tx).await;
        r.map_err(|e| RpcError::from_transport("eth_estimateGas", e))
    }

    pub(crate) async fn gas_price(&self) -> Result<u128, RpcError> {
        let r = self.provider.get_gas_price().await;
        r.map_err(|e| RpcError::from_transport("eth_gasPrice", e))
    }

    pub(crate) async fn max_priority_fee(&self) -> Result<u128, RpcError> {
        let r = self.provider.get_max_priority_fee_per_gas().await;
        r.map_err(|e| RpcError::from_transport("eth_maxPriorityFeePerGas", e))
    }

    /// `eth_getTransactionCount(address, "pending")`.
    pub(crate) async fn pending_count(&self, address: Address) -> Result<u64, RpcError> {
        let r = self.provider.get_transaction_count(address).pending().await;
        r.map_err(|e| RpcError::from_transport("eth_getTransactionCount", e))
    }

    /// `eth_sendRawTransaction`: the hash the node reports.
    pub(crate) async fn send_raw(&self, raw: &[u8]) -> Result<B256, RpcError> {
        let r = self.provider.send_raw_transaction(raw).await;
        r.map(|pending| *pending.tx_hash())
            .map_err(|e| RpcError::from_transport("eth_sendRawTransaction", e))
    }

    /// `eth_blockNumber`.
    pub(crate) async fn block_number(&self) -> Result<u64, RpcError> {
        let r = self.provider.get_block_number().await;
        r.map_err(|e| RpcError::from_transport("eth_blockNumber", e))
    }

    /// `eth_getLogs` with `filter` (a JSON filter object).
    pub(crate) async fn logs(&self, filter: serde_json::Value) -> Result<Vec<FoundLog>, RpcError> {
        let r = self
            .provider
            .raw_request(Cow::Borrowed("eth_getLogs"), (filter,))
            .await;
        r.map_err(|e| RpcError::from_transport("eth_getLogs", e))
    }

    /// A method taking one transaction hash (`eth_getTransactionReceipt`, `eth_getTransactionByHash`), its
    /// answer read into `R`.
    pub(crate) async fn by_hash<R>(&self, method: &'static str, hash: B256) -> Result<R, RpcError>
    where
        R: DeserializeOwned + Send + Sync + Unpin + std::fmt::Debug + 'static,
    {
        let r = self
            .provider
            .raw_request(Cow::Borrowed(method), (hash,))
            .await;
        r.map_err(|e| RpcError::from_transport(method, e))
    }
}
