//! What a revert of a settlement means, in the spec's error strings: FiatToken's revert strings for
//! `transferWithAuthorization`, the custom errors of Permit2 and the x402 proxies for `settle`.

use alloy_primitives::{Bytes, U256, keccak256};

use crate::scheme::PERMIT2_ALLOWANCE_REQUIRED;
use crate::verify::RejectReason;

use super::rpc::RpcError;

/// A reverted simulation or transaction, mapped to the x402 error string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Revert {
    /// The spec's error string.
    pub(crate) reason: &'static str,
    /// The token's revert message (or the node's).
    pub(crate) message: String,
}

/// Decodes `Error(string)` revert data, falling back to the node's message.
pub(crate) fn revert_message(message: &str, data: Option<&Bytes>) -> String {
    if let Some(reason) = data.and_then(|d| alloy_sol_types::decode_revert_reason(d)) {
        // alloy renders `Error(string)` as "revert: <reason>".
        return reason
            .strip_prefix("revert: ")
            .unwrap_or(&reason)
            .to_owned();
    }
    message
        .trim_start_matches("execution reverted")
        .trim_start_matches(':')
        .trim()
        .to_owned()
}

/// Maps FiatToken's revert strings (V2_2) to the spec's error strings.
pub(crate) fn classify(message: &str) -> &'static str {
    let m = message.to_ascii_lowercase();
    if m.contains("transfer_from_failed") {
        PERMIT2_TRANSFER_FAILED
    } else if m.contains("authorization is used or canceled") {
        "invalid_exact_evm_nonce_already_used"
    } else if m.contains("exceeds balance") || m.contains("insufficient balance") {
        "insufficient_funds"
    } else if m.contains("invalid signature") || m.contains("signature") {
        // Also a payer with code whose isValidSignature refuses (EIP-1271): FiatToken says "invalid signature".
        "invalid_exact_evm_payload_signature"
    } else if m.contains("authorization is not yet valid") {
        "invalid_exact_evm_payload_authorization_valid_after"
    } else if m.contains("authorization is expired") {
        "invalid_exact_evm_payload_authorization_valid_before"
    } else {
        // Paused token, blacklisted account, anything else the token refuses.
        "invalid_transaction_state"
    }
}

/// Permit2 could not move the payer's tokens (solmate's `TRANSFER_FROM_FAILED`): the payer's balance and
/// allowance tell why ([`permit2_funds`]).
pub(crate) const PERMIT2_TRANSFER_FAILED: &str = "permit2_simulation_failed";

/// Permit2 refused the nonce: it is spent (used or cancelled).
pub(crate) const PERMIT2_INVALID_NONCE: &str = "permit2_invalid_nonce";

/// The custom errors of Permit2 and the x402 proxies, by signature, and their codes as the official
/// facilitator maps them (`mapSettleError`).
const CUSTOM_ERRORS: [(&str, &str); 14] = [
    ("InvalidNonce()", PERMIT2_INVALID_NONCE),
    ("InvalidSigner()", "invalid_permit2_signature"),
    ("InvalidContractSignature()", "invalid_permit2_signature"),
    ("InvalidSignatureLength()", "invalid_permit2_signature"),
    ("InvalidSignature()", "invalid_permit2_signature"),
    ("SignatureExpired(uint256)", "invalid_permit2_signature"),
    ("InvalidAmount(uint256)", "permit2_invalid_amount"),
    ("InvalidAmount()", "permit2_invalid_amount"),
    ("InvalidDestination()", "permit2_invalid_destination"),
    ("InvalidOwner()", "permit2_invalid_owner"),
    ("PaymentTooEarly()", "permit2_payment_too_early"),
    ("Permit2612AmountMismatch()", "permit2_2612_amount_mismatch"),
    (
        "AmountExceedsPermitted()",
        "invalid_upto_evm_payload_settlement_exceeds_amount",
    ),
    ("UnauthorizedFacilitator()", "upto_facilitator_mismatch"),
];

/// The custom error `data` starts with, as `(signature, code)`.
fn custom_error(data: &[u8]) -> Option<(&'static str, &'static str)> {
    let selector = data.get(..4)?;
    CUSTOM_ERRORS
        .iter()
        .find(|(signature, _)| &keccak256(signature.as_bytes())[..4] == selector)
        .copied()
}

/// Whether a revert with `reason` says the payment's nonce is already spent on chain.
pub(crate) fn spends_used_nonce(reason: &str) -> bool {
    reason == RejectReason::NonceAlreadyUsed.as_str() || reason == PERMIT2_INVALID_NONCE
}

/// Why Permit2 could not move `value` from a payer with `balance` who allowed Permit2 `allowance`:
/// `permit2_allowance_required` (the payer must approve Permit2 once; the server answers 412),
/// `permit2_insufficient_balance`, or the revert as it was.
pub(crate) fn permit2_funds(revert: Revert, value: U256, balance: U256, allowance: U256) -> Revert {
    if allowance < value {
        Revert {
            reason: PERMIT2_ALLOWANCE_REQUIRED,
            message: format!(
                "the payer allowed Permit2 to move {allowance} of the token, the payment needs {value}: \
                 approve Permit2 ({}) for the token once",
                crate::scheme::PERMIT2
            ),
        }
    } else if balance < value {
        Revert {
            reason: "permit2_insufficient_balance",
            message: format!("the payer holds {balance} of the token, the payment needs {value}"),
        }
    } else {
        revert
    }
}

/// A node error that is a revert (of a simulation), if it is one.
pub(crate) fn from_rpc(error: &RpcError) -> Option<Revert> {
    match error {
        RpcError::Node {
            code,
            message,
            data,
            ..
        } if *code == 3 || message.contains("revert") => {
            if let Some((signature, reason)) = data.as_ref().and_then(|d| custom_error(d)) {
                return Some(Revert {
                    reason,
                    message: format!("reverted with {signature}"),
                });
            }
            let message = revert_message(message, data.as_ref());
            Some(Revert {
                reason: classify(&message),
                message,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fiat_token_messages_map_to_spec_strings() {
        assert_eq!(
            classify("FiatTokenV2: authorization is used or canceled"),
            "invalid_exact_evm_nonce_already_used"
        );
        assert_eq!(
            classify("ERC20: transfer amount exceeds balance"),
            "insufficient_funds"
        );
        assert_eq!(
            classify("FiatTokenV2: invalid signature"),
            "invalid_exact_evm_payload_signature"
        );
        assert_eq!(
            classify("FiatTokenV2: authorization is expired"),
            "invalid_exact_evm_payload_authorization_valid_before"
        );
        assert_eq!(
            classify("FiatTokenV2: authorization is not yet valid"),
            "invalid_exact_evm_payload_authorization_valid_after"
        );
        assert_eq!(classify("Pausable: paused"), "invalid_transaction_state");
    }

    #[test]
    fn permit2_and_proxy_errors_map_to_the_official_codes() {
        let revert = |selector: &str| {
            let data: Bytes = selector.parse().unwrap();
            from_rpc(&RpcError::Node {
                method: "eth_call",
                code: 3,
                message: "execution reverted".into(),
                data: Some(data),
            })
            .unwrap()
            .reason
        };
        // Selectors as the chain returns them (x402-schemes.md §2.1).
        assert_eq!(revert("0x756688fe"), PERMIT2_INVALID_NONCE);
        assert_eq!(revert("0x815e1d64"), "invalid_permit2_signature");
        assert_eq!(revert("0x0f6fae87"), "upto_facilitator_mismatch");
        assert_eq!(revert("0x2c5211c6"), "permit2_invalid_amount");
        assert_eq!(
            revert("0xfe64b4c7"),
            "invalid_upto_evm_payload_settlement_exceeds_amount"
        );
        assert_eq!(classify("TRANSFER_FROM_FAILED"), PERMIT2_TRANSFER_FAILED);
        assert!(spends_used_nonce(PERMIT2_INVALID_NONCE));
        let failed = Revert {
            reason: PERMIT2_TRANSFER_FAILED,
            message: "TRANSFER_FROM_FAILED".into(),
        };
        let (ten, five) = (U256::from(10u8), U256::from(5u8));
        assert_eq!(
            permit2_funds(failed.clone(), ten, ten, five).reason,
            PERMIT2_ALLOWANCE_REQUIRED
        );
        assert_eq!(
            permit2_funds(failed.clone(), ten, five, ten).reason,
            "permit2_insufficient_balance"
        );
        assert_eq!(permit2_funds(failed.clone(), ten, ten, ten), failed);
    }

    #[test]
    fn revert_data_is_decoded() {
        // Error("Pausable: paused")
        let data: Bytes =
            "0x08c379a00000000000000000000000000000000000000000000000000000000000000020\
            000000000000000000000000000000000000000000000000000000000000001050617573\
            61626c653a2070617573656400000000000000000000000000000000"
                .parse()
                .unwrap();
        assert_eq!(
            revert_message("execution reverted", Some(&data)),
            "Pausable: paused"
        );
        assert_eq!(
            revert_message("execution reverted: Pausable: paused", None),
            "Pausable: paused"
        );
    }
}
