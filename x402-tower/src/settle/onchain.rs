//! Direct on-chain settlement: the relayer calls USDC's `transferWithAuthorization`, or the x402 Permit2
//! proxies' `settle`, over JSON-RPC.
//!
//! [`OnchainSettler`] needs a JSON-RPC URL and a relayer private key (the relayer pays the gas, never the
//! tokens). It settles `exact` over EIP-3009 as described below, and `exact` over Permit2 and `upto` the same
//! way with these differences:
//!
//! - the transaction calls the proxy the payer named as spender (`x402ExactPermit2Proxy.settle`, or
//!   `x402UptoPermit2Proxy.settle` with the charge: the upto proxy lets only `witness.facilitator` call it, so
//!   an `upto` offer settled here names the [relayer](OnchainSettler::relayer) as `facilitatorAddress`, which
//!   [`Settler::supported`] announces);
//! - the revert is a custom error of Permit2 or the proxy, mapped to the official code (`permit2_invalid_nonce`,
//!   `invalid_permit2_signature`, `upto_facilitator_mismatch`, ...); when Permit2 could not move the tokens,
//!   the payer's balance and allowance decide between `permit2_allowance_required` (the payer must approve
//!   Permit2 once; the layer answers 412) and `permit2_insufficient_balance`;
//! - whether the nonce is spent is Permit2's `nonceBitmap(owner, nonce >> 8)`, and Permit2 logs no use of a
//!   nonce: a cancellation is its `UnorderedNonceInvalidation` log, and the transaction that used it is found
//!   among the newest 64 `Transfer(payer, payTo)` logs of the token by its call to the proxy with the payment's
//!   owner and nonce (a settlement made through another contract is not recognised: it counts as no log in
//!   reach, below).
//!
//! For every payment it:
//!
//! 1. **simulates** `transferWithAuthorization` with `eth_call` from the relayer (in [`Settler::verify`]) and
//!    with `eth_estimateGas` (in [`Settler::settle`]): this is what catches an insufficient balance, a nonce
//!    already used on chain, a wrong EIP-712 domain (name/version), a payer with code whose ERC-1271
//!    `isValidSignature` refuses, a paused token or a blacklisted account. The token's revert string is mapped
//!    to the spec's error string (`insufficient_funds`, `invalid_exact_evm_nonce_already_used`,
//!    `invalid_exact_evm_payload_signature`, `invalid_exact_evm_payload_authorization_valid_after` /
//!    `_valid_before`, otherwise `invalid_transaction_state` with the token's message);
//! 2. **sends** an EIP-1559 transaction: a 65-byte signature through the `(v, r, s)` overload (`0xe3ee160e`,
//!    every USDC version), a longer one (ERC-1271, EIP-6492) through the `bytes` overload (`0xcf092995`,
//!    FiatTokenV2_2). Its fees come from one quote (`eth_gasPrice`, `eth_maxPriorityFeePerGas`) shared by
//!    the transactions of the next second ([`OnchainSettlerBuilder::fee_quote_ttl`]), and it is signed with
//!    libsecp256k1 (2.5x faster than alloy's k256 signer): a settlement asks the node three times in the
//!    usual case (gas estimate, send, receipt) besides the verify's simulation;
//! 3. **waits for the receipt** (polling, with a timeout) and checks that the `Transfer(from, to, value)` log of
//!    the token really is in it, then reports the transaction hash.
//!
//! Outcomes: a failure before broadcast is [`SettleOutcome::Failed`] with `authorization_still_usable: true`;
//! a reverted transaction is `Failed` and still usable when `authorizationState(from, nonce)` is false; a
//! broadcast whose receipt does not come in time (or a send whose answer was lost) is
//! [`SettleOutcome::Unknown`] with the transaction hash: not a success, not a failure. Node and gas errors are
//! reported in the message, never swallowed.
//!
//! **An authorization used by another transaction.** When the simulation says the nonce is used before
//! anything is sent (another facilitator, or anybody holding the signed authorization, broadcast it first),
//! when ours reverted because the nonce is used, or when no transaction of ours is known (the process died
//! awaiting its receipt, so its hash was never recorded), the token's own `AuthorizationUsed` /
//! `AuthorizationCanceled` log for `(from, nonce)` names the transaction (searched in the last
//! [`OnchainSettlerBuilder::log_lookback_blocks`] blocks): if it logged the payment's `Transfer(from, to,
//! value)`, the payment is **settled** with that transaction, whoever sent it (the payer's money moved
//! exactly as signed), and `verify` finds it valid; cancelled by the payer, or a transfer under the same
//! nonce that is not this payment: failed for good (`verify` names the cancelling transaction in its
//! message). No log in reach: if this settler may have sent the transaction (ours reverted, or its hash was
//! never recorded), unknown (pending), never refused; if it sent nothing (`verify`, or a send the simulation
//! refused), the authorization's state 64 blocks back decides: already used then, the use is older than the
//! lookback, so it is no payment made within its window (clients sign one to be used within
//! `maxTimeoutSeconds`): failed for good, with nothing left to reconcile; not used then, the use is recent
//! and its log may not be indexed yet: unknown. Unknown makes `verify` an error (retryable), never a refusal.
//! Keep the lookback longer than a payment record's life (its window plus `keep_after_expiry`: 20 minutes by
//! default; the default 10,000 blocks are, on chains with blocks of 0.12 s or more), so that a use by this
//! settler, or by anybody within a payment's window, is always within reach. So settling an authorization
//! twice reports the one transfer twice: refusing it for a second resource is the payment store's job
//! ([`PaymentEngine`](crate::engine::PaymentEngine)), not the chain's. It follows that a transfer to `payTo`
//! made through another deployment (another payment store) is accepted here, once, as payment for the offer it
//! signs (its exact amount and `payTo`, still unexpired): deployments that share a `payTo` must share one
//! store.
//!
//! **Reconciliation** ([`Settler::reconcile`]) never broadcasts: it reads the receipt of the reported
//! transaction (mined: judged as above); a transaction the node still holds stays unknown; with no
//! transaction (or a dropped one) `authorizationState(from, nonce)` decides: unused → failed and still usable
//! (the engine settles anew), used → decided by the transaction that used it, as above.
//!
//! **Relayer nonces.** One relayer key serves concurrent settlements: a local nonce manager hands out
//! consecutive nonces (read once with `eth_getTransactionCount(relayer, "pending")`) and only the signing and
//! `eth_sendRawTransaction` run under its lock, so sends are ordered by nonce while the receipts are awaited
//! concurrently (pipelining). A send the node refuses does not consume the nonce (a refused *nonce*, when
//! the key was used elsewhere, is re-read and the send tried once more); a send whose answer is lost, or
//! whose future is dropped mid-flight (the client went away during settlement), makes the manager re-read
//! the pending count before the next one. (alloy's nonce fillers are not used for this: a cached nonce
//! manager cannot know that a send whose answer was lost may have taken its nonce, and a filler does not
//! hold the order between signing and sending.)
//!
//! **Transport.** JSON-RPC goes through `alloy-provider` (its reqwest transport, rustls on ring, no fillers:
//! nonce, gas and fees are set here and the transaction is signed locally), with every call bounded by the
//! builder's `rpc_timeout`. The node is the operator's: its answers are read whole, as alloy reads them.
//!
//! ```no_run
//! use std::time::Duration;
//! use x402_tower::settle::onchain::OnchainSettler;
//!
//! let settler = OnchainSettler::builder(
//!     "http://127.0.0.1:8545",
//!     "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d", // anvil account #1
//! )
//! .receipt_timeout(Duration::from_secs(60))
//! .build()
//! .unwrap();
//! println!("relayer {}", settler.relayer());
//! ```

mod builder;
mod nonce;
mod payment;
mod revert;
mod rpc;
mod shared;
#[cfg(test)]
mod tests;
mod token;
mod used;

use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy_consensus::{SignableTransaction, TxEip1559, TxEnvelope};
use alloy_eips::BlockId;
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, B256, Bytes, TxKind, U256};
use alloy_sol_types::SolCall;
use serde_json::{Value, json};
use tracing::{Instrument, debug_span, warn};

pub use builder::{OnchainConfigError, OnchainSettlerBuilder};
pub use payment::settlement_call;
pub use rpc::RpcError;

use self::nonce::NonceManager;
use self::payment::{OnChain, view};
use self::revert::Revert;
use self::shared::Shared;
use self::token::{Receipt, UNSUPPORTED, isValidSignatureCall, unsupported};
use self::used::Ours;
use super::{SettleError, SettleOutcome, SettleRequest, Settler, VerifyOutcome};
use crate::boxed::BoxFuture;
use crate::proto::{SCHEME_EXACT, SupportedKind, SupportedResponse};
use crate::scheme::SCHEME_UPTO;
use crate::secp::SecretSigner;
use crate::verify::RejectReason;

/// A [`Settler`] that settles on chain with a relayer key. See the [module docs](self).
#[derive(Clone)]
pub struct OnchainSettler {
    inner: Arc<Inner>,
}

struct Inner {
    rpc: rpc::Rpc,
    rpc_url: String,
    relayer: Address,
    signer: SecretSigner,
    /// Asked once (by one settlement at a time until it answers), then kept.
    chain_id: Shared<u64>,
    nonces: NonceManager,
    receipt_timeout: Duration,
    rpc_timeout: Duration,
    poll_interval: Duration,
    gas_margin_percent: u64,
    /// The fee quote, shared for `fee_quote_ttl`.
    fees: Shared<FeeQuote>,
    fee_quote_ttl: Duration,
    log_lookback_blocks: u64,
}

/// `eth_gasPrice` and `eth_maxPriorityFeePerGas` as the node answered them.
#[derive(Debug, Clone, Copy)]
struct FeeQuote {
    gas_price: u128,
    tip: u128,
}

impl std::fmt::Debug for OnchainSettler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnchainSettler")
            .field("rpc_url", &self.inner.rpc_url)
            .field("relayer", &self.inner.relayer)
            .field("receipt_timeout", &self.inner.receipt_timeout)
            .finish_non_exhaustive()
    }
}

impl OnchainSettler {
    /// How many blocks back the token's authorization logs are searched
    /// ([`OnchainSettlerBuilder::log_lookback_blocks`]).
    pub fn log_lookback_blocks(&self) -> u64 {
        self.inner.log_lookback_blocks
    }

    /// The relayer's address (it sends the transactions and pays the gas).
    pub fn relayer(&self) -> Address {
        self.inner.relayer
    }

    /// Sends a transaction from the relayer calling `to` with `input` (gas estimated, so a call that would
    /// revert is [`SendError::NotSent`] with the revert), through the same nonce manager as the settlements:
    /// an application can use the relayer for its own transactions (minting license tokens...) beside them.
    pub async fn send_transaction(&self, to: Address, input: Bytes) -> Result<B256, SendError> {
        self.inner.send_tx(TxKind::Call(to), input).await
    }

    /// Deploys a contract from the relayer (`init_code`: creation bytecode and constructor arguments) and
    /// waits for it: its address.
    pub async fn deploy_contract(&self, init_code: Bytes) -> Result<Address, SendError> {
        let hash = self.inner.send_tx(TxKind::Create, init_code).await?;
        let unknown = |message: String| SendError::Unknown { message, hash };
        let receipt = self.inner.wait_receipt(hash).await.map_err(unknown)?;
        match (receipt.succeeded(), receipt.contract_address) {
            (true, Some(address)) => Ok(address),
            _ => Err(SendError::NotSent {
                reason: "unexpected_settle_error",
                message: format!("deployment {hash} reverted"),
            }),
        }
    }

    /// Waits (up to the receipt timeout) for the receipt of `hash`: `Ok(true)` mined and succeeded,
    /// `Ok(false)` mined and reverted, `Err` no receipt in time (it may still be mined).
    pub async fn transaction_succeeded(&self, hash: B256) -> Result<bool, String> {
        let receipt = self.inner.wait_receipt(hash).await?;
        Ok(receipt.succeeded())
    }

    /// `eth_call` of `to` with `input` at the latest block.
    pub async fn call(&self, to: Address, input: Bytes) -> Result<Bytes, RpcError> {
        self.inner
            .rpc
            .call(rpc::call_request(None, to, input))
            .await
    }

    /// The chain id of the node (asked once, then cached).
    pub async fn chain_id(&self) -> Result<u64, RpcError> {
        self.inner.chain_id().await
    }

    /// Whether the contract at `wallet` accepts `signature` over `hash` (EIP-1271 `isValidSignature` answering
    /// `0x1626ba7e`, read with `eth_call`); `false` for a refusal, a revert or an address without code.
    pub async fn is_valid_signature(
        &self,
        wallet: Address,
        hash: B256,
        signature: &[u8],
    ) -> Result<bool, RpcError> {
        let data: Bytes = isValidSignatureCall {
            hash,
            signature: Bytes::copy_from_slice(signature),
        }
        .abi_encode()
        .into();
        match self
            .inner
            .rpc
            .call(rpc::call_request(None, wallet, data))
            .await
        {
            Ok(out) => Ok(out.len() >= 4 && out[..4] == [0x16, 0x26, 0xba, 0x7e]),
            Err(e) if e.is_rejection() => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl crate::extensions::siwx::ContractWallets for OnchainSettler {
    fn is_valid_signature<'a>(
        &'a self,
        wallet: Address,
        hash: B256,
        signature: &'a [u8],
    ) -> BoxFuture<'a, Result<bool, crate::store::StoreError>> {
        Box::pin(async move {
            OnchainSettler::is_valid_signature(self, wallet, hash, signature)
                .await
                .map_err(|e| crate::store::StoreError::Backend(Box::new(e)))
        })
    }
}

/// How sending a transaction ended before its receipt ([`OnchainSettler::send_transaction`], and each
/// settlement).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// Nothing reached the chain (refused by the node, or the gas estimate reverted).
    #[error("not sent ({reason}): {message}")]
    NotSent {
        /// The x402 error string it maps to (`unexpected_settle_error`, or a revert's reason).
        reason: &'static str,
        /// What happened.
        message: String,
    },
    /// The transaction may have been broadcast.
    #[error("{message}")]
    Unknown {
        /// What happened.
        message: String,
        /// Its hash.
        hash: B256,
    },
}

impl Inner {
    async fn chain_id(&self) -> Result<u64, RpcError> {
        self.chain_id.get(None, || self.rpc.chain_id()).await
    }

    /// Checks the chain id against the offer's; `Err` carries the mismatch message.
    async fn check_network(&self, request: &SettleRequest) -> Result<Result<(), String>, RpcError> {
        let node = self.chain_id().await?;
        let offered = request.offer.network.chain_id();
        Ok(if node == offered {
            Ok(())
        } else {
            Err(format!(
                "the JSON-RPC node is chain {node}, the payment is for chain {offered}"
            ))
        })
    }

    /// Simulates with `eth_call`: `Ok(None)` = would succeed, `Ok(Some(revert))` = would revert. When
    /// Permit2 could not move the payer's tokens, their balance and allowance say why.
    async fn simulate(&self, request: &SettleRequest) -> Result<Option<Revert>, RpcError> {
        let pay = view(request);
        let call = rpc::call_request(Some(self.relayer), pay.target(), pay.calldata());
        match self.rpc.call(call).await {
            Ok(_) => Ok(None),
            Err(e) => {
                let revert = revert::from_rpc(&e).ok_or(e)?;
                self.explain(request, revert).await.map(Some)
            }
        }
    }

    /// A revert as the payer should read it: when Permit2 could not move the payer's tokens, their balance
    /// and allowance say why (`permit2_allowance_required`, `permit2_insufficient_balance`).
    async fn explain(&self, request: &SettleRequest, revert: Revert) -> Result<Revert, RpcError> {
        if revert.reason != revert::PERMIT2_TRANSFER_FAILED {
            return Ok(revert);
        }
        let m = view(request).movement();
        let (balance, allowance) = payment::funds_queries(m.from);
        let (balance, allowance) = tokio::join!(
            self.rpc.call(rpc::call_request(None, m.token, balance)),
            self.rpc.call(rpc::call_request(None, m.token, allowance)),
        );
        let (balance, allowance) = (payment::word(&balance?), payment::word(&allowance?));
        Ok(revert::permit2_funds(revert, m.value, balance, allowance))
    }

    async fn authorization_used(&self, request: &SettleRequest) -> Result<bool, RpcError> {
        self.authorization_used_at(request, BlockId::latest()).await
    }

    /// Whether the payment's nonce is spent as of `block`: the token's `authorizationState(from, nonce)`,
    /// or Permit2's bitmap.
    async fn authorization_used_at(
        &self,
        request: &SettleRequest,
        block: BlockId,
    ) -> Result<bool, RpcError> {
        let pay = view(request);
        let (to, data) = pay.nonce_query();
        let out = self
            .rpc
            .call_at(rpc::call_request(None, to, data), block)
            .await?;
        Ok(pay.nonce_spent(&out))
    }

    /// Estimates gas (a second simulation) and fees, then signs and sends under the nonce lock.
    async fn send(&self, request: &SettleRequest) -> Result<B256, SendError> {
        let not_sent = |e: RpcError| SendError::NotSent {
            reason: "unexpected_settle_error",
            message: e.to_string(),
        };
        match self.check_network(request).await.map_err(not_sent)? {
            Ok(()) => {}
            Err(message) => {
                return Err(SendError::NotSent {
                    reason: "invalid_network",
                    message,
                });
            }
        }
        let pay = view(request);
        match self
            .send_tx(TxKind::Call(pay.target()), pay.calldata())
            .await
        {
            Err(SendError::NotSent { reason, message })
                if reason == revert::PERMIT2_TRANSFER_FAILED =>
            {
                let revert = Revert { reason, message };
                let explained = self.explain(request, revert.clone()).await;
                let Revert { reason, message } = explained.unwrap_or(revert);
                Err(SendError::NotSent { reason, message })
            }
            sent => sent,
        }
    }

    /// Estimates gas and fees for calling `to` with `input` from the relayer, then signs and sends under the
    /// nonce lock.
    async fn send_tx(&self, to: TxKind, input: Bytes) -> Result<B256, SendError> {
        let not_sent = |e: RpcError| SendError::NotSent {
            reason: "unexpected_settle_error",
            message: e.to_string(),
        };
        let chain_id = self.chain_id().await.map_err(not_sent)?;
        let call = alloy_rpc_types_eth::TransactionRequest {
            from: Some(self.relayer),
            to: Some(to),
            input: alloy_rpc_types_eth::TransactionInput::both(input.clone()),
            ..Default::default()
        };
        let (gas, fees) = tokio::join!(self.rpc.estimate_gas(call), self.fees());
        let gas = match gas {
            Ok(g) => g,
            Err(e) => {
                return Err(match revert::from_rpc(&e) {
                    Some(r) => SendError::NotSent {
                        reason: r.reason,
                        message: r.message,
                    },
                    None => not_sent(e),
                });
            }
        };
        let FeeQuote { gas_price, tip } = fees.map_err(not_sent)?;

        let tx = TxEip1559 {
            chain_id,
            nonce: 0,
            gas_limit: gas.saturating_mul(100 + self.gas_margin_percent) / 100,
            max_fee_per_gas: gas_price.saturating_mul(2).saturating_add(tip),
            max_priority_fee_per_gas: tip,
            to,
            value: U256::ZERO,
            access_list: Default::default(),
            input,
        };

        let mut slot = self.nonces.lock().await;
        // Two attempts: a node that refuses our nonce (another process used the relayer key) gets the
        // count re-read once.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let nonce = match slot.get() {
                Some(n) => n,
                None => self
                    .rpc
                    .pending_count(self.relayer)
                    .await
                    .map_err(not_sent)?,
            };
            let mut tx = tx.clone();
            tx.nonce = nonce;
            let signature = self.signer.sign(&tx.signature_hash());
            let envelope = TxEnvelope::from(tx.into_signed(signature));
            let hash = *envelope.tx_hash();
            let raw = envelope.encoded_2718();
            // Until the node answers, the next nonce is unknown: if this future is dropped mid-send (the
            // client went away during settlement), the next settlement re-reads the pending count instead of
            // reusing a nonce that may already be taken by a pending transaction.
            slot.set(None);
            match self.rpc.send_raw(&raw).await {
                Ok(_) => {
                    slot.set(Some(nonce + 1));
                    return Ok(hash);
                }
                Err(e) if e.is_rejection() => {
                    // Refused by the node: the nonce is not consumed. Re-read it in case ours was stale.
                    let refusal = e.to_string().to_ascii_lowercase();
                    if attempt < 2 && refusal.contains("nonce") {
                        warn!(error = %e, "relayer nonce refused; re-reading it");
                        continue;
                    }
                    if refusal.contains("fee") || refusal.contains("underpriced") {
                        // Fees too low for the node now: the next transaction asks for a new quote.
                        self.fees.forget();
                    }
                    return Err(SendError::NotSent {
                        reason: "unexpected_settle_error",
                        message: e.to_string(),
                    });
                }
                Err(e) => {
                    return Err(SendError::Unknown {
                        message: format!("transaction {hash} may have been broadcast: {e}"),
                        hash,
                    });
                }
            }
        }
    }

    /// The fee quote: the shared one while it is younger than `fee_quote_ttl`, else a new one.
    async fn fees(&self) -> Result<FeeQuote, RpcError> {
        let ask = || async {
            let (gas_price, tip) = tokio::join!(self.rpc.gas_price(), self.rpc.max_priority_fee());
            Ok(FeeQuote {
                gas_price: gas_price?,
                tip: tip?,
            })
        };
        self.fees.get(Some(self.fee_quote_ttl), ask).await
    }

    async fn wait_receipt(&self, hash: B256) -> Result<Receipt, String> {
        let deadline = Instant::now() + self.receipt_timeout;
        let mut interval = self.poll_interval;
        let mut last_error = None;
        loop {
            match self
                .rpc
                .by_hash::<Option<Receipt>>("eth_getTransactionReceipt", hash)
                .await
            {
                Ok(Some(receipt)) => return Ok(receipt),
                Ok(None) => {}
                Err(e) => {
                    warn!(%hash, error = %e, "receipt poll failed");
                    last_error = Some(e);
                }
            }
            let now = Instant::now();
            if now >= deadline {
                let mut message = format!(
                    "transaction {hash} was broadcast but no receipt came within {:?}",
                    self.receipt_timeout
                );
                if let Some(e) = last_error {
                    message.push_str(&format!(" (last poll error: {e})"));
                }
                return Err(message);
            }
            tokio::time::sleep(interval.min(deadline - now)).await;
            interval = (interval * 2).min(Duration::from_secs(1));
        }
    }

    async fn settle(&self, request: &SettleRequest) -> SettleOutcome {
        let hash = match self.send(request).await {
            Ok(hash) => hash,
            Err(SendError::NotSent { reason, message }) if revert::spends_used_nonce(reason) => {
                // Used before this settler sent anything: by whom, and did it pay this offer?
                return self.used_elsewhere(request, Ours::Nothing, &message).await;
            }
            Err(SendError::NotSent { reason, message }) => {
                return SettleOutcome::Failed {
                    reason: reason.to_owned(),
                    message: Some(message),
                    authorization_still_usable: true,
                };
            }
            Err(SendError::Unknown { message, hash }) => {
                return SettleOutcome::Unknown {
                    message,
                    transaction: Some(format!("{hash}")),
                };
            }
        };
        let receipt = match self.wait_receipt(hash).await {
            Ok(r) => r,
            Err(message) => {
                return SettleOutcome::Unknown {
                    message,
                    transaction: Some(format!("{hash}")),
                };
            }
        };
        self.judge(request, hash, &receipt).await
    }

    /// What a mined transaction did to the payment: settled when it succeeded with the expected
    /// `Transfer(from, to, value)` log. Reverted: still usable if the nonce is unused, else decided by the
    /// transaction that did use it ([`Inner::used_elsewhere`]); unknown while the nonce cannot be read.
    async fn judge(&self, request: &SettleRequest, hash: B256, receipt: &Receipt) -> SettleOutcome {
        if !receipt.succeeded() {
            let reverted = format!("transaction {hash} reverted");
            return match self.authorization_used(request).await {
                Ok(false) => SettleOutcome::Failed {
                    reason: "invalid_transaction_state".to_owned(),
                    message: Some(reverted),
                    authorization_still_usable: true,
                },
                Ok(true) => {
                    self.used_elsewhere(request, Ours::Sent(hash), &reverted)
                        .await
                }
                Err(e) => SettleOutcome::Unknown {
                    message: format!("{reverted}; authorizationState unreadable: {e}"),
                    transaction: Some(format!("{hash}")),
                },
            };
        }
        if !receipt.pays(view(request).movement()) {
            return SettleOutcome::Failed {
                reason: "invalid_transaction_state".to_owned(),
                message: Some(format!(
                    "transaction {hash} succeeded without the expected Transfer log"
                )),
                authorization_still_usable: false,
            };
        }
        Self::settled(request, hash)
    }

    fn settled(request: &SettleRequest, hash: B256) -> SettleOutcome {
        SettleOutcome::Settled {
            transaction: format!("{hash}"),
            payer: request.payer(),
            network: request.wire_network(),
        }
    }

    /// Reconciles an unknown outcome from the chain, never broadcasting: the receipt of `transaction` when
    /// there is one; otherwise (or while it is not mined) the transaction's presence and the authorization's
    /// state.
    async fn reconcile(&self, request: &SettleRequest, transaction: Option<&str>) -> SettleOutcome {
        let unknown = |message: String| SettleOutcome::Unknown {
            message,
            transaction: transaction.map(str::to_owned),
        };
        let hash = transaction.and_then(|t| t.parse::<B256>().ok());
        if let Some(hash) = hash {
            match self
                .rpc
                .by_hash::<Option<Receipt>>("eth_getTransactionReceipt", hash)
                .await
            {
                Ok(Some(receipt)) => return self.judge(request, hash, &receipt).await,
                Ok(None) => {}
                Err(e) => return unknown(format!("receipt of {hash} unreadable: {e}")),
            }
            match self
                .rpc
                .by_hash::<Option<Value>>("eth_getTransactionByHash", hash)
                .await
            {
                Ok(Some(_)) => return unknown(format!("transaction {hash} is not mined yet")),
                Ok(None) => {}
                Err(e) => return unknown(format!("transaction {hash} unreadable: {e}")),
            }
        }
        // No transaction of ours is known to the node (never sent, dropped, or its hash was never
        // recorded: the process died awaiting its receipt).
        match self.authorization_used(request).await {
            Ok(false) => SettleOutcome::Failed {
                reason: "unexpected_settle_error".to_owned(),
                message: Some("no settlement transaction reached the chain".to_owned()),
                authorization_still_usable: true,
            },
            Ok(true) => {
                let context = match hash {
                    Some(hash) => format!("transaction {hash} is unknown to the node"),
                    None => "no settlement transaction is recorded".to_owned(),
                };
                let ours = hash.map_or(Ours::Unrecorded, Ours::Sent);
                self.used_elsewhere(request, ours, &context).await
            }
            Err(e) => unknown(format!("authorizationState unreadable: {e}")),
        }
    }
}

/// Why a payment's `eip2612GasSponsoring` permit is refused, when it is.
const BAD_SPONSORING: &str = "the eip2612GasSponsoring permit is malformed, expired or not for this payer, token and Permit2";

/// The official code refusing a Permit2 payment's EIP-2612 permit (malformed, expired, not the payer's, not
/// for the token or for Permit2), if it carries one that does not do.
fn bad_sponsoring(request: &SettleRequest) -> Option<&'static str> {
    let payment = request
        .authorized
        .details::<crate::scheme::Permit2Payment>()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    payment::sponsoring(request, payment, now)?.err()
}

/// A JSON-RPC failure as the settler trait reports it.
fn settle_error(e: RpcError) -> SettleError {
    match e {
        RpcError::Timeout { .. } => SettleError::Timeout,
        RpcError::BadResponse { .. } => SettleError::BadResponse(e.to_string()),
        other => SettleError::Transport(other.to_string()),
    }
}

impl Settler for OnchainSettler {
    fn verify<'a>(
        &'a self,
        request: &'a SettleRequest,
    ) -> BoxFuture<'a, Result<VerifyOutcome, SettleError>> {
        let span = debug_span!("x402.onchain.simulate", payer = %request.payer());
        Box::pin(
            async move {
                if OnChain::of(request).is_none() {
                    return Ok(VerifyOutcome::Invalid {
                        reason: RejectReason::InvalidScheme.as_str().to_owned(),
                        message: Some(UNSUPPORTED.to_owned()),
                    });
                }
                if let Some(code) = bad_sponsoring(request) {
                    return Ok(VerifyOutcome::Invalid {
                        reason: code.to_owned(),
                        message: Some(BAD_SPONSORING.to_owned()),
                    });
                }
                if let Err(message) = self
                    .inner
                    .check_network(request)
                    .await
                    .map_err(settle_error)?
                {
                    return Ok(VerifyOutcome::Invalid {
                        reason: "invalid_network".to_owned(),
                        message: Some(message),
                    });
                }
                Ok(
                    match self.inner.simulate(request).await.map_err(settle_error)? {
                        None => VerifyOutcome::Valid,
                        Some(revert) if revert::spends_used_nonce(revert.reason) => {
                            return self.inner.verify_used(request, revert).await;
                        }
                        Some(revert) => VerifyOutcome::Invalid {
                            reason: revert.reason.to_owned(),
                            message: Some(revert.message),
                        },
                    },
                )
            }
            .instrument(span),
        )
    }

    fn settle<'a>(&'a self, request: &'a SettleRequest) -> BoxFuture<'a, SettleOutcome> {
        let span = debug_span!("x402.onchain.settle", payer = %request.payer());
        if OnChain::of(request).is_none() {
            return Box::pin(std::future::ready(unsupported()));
        }
        if let Some(code) = bad_sponsoring(request) {
            return Box::pin(std::future::ready(SettleOutcome::Failed {
                reason: code.to_owned(),
                message: Some(BAD_SPONSORING.to_owned()),
                authorization_still_usable: true,
            }));
        }
        Box::pin(self.inner.settle(request).instrument(span))
    }

    /// The simulation in [`verify`](Settler::verify) and the gas estimate of a settlement run the token's or
    /// Permit2's own signature check, which asks a payer with code (EIP-1271).
    fn checks_contract_wallets(&self) -> bool {
        true
    }

    /// The send phase (chain id, gas estimate beside the fee quote, relayer nonce, two send attempts: at most
    /// five JSON-RPC calls one after the other; a settlement waiting for another's chain id or fee quote
    /// takes that answer) and the wait for the receipt.
    fn settle_deadline(&self) -> Option<Duration> {
        Some(self.inner.receipt_timeout + self.inner.rpc_timeout * 5)
    }

    fn reconcile<'a>(
        &'a self,
        request: &'a SettleRequest,
        transaction: Option<&'a str>,
    ) -> BoxFuture<'a, SettleOutcome> {
        let span = debug_span!("x402.onchain.reconcile", payer = %request.payer(), ?transaction);
        if OnChain::of(request).is_none() {
            return Box::pin(std::future::ready(unsupported()));
        }
        Box::pin(self.inner.reconcile(request, transaction).instrument(span))
    }

    fn supported(&self) -> BoxFuture<'_, Result<SupportedResponse, SettleError>> {
        Box::pin(async move {
            let chain_id = self
                .inner
                .chain_id()
                .await
                .map_err(|e| SettleError::Transport(e.to_string()))?;
            let network = crate::network::Network::from_chain_id(chain_id);
            let mut kinds = vec![SupportedKind {
                x402_version: 2,
                scheme: SCHEME_EXACT.to_owned(),
                network: network.caip2().to_owned(),
                extra: None,
            }];
            if let Some(v1) = network.legacy_v1_name() {
                kinds.push(SupportedKind {
                    x402_version: 1,
                    scheme: SCHEME_EXACT.to_owned(),
                    network: v1.to_owned(),
                    extra: None,
                });
            }
            // `upto` over Permit2: the proxy lets only the address the payer signed as facilitator settle,
            // and this settler's transactions come from its relayer.
            kinds.push(SupportedKind {
                x402_version: 2,
                scheme: SCHEME_UPTO.to_owned(),
                network: network.caip2().to_owned(),
                extra: Some(json!({ crate::scheme::FACILITATOR_ADDRESS: self.inner.relayer })),
            });
            let mut signers = serde_json::Map::new();
            signers.insert("eip155:*".to_owned(), json!([self.inner.relayer]));
            Ok(SupportedResponse {
                kinds,
                extensions: vec![json!(crate::extensions::gas_sponsoring::KEY)],
                signers,
            })
        })
    }
}
