//! An authorization the chain shows spent, and not by a transaction this settler knows it sent: which
//! transaction spent it, and whether that paid this offer.

use alloy_eips::BlockId;
use alloy_primitives::{Address, B256, Bytes};
use alloy_sol_types::SolEvent;
use serde_json::json;

use super::payment::{OnChain, UnorderedNonceInvalidation, view};
use super::revert::Revert;
use super::token::{AuthorizationCanceled, AuthorizationUsed, Receipt, Transfer};
use super::{Inner, RpcError, rpc};
use crate::scheme::PERMIT2;
use crate::settle::{SettleError, SettleOutcome, SettleRequest, VerifyOutcome};

impl Inner {
    /// The authorization is used on chain, and not by a transaction of this settler known to have used it
    /// (`ours`): the token's own `AuthorizationUsed` / `AuthorizationCanceled` log says by which
    /// transaction. Whoever sent it, a transaction that used this authorization and logged its
    /// `Transfer(from, to, value)` moved exactly what the payer signed for this offer: **settled**, with
    /// that transaction (a relayer killed while awaiting its receipt, a second broadcast that lost the race
    /// to the first, a third party who broadcast the signed authorization). Cancelled by the payer, or used
    /// for another transfer under the same nonce: failed for good. No log within
    /// [`OnchainSettlerBuilder::log_lookback_blocks`]:
    ///
    /// - when this settler may have sent the transaction ([`Ours::Sent`], [`Ours::Unrecorded`]): unknown, so
    ///   the payment stays pending instead of being refused after its money may have moved;
    /// - when it sent nothing ([`Ours::Nothing`]): the authorization's state [`RECENT_BLOCKS`] blocks ago
    ///   decides. Used already then, the use is older than the lookback: no payment made within its window
    ///   (a client signs one to be used within `maxTimeoutSeconds`), and nothing of ours: failed for good.
    ///   Not used then, the use is recent and its log may not be indexed yet: unknown.
    ///
    /// A node that cannot answer: unknown.
    pub(super) async fn used_elsewhere(
        &self,
        request: &SettleRequest,
        ours: Ours,
        context: &str,
    ) -> SettleOutcome {
        let transaction = ours.transaction();
        let unknown = |message: String, found: Option<B256>| SettleOutcome::Unknown {
            message: format!("{context}; {message}"),
            transaction: found.or(transaction).map(|t| format!("{t}")),
        };
        let spent = |message: String| SettleOutcome::Failed {
            reason: view(request).spent_reason().to_owned(),
            message: Some(format!("{context}; {message}")),
            authorization_still_usable: false,
        };
        let (found, latest) = match self.authorization_log(request).await {
            Ok(read) => read,
            Err(e) => {
                return unknown(
                    format!("the token's authorization logs unreadable: {e}"),
                    None,
                );
            }
        };
        let Some((use_, hash)) = found else {
            let none = format!(
                "the authorization is used, and the token logged no use of it in the last {} blocks",
                self.log_lookback_blocks
            );
            if !matches!(ours, Ours::Nothing) {
                return unknown(none, None);
            }
            let before = latest.saturating_sub(RECENT_BLOCKS);
            return match self
                .authorization_used_at(request, BlockId::number(before))
                .await
            {
                Ok(true) => spent(format!(
                    "{none}; it was used by block {before} already: not a payment made within its window"
                )),
                Ok(false) => unknown(
                    format!(
                        "{none}; it was used within the last {RECENT_BLOCKS} blocks, whose logs may not be \
                         indexed yet"
                    ),
                    None,
                ),
                Err(e) => unknown(
                    format!("{none}; its state at block {before} unreadable: {e}"),
                    None,
                ),
            };
        };
        if use_ == NonceUse::Cancelled {
            return spent(format!("the payer cancelled the authorization in {hash}"));
        }
        match self
            .rpc
            .by_hash::<Option<Receipt>>("eth_getTransactionReceipt", hash)
            .await
        {
            Ok(Some(receipt)) if receipt.succeeded() && receipt.pays(view(request).movement()) => {
                Self::settled(request, hash)
            }
            Ok(Some(_)) => spent(format!(
                "transaction {hash} used the nonce without paying this offer"
            )),
            Ok(None) => unknown(format!("the receipt of {hash} is gone"), Some(hash)),
            Err(e) => unknown(format!("receipt of {hash} unreadable: {e}"), Some(hash)),
        }
    }

    /// Verification of an authorization the token says is used (`revert`), before this settler sent
    /// anything ([`Inner::used_elsewhere`] with [`Ours::Nothing`]): **valid** when its log names a
    /// transaction that paid exactly this offer (settling reports that transaction, sending nothing);
    /// refused when it is decided otherwise (cancelled by the payer, a transfer that is not this payment, a
    /// use older than the lookback), with what decided it; an error (retryable), never a refusal, when it
    /// is not known (a recent use not logged yet, a node that cannot answer): the money may have moved.
    pub(super) async fn verify_used(
        &self,
        request: &SettleRequest,
        revert: Revert,
    ) -> Result<VerifyOutcome, SettleError> {
        match self
            .used_elsewhere(request, Ours::Nothing, &revert.message)
            .await
        {
            SettleOutcome::Settled { .. } => Ok(VerifyOutcome::Valid),
            SettleOutcome::Failed {
                reason, message, ..
            } => Ok(VerifyOutcome::Invalid { reason, message }),
            SettleOutcome::Unknown { message, .. } => Err(SettleError::Transport(message)),
        }
    }

    /// The transaction that spent the payment's nonce in the last `log_lookback_blocks` blocks (how, and
    /// its hash), and the latest block then. EIP-3009: the token's `AuthorizationUsed` or
    /// `AuthorizationCanceled` log for `(from, nonce)`. Permit2 logs no use of a nonce: Permit2's
    /// `UnorderedNonceInvalidation` covering it is a cancellation, and a use is a transaction calling the
    /// payment's proxy with its owner and nonce that left a `Transfer(from, to)` log of the token (the
    /// newest [`PERMIT2_CANDIDATES`] such logs are read; a settlement made through another contract is not
    /// recognised, so it counts as no log in reach).
    async fn authorization_log(
        &self,
        request: &SettleRequest,
    ) -> Result<(Option<(NonceUse, B256)>, u64), RpcError> {
        let latest = self.rpc.block_number().await?;
        let from_block = format!("{:#x}", latest.saturating_sub(self.log_lookback_blocks));
        let to_block = format!("{latest:#x}");
        let pay = view(request);
        let found = match pay {
            OnChain::Eip3009 { token, payment } => {
                let auth = &payment.authorization;
                let filter = json!({
                    "address": token,
                    "fromBlock": from_block,
                    "toBlock": to_block,
                    "topics": [
                        [AuthorizationUsed::SIGNATURE_HASH, AuthorizationCanceled::SIGNATURE_HASH],
                        auth.from.into_word(),
                        auth.nonce,
                    ],
                });
                let logs: Vec<rpc::FoundLog> = self.rpc.logs(filter).await?;
                // A nonce is used or cancelled once; a log of a block since reorganised away is `removed`.
                logs.into_iter().rev().find_map(|log| {
                    let event = *log.topics.first()?;
                    let use_ = if event == AuthorizationUsed::SIGNATURE_HASH {
                        NonceUse::Used
                    } else if event == AuthorizationCanceled::SIGNATURE_HASH {
                        NonceUse::Cancelled
                    } else {
                        return None;
                    };
                    let matches = !log.removed
                        && log.address == token
                        && log.topics.get(1) == Some(&auth.from.into_word())
                        && log.topics.get(2) == Some(&auth.nonce);
                    matches.then_some((use_, log.transaction_hash?))
                })
            }
            OnChain::Permit2 { .. } => self.permit2_use(pay, &from_block, &to_block).await?,
        };
        Ok((found, latest))
    }

    /// [`Inner::authorization_log`] for a Permit2 payment.
    async fn permit2_use(
        &self,
        pay: OnChain<'_>,
        from_block: &str,
        to_block: &str,
    ) -> Result<Option<(NonceUse, B256)>, RpcError> {
        let m = pay.movement();
        let cancellations = json!({
            "address": PERMIT2,
            "fromBlock": from_block,
            "toBlock": to_block,
            "topics": [UnorderedNonceInvalidation::SIGNATURE_HASH, m.from.into_word()],
        });
        let transfers = json!({
            "address": m.token,
            "fromBlock": from_block,
            "toBlock": to_block,
            "topics": [Transfer::SIGNATURE_HASH, m.from.into_word(), m.to.into_word()],
        });
        let (cancellations, transfers) =
            tokio::join!(self.rpc.logs(cancellations), self.rpc.logs(transfers));
        let cancelled = cancellations?.into_iter().rev().find_map(|log| {
            let cancels = !log.removed && log.address == PERMIT2 && pay.is_cancelled_by(&log.data);
            cancels.then_some((NonceUse::Cancelled, log.transaction_hash?))
        });
        if cancelled.is_some() {
            return Ok(cancelled);
        }
        let candidates = transfers?
            .into_iter()
            .rev()
            .filter(|log| !log.removed && log.address == m.token)
            .filter_map(|log| log.transaction_hash)
            .take(PERMIT2_CANDIDATES);
        for hash in candidates {
            let tx: Option<SentTransaction> =
                self.rpc.by_hash("eth_getTransactionByHash", hash).await?;
            if let Some(tx) = tx
                && tx.to.is_some_and(|to| pay.is_settle_call(to, &tx.input))
            {
                return Ok(Some((NonceUse::Used, hash)));
            }
        }
        Ok(None)
    }
}

/// How many blocks back [`Inner::used_elsewhere`] reads an authorization's state to tell a recent use whose
/// log may not be indexed yet (unknown) from one older than the log lookback (failed for good): more than a
/// node's log index lags behind its state (seconds), within the recent states a full node keeps (geth: 128).
pub(super) const RECENT_BLOCKS: u64 = 64;

/// How many of a payer's newest transfers to a recipient are read to find the one that spent a Permit2
/// nonce ([`Inner::permit2_use`]).
const PERMIT2_CANDIDATES: usize = 64;

/// How a nonce was spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NonceUse {
    /// By a transfer (which [`Receipt::pays`] judges).
    Used,
    /// Cancelled by its owner.
    Cancelled,
}

/// The part of `eth_getTransactionByHash` read to recognise a settlement.
#[derive(Debug, serde::Deserialize)]
struct SentTransaction {
    to: Option<Address>,
    input: Bytes,
}

/// Which transaction of this settler may have used an authorization the chain shows used.
#[derive(Debug, Clone, Copy)]
pub(super) enum Ours {
    /// None: asked before this settler sent anything for the payment (`verify`, or a send its simulation
    /// refused).
    Nothing,
    /// Perhaps one whose hash was never recorded (the process died awaiting its receipt).
    Unrecorded,
    /// This one (it reverted, or the node does not know it).
    Sent(B256),
}

impl Ours {
    fn transaction(self) -> Option<B256> {
        match self {
            Ours::Sent(hash) => Some(hash),
            Ours::Nothing | Ours::Unrecorded => None,
        }
    }
}
