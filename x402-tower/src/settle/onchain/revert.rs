//! What a revert of `transferWithAuthorization` means, in the spec's error strings.

use alloy_primitives::Bytes;

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
    if m.contains("authorization is used or canceled") {
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

/// A node error that is a revert (of a simulation), if it is one.
pub(crate) fn from_rpc(error: &RpcError) -> Option<Revert> {
    match error {
        RpcError::Node {
            code,
            message,
            data,
            ..
        } if *code == 3 || message.contains("revert") => {
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
