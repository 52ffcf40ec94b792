//! License tokens on chain: each receipt of a purchase settled on chain becomes an ERC-721 token
//! (`contracts/LicenseToken.sol`) minted to the payer, its id the receipt's token id, its `tokenURI` the
//! receipt's JSON (`<public url>/receipts/<tokenId>`, the verify URL).
//!
//! Minting never stands between a buyer and the article: the receipt is written and answered first, as
//! without a contract. A background task ([`Minter::run`]) queues every receipt settled on chain that has
//! no `license_mints` row yet, and sends what is pending in batches (`mintBatch`, up to [`BATCH`] tokens per
//! transaction) from the relayer account, through the on-chain settler's nonce manager so it never races
//! the settlements. A batch that fails (the contract paused, out of gas, no receipt in time) stays pending
//! and is retried with a growing delay (2 s doubling up to [`MAX_BACKOFF`]); the contract skips tokens
//! already minted, so a retried batch whose first transaction did land mints nothing twice. Several
//! instances may run a minter on one database: they may send the same batch, which costs gas, not
//! correctness.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use alloy_primitives::{Address, Bytes, U256};
use alloy_sol_types::{SolCall, SolValue, sol};
use x402_tower::settle::onchain::OnchainSettler;

use crate::store::StoreError;
use crate::store::licensing::{LicenseMint, LicensingStore};

sol! {
    /// The calls of `contracts/LicenseToken.sol` the server makes.
    interface ILicenseToken {
        function mintBatch(address[] to, uint256[] tokenIds) external;
        function ownerOf(uint256 tokenId) external view returns (address);
        function tokenURI(uint256 tokenId) external view returns (string);
    }
}

/// The contract's creation bytecode (compiled from `contracts/LicenseToken.sol`; the end-to-end tests check
/// it against a fresh compile).
pub const LICENSE_TOKEN_BYTECODE: &str = include_str!("../../../contracts/LicenseToken.bin");

/// Most tokens per mint transaction.
pub const BATCH: usize = 50;

/// Longest wait before a failed mint is retried.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Attempts after which a mint is no longer retried by itself (each sent transaction that reverts costs the
/// relayer gas): it stays `pending` with its last error for the operator.
pub const MAX_ATTEMPTS: u64 = 30;

/// How often the minter looks for work when nobody nudges it.
pub const POLL: Duration = Duration::from_secs(2);

/// The token base URI of a server at `public_url`: `tokenURI(id)` = this + id = the receipt's verify URL.
pub fn base_uri(public_url: &str) -> String {
    format!("{public_url}/receipts/")
}

/// Why the contract could not be deployed.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// The committed bytecode is not hex.
    #[error("contracts/LicenseToken.bin is not hex bytecode")]
    Bytecode,
    /// The transaction failed.
    #[error(transparent)]
    Send(#[from] x402_tower::settle::onchain::SendError),
}

/// Deploys the license-token contract, owned (and minted) by the settler's relayer, with token URIs under
/// `public_url`. Returns its address.
pub async fn deploy(settler: &OnchainSettler, public_url: &str) -> Result<Address, DeployError> {
    let code = alloy_primitives::hex::decode(LICENSE_TOKEN_BYTECODE.trim())
        .map_err(|_| DeployError::Bytecode)?;
    let mut init = code;
    init.extend_from_slice(&(settler.relayer(), base_uri(public_url)).abi_encode_params());
    Ok(settler.deploy_contract(Bytes::from(init)).await?)
}

/// Mints license tokens in the background.
#[derive(Debug)]
pub struct Minter {
    settler: OnchainSettler,
    contract: Address,
    store: Arc<dyn LicensingStore>,
    nudge: tokio::sync::Notify,
    minted: AtomicU64,
    failures: AtomicU64,
}

impl Minter {
    /// A minter of `contract` through `settler`'s relayer, over `store`.
    pub fn new(settler: OnchainSettler, contract: Address, store: Arc<dyn LicensingStore>) -> Self {
        Self {
            settler,
            contract,
            store,
            nudge: tokio::sync::Notify::new(),
            minted: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        }
    }

    /// The contract.
    pub fn contract(&self) -> Address {
        self.contract
    }

    /// Wakes the minter now (a receipt was just written).
    pub fn nudge(&self) {
        self.nudge.notify_one();
    }

    /// Runs until the task is dropped.
    pub async fn run(self: Arc<Self>) {
        loop {
            match self.round().await {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "license minter: database unavailable"),
            }
            let _ = tokio::time::timeout(POLL, self.nudge.notified()).await;
        }
    }

    /// One round: queue new receipts, send one batch of what is due. `Ok(true)` when a batch was sent (there
    /// may be more).
    pub async fn round(&self) -> Result<bool, StoreError> {
        let now = time::OffsetDateTime::now_utc();
        self.store
            .queue_mints(crate::web::clock::now_rfc3339(), 1000)
            .await?;
        let due: Vec<LicenseMint> = self
            .store
            .pending_mints(10 * BATCH as u32)
            .await?
            .into_iter()
            .filter(|m| is_due(m, now))
            .take(BATCH)
            .collect();
        if due.is_empty() {
            return Ok(false);
        }
        let mut owners = Vec::with_capacity(due.len());
        let mut ids = Vec::with_capacity(due.len());
        let mut token_ids = Vec::with_capacity(due.len());
        for m in &due {
            match (m.owner.parse::<Address>(), m.token_id.parse::<U256>()) {
                (Ok(o), Ok(id)) => {
                    owners.push(o);
                    ids.push(id);
                    token_ids.push(m.token_id.clone());
                }
                _ => {
                    tracing::error!(token_id = %m.token_id, owner = %m.owner, "license mint row unreadable")
                }
            }
        }
        let call = ILicenseToken::mintBatchCall {
            to: owners,
            tokenIds: ids,
        };
        let outcome = match self
            .settler
            .send_transaction(self.contract, Bytes::from(call.abi_encode()))
            .await
        {
            Ok(hash) => match self.settler.transaction_succeeded(hash).await {
                Ok(true) => Ok(format!("{hash}")),
                Ok(false) => Err(format!("mint transaction {hash} reverted")),
                Err(e) => Err(e),
            },
            Err(e) => Err(e.to_string()),
        };
        match &outcome {
            Ok(tx) => {
                self.minted
                    .fetch_add(token_ids.len() as u64, Ordering::Relaxed);
                tracing::info!(tokens = token_ids.len(), transaction = %tx, "license tokens minted");
            }
            Err(e) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(tokens = token_ids.len(), error = %e, "license token mint failed; will retry");
            }
        }
        let sent = outcome.is_ok();
        self.store
            .record_mint(token_ids, outcome, crate::web::clock::now_rfc3339())
            .await?;
        Ok(sent)
    }

    /// The token's owner on chain (`ownerOf`), `None` when it is not minted (or the node cannot say).
    pub async fn owner_of(&self, token_id: &str) -> Option<Address> {
        let id = token_id.parse::<U256>().ok()?;
        let out = self
            .settler
            .call(
                self.contract,
                Bytes::from(ILicenseToken::ownerOfCall { tokenId: id }.abi_encode()),
            )
            .await
            .ok()?;
        ILicenseToken::ownerOfCall::abi_decode_returns(&out).ok()
    }

    /// Records the counters (with the server's metrics recorder current).
    pub fn record_metrics(&self) {
        crate::metrics::counter(
            "license_tokens_minted_total",
            "License tokens minted on chain by this instance.",
            self.minted.load(Ordering::Relaxed),
        );
        crate::metrics::counter(
            "license_token_mint_failures_total",
            "Mint transactions that failed (their tokens stay pending and are retried).",
            self.failures.load(Ordering::Relaxed),
        );
    }
}

/// Whether a pending mint is due: never tried, or its delay (2 s doubling per attempt, at most
/// [`MAX_BACKOFF`]) has passed since its last attempt, and it has not used up [`MAX_ATTEMPTS`].
fn is_due(m: &LicenseMint, now: time::OffsetDateTime) -> bool {
    if m.attempts == 0 {
        return true;
    }
    if m.attempts >= MAX_ATTEMPTS {
        return false;
    }
    let delay =
        Duration::from_secs(2u64.saturating_pow(m.attempts.min(16) as u32)).min(MAX_BACKOFF);
    match time::OffsetDateTime::parse(
        &m.updated_at,
        &time::format_description::well_known::Rfc3339,
    ) {
        Ok(at) => now - at >= delay,
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mint(attempts: u64, updated_at: &str) -> LicenseMint {
        LicenseMint {
            token_id: "1".into(),
            owner: "0x0000000000000000000000000000000000000001".into(),
            status: "pending".into(),
            attempts,
            tx_hash: None,
            last_error: None,
            updated_at: updated_at.into(),
        }
    }

    #[test]
    fn retries_back_off_and_the_bytecode_is_hex() {
        let now = time::macros::datetime!(2026-11-23 12:00:10 UTC);
        assert!(is_due(&mint(0, "2026-11-23T12:00:10.000000Z"), now));
        assert!(!is_due(&mint(1, "2026-11-23T12:00:09.000000Z"), now));
        assert!(is_due(&mint(1, "2026-11-23T12:00:08.000000Z"), now));
        assert!(
            !is_due(&mint(20, "2026-11-23T11:57:00.000000Z"), now),
            "at most 300 s"
        );
        assert!(is_due(&mint(20, "2026-11-23T11:55:00.000000Z"), now));
        assert!(
            !is_due(&mint(MAX_ATTEMPTS, "2026-11-22T00:00:00.000000Z"), now),
            "given up"
        );
        assert!(alloy_primitives::hex::decode(LICENSE_TOKEN_BYTECODE.trim()).is_ok());
        assert_eq!(base_uri("http://x"), "http://x/receipts/");
    }
}
