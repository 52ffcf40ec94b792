//! What the token contract is asked and what it logs: FiatToken's ABI, the `transferWithAuthorization`
//! calldata, and the part of a receipt that tells whether a payment was made.

use alloy_primitives::{Address, B256, Bytes, U256};
use alloy_sol_types::{SolCall, SolEvent, sol};
use serde::Deserialize;

use super::payment::Movement;
use crate::scheme::Eip3009Payment;
use crate::settle::SettleOutcome;
use crate::verify::RejectReason;

sol! {
    /// FiatToken's EIP-3009 entry point for ECDSA signatures (`0xe3ee160e`).
    function transferWithAuthorization(
        address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce,
        uint8 v, bytes32 r, bytes32 s
    );
    /// FiatTokenV2_2's overload for any signature (ERC-1271 wallets) (`0xcf092995`).
    function transferWithAuthorization(
        address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce,
        bytes signature
    );
    /// ERC-1271 (`0x1626ba7e`).
    function isValidSignature(bytes32 hash, bytes signature) external view returns (bytes4);
    /// Whether `(authorizer, nonce)` was used or canceled (`0xe94a0102`).
    function authorizationState(address authorizer, bytes32 nonce) external view returns (bool);
    /// ERC-20 `Transfer`.
    event Transfer(address indexed from, address indexed to, uint256 value);
    /// EIP-3009: the authorization was used (by `transferWithAuthorization` or `receiveWithAuthorization`).
    event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce);
    /// EIP-3009: the authorizer cancelled the authorization.
    event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce);
}

/// The calldata of `transferWithAuthorization` for this payment: the `(v,r,s)` overload for 65 bytes, the
/// `bytes` overload otherwise.
pub(crate) fn transfer_calldata(payment: &Eip3009Payment) -> Bytes {
    let auth = &payment.authorization;
    let sig = &payment.signature;
    if sig.len() == 65 {
        transferWithAuthorization_0Call {
            from: auth.from,
            to: auth.to,
            value: auth.value,
            validAfter: auth.valid_after,
            validBefore: auth.valid_before,
            nonce: auth.nonce,
            v: sig[64],
            r: B256::from_slice(&sig[..32]),
            s: B256::from_slice(&sig[32..64]),
        }
        .abi_encode()
        .into()
    } else {
        transferWithAuthorization_1Call {
            from: auth.from,
            to: auth.to,
            value: auth.value,
            validAfter: auth.valid_after,
            validBefore: auth.valid_before,
            nonce: auth.nonce,
            signature: sig.clone(),
        }
        .abi_encode()
        .into()
    }
}

pub(super) fn hex_u64(v: &str) -> Option<u64> {
    u64::from_str_radix(v.trim_start_matches("0x"), 16).ok()
}

/// The subset of a transaction receipt we read.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Receipt {
    pub(super) status: Option<String>,
    #[serde(default)]
    pub(super) logs: Vec<Log>,
    #[serde(default)]
    pub(super) contract_address: Option<Address>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Log {
    pub(super) address: Address,
    pub(super) topics: Vec<B256>,
    pub(super) data: Bytes,
}

impl Receipt {
    pub(super) fn succeeded(&self) -> bool {
        self.status.as_deref().and_then(hex_u64) == Some(1)
    }

    /// Whether the token logged the payment's `Transfer(from, to, value)` in this transaction.
    pub(super) fn pays(&self, m: Movement) -> bool {
        self.logs.iter().any(|log| {
            log.address == m.token
                && log.topics.len() == 3
                && log.topics[0] == Transfer::SIGNATURE_HASH
                && log.topics[1] == m.from.into_word()
                && log.topics[2] == m.to.into_word()
                && log.data.len() == 32
                && U256::from_be_slice(&log.data) == m.value
        })
    }
}

/// What this settler answers a payment of a scheme it does not settle.
pub(super) const UNSUPPORTED: &str =
    "this settler settles exact payments over EIP-3009 or Permit2, and upto over Permit2";

/// A settlement refused because the payment is of a scheme this settler does not settle: nothing was sent.
pub(super) fn unsupported() -> SettleOutcome {
    SettleOutcome::Failed {
        reason: RejectReason::InvalidScheme.as_str().to_owned(),
        message: Some(UNSUPPORTED.to_owned()),
        authorization_still_usable: true,
    }
}
