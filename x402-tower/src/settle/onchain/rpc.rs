//! A minimal Ethereum JSON-RPC client over HTTP (reqwest, rustls on ring).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use alloy_primitives::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};

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
}

#[derive(Deserialize)]
struct RpcAnswer {
    result: Option<Value>,
    error: Option<RpcErrorObject>,
}

#[derive(Deserialize)]
struct RpcErrorObject {
    code: i64,
    message: String,
    data: Option<Value>,
}

/// Caps an answer we are willing to read (a receipt with many logs stays far below).
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

#[derive(Debug)]
pub(crate) struct RpcClient {
    url: String,
    http: reqwest::Client,
    next_id: AtomicU64,
}

impl RpcClient {
    pub(crate) fn new(url: String, timeout: Duration) -> Result<Self, reqwest::Error> {
        // reqwest is built with `rustls-no-provider`: make ring the default if nothing else was chosen.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .build()?;
        Ok(RpcClient {
            url,
            http,
            next_id: AtomicU64::new(1),
        })
    }

    /// Calls `method` and deserializes its result.
    pub(crate) async fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: &'static str,
        params: Value,
    ) -> Result<T, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let response = self
            .http
            .post(&self.url)
            .json(&body)
            .send()
            .await
            .map_err(|e| transport(method, e))?;
        let status = response.status();
        // Read at most MAX_ANSWER_BYTES: a misbehaving endpoint cannot make us buffer without bound.
        let too_large = || RpcError::BadResponse {
            method,
            message: format!("answer larger than {MAX_ANSWER_BYTES} bytes"),
        };
        if response
            .content_length()
            .is_some_and(|l| l > MAX_ANSWER_BYTES as u64)
        {
            return Err(too_large());
        }
        let mut response = response;
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| transport(method, e))? {
            if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        let answer: RpcAnswer =
            serde_json::from_slice(&bytes).map_err(|e| RpcError::BadResponse {
                method,
                message: format!("HTTP {status}, not a JSON-RPC answer: {e}"),
            })?;
        if let Some(error) = answer.error {
            let data = match error.data {
                Some(Value::String(s)) => s.parse::<Bytes>().ok(),
                Some(Value::Object(o)) => o
                    .get("data")
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse().ok()),
                _ => None,
            };
            return Err(RpcError::Node {
                method,
                code: error.code,
                message: error.message,
                data,
            });
        }
        let result = answer.result.unwrap_or(Value::Null);
        serde_json::from_value(result).map_err(|e| RpcError::BadResponse {
            method,
            message: e.to_string(),
        })
    }
}

fn transport(method: &'static str, error: reqwest::Error) -> RpcError {
    if error.is_timeout() {
        RpcError::Timeout { method }
    } else {
        RpcError::Transport {
            method,
            message: error.to_string(),
        }
    }
}
