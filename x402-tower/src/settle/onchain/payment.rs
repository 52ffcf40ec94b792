//! A payment as the chain sees it: which contract a settlement calls with what, which `Transfer` log proves
//! it paid, and where the chain keeps its nonce. EIP-3009 payments call the token; Permit2 payments (`exact`
//! and `upto`) call the x402 proxy they name as spender, which moves the tokens through Permit2.

use alloy_primitives::{Address, B256, Bytes, U256};
use alloy_sol_types::{SolCall, sol};

use super::token::{authorizationStateCall, transfer_calldata};
use crate::extensions::gas_sponsoring::Eip2612Permit;
use crate::scheme::{Eip3009Payment, PERMIT2, Permit2Payment};
use crate::settle::SettleRequest;

sol! {
    /// Permit2's `TokenPermissions`.
    struct TokenPermissions { address token; uint256 amount; }
    /// Permit2's `PermitTransferFrom`.
    struct PermitTransferFrom { TokenPermissions permitted; uint256 nonce; uint256 deadline; }
    /// The exact proxy's witness.
    struct ExactWitness { address to; uint256 validAfter; }
    /// The upto proxy's witness.
    struct UptoWitness { address to; address facilitator; uint256 validAfter; }

    /// The x402 proxies' EIP-2612 permit for Permit2 (`eip2612GasSponsoring`).
    struct EIP2612Permit { uint256 value; uint256 deadline; bytes32 r; bytes32 s; uint8 v; }

    /// `x402ExactPermit2Proxy.settleWithPermit`: applies the payer's EIP-2612 permit, then settles.
    function settleWithPermit(
        EIP2612Permit permit2612, PermitTransferFrom permit, address owner, ExactWitness witness, bytes signature
    );
    /// `x402UptoPermit2Proxy.settleWithPermit`.
    function settleWithPermit(
        EIP2612Permit permit2612, PermitTransferFrom permit, uint256 amount, address owner, UptoWitness witness,
        bytes signature
    );
    /// `x402ExactPermit2Proxy.settle`: moves `permit.permitted.amount` to `witness.to`.
    function settle(PermitTransferFrom permit, address owner, ExactWitness witness, bytes signature);
    /// `x402UptoPermit2Proxy.settle`: moves `amount` (at most the permitted maximum) to `witness.to`; only
    /// `witness.facilitator` may call it.
    function settle(
        PermitTransferFrom permit, uint256 amount, address owner, UptoWitness witness, bytes signature
    );
    /// Permit2: the bitmap of `owner`'s unordered nonces `256 * word .. 256 * word + 255`.
    function nonceBitmap(address owner, uint256 word) external view returns (uint256);
    /// Permit2: the owner cancelled the nonces of `mask` in `word`.
    event UnorderedNonceInvalidation(address indexed owner, uint256 word, uint256 mask);
    /// ERC-20.
    function balanceOf(address account) external view returns (uint256);
    /// ERC-20.
    function allowance(address owner, address spender) external view returns (uint256);
}

/// The chain's view of one payment.
#[derive(Debug, Clone, Copy)]
#[allow(clippy::large_enum_variant)] // a value on the stack per call, never stored in bulk
pub(crate) enum OnChain<'a> {
    /// `transferWithAuthorization` on the token.
    Eip3009 {
        /// The token.
        token: Address,
        /// The authorization.
        payment: &'a Eip3009Payment,
    },
    /// `settle` on the proxy named as spender (`settleWithPermit` with the payer's EIP-2612 permit).
    Permit2 {
        /// The signed permit.
        payment: &'a Permit2Payment,
        /// What the settlement moves: the permitted amount (`exact`) or the charge (`upto`).
        amount: U256,
        /// The payer's EIP-2612 permit for Permit2 (`eip2612GasSponsoring`), when it sent one that reads.
        sponsored: Option<Eip2612Permit>,
    },
}

/// The `Transfer(from, to, value)` log of `token` a settlement must leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Movement {
    pub(crate) token: Address,
    pub(crate) from: Address,
    pub(crate) to: Address,
    pub(crate) value: U256,
}

impl<'a> OnChain<'a> {
    /// The payment of `request`, if this settler can settle its scheme.
    pub(crate) fn of(request: &'a SettleRequest) -> Option<Self> {
        if let Some(payment) = request.authorized.details::<Eip3009Payment>() {
            return Some(OnChain::Eip3009 {
                token: request.offer.token.address,
                payment,
            });
        }
        request
            .authorized
            .details::<Permit2Payment>()
            .map(|payment| OnChain::Permit2 {
                payment,
                amount: request.amount_to_settle(),
                sponsored: sponsoring(request, payment, 0).and_then(Result::ok),
            })
    }

    /// The contract the settlement calls.
    pub(crate) fn target(&self) -> Address {
        match self {
            OnChain::Eip3009 { token, .. } => *token,
            OnChain::Permit2 { payment, .. } => payment.spender,
        }
    }

    /// The settlement's calldata.
    pub(crate) fn calldata(&self) -> Bytes {
        match *self {
            OnChain::Eip3009 { payment, .. } => transfer_calldata(payment),
            OnChain::Permit2 {
                payment: p,
                amount,
                sponsored,
            } => {
                let permit = PermitTransferFrom {
                    permitted: TokenPermissions {
                        token: p.token,
                        amount: p.amount,
                    },
                    nonce: p.nonce,
                    deadline: p.deadline,
                };
                let (owner, signature) = (p.from, p.signature.clone());
                let exact = || ExactWitness {
                    to: p.to,
                    validAfter: p.valid_after,
                };
                let upto = |facilitator| UptoWitness {
                    to: p.to,
                    facilitator,
                    validAfter: p.valid_after,
                };
                let permit2612 = sponsored.map(|s| EIP2612Permit {
                    value: s.value,
                    deadline: s.deadline,
                    r: s.r,
                    s: s.s,
                    v: s.v,
                });
                match (p.facilitator, permit2612) {
                    (None, None) => settle_0Call {
                        permit,
                        owner,
                        witness: exact(),
                        signature,
                    }
                    .abi_encode(),
                    (Some(f), None) => settle_1Call {
                        permit,
                        amount,
                        owner,
                        witness: upto(f),
                        signature,
                    }
                    .abi_encode(),
                    (None, Some(permit2612)) => settleWithPermit_0Call {
                        permit2612,
                        permit,
                        owner,
                        witness: exact(),
                        signature,
                    }
                    .abi_encode(),
                    (Some(f), Some(permit2612)) => settleWithPermit_1Call {
                        permit2612,
                        permit,
                        amount,
                        owner,
                        witness: upto(f),
                        signature,
                    }
                    .abi_encode(),
                }
                .into()
            }
        }
    }

    /// The transfer the settlement makes.
    pub(crate) fn movement(&self) -> Movement {
        match *self {
            OnChain::Eip3009 { token, payment } => Movement {
                token,
                from: payment.authorization.from,
                to: payment.authorization.to,
                value: payment.authorization.value,
            },
            OnChain::Permit2 {
                payment, amount, ..
            } => Movement {
                token: payment.token,
                from: payment.from,
                to: payment.to,
                value: amount,
            },
        }
    }

    /// The read-only call that tells whether the payment's nonce is spent: the token's
    /// `authorizationState(from, nonce)`, or Permit2's `nonceBitmap(owner, nonce >> 8)`.
    pub(crate) fn nonce_query(&self) -> (Address, Bytes) {
        match *self {
            OnChain::Eip3009 { token, payment } => (
                token,
                authorizationStateCall {
                    authorizer: payment.authorization.from,
                    nonce: payment.authorization.nonce,
                }
                .abi_encode()
                .into(),
            ),
            OnChain::Permit2 { payment, .. } => (
                PERMIT2,
                nonceBitmapCall {
                    owner: payment.from,
                    word: payment.nonce >> 8,
                }
                .abi_encode()
                .into(),
            ),
        }
    }

    /// Reads [`nonce_query`](Self::nonce_query)'s answer: whether the nonce is spent.
    pub(crate) fn nonce_spent(&self, out: &[u8]) -> bool {
        if out.len() < 32 {
            return false;
        }
        let word = U256::from_be_slice(&out[..32]);
        match self {
            OnChain::Eip3009 { .. } => word == U256::from(1u8),
            OnChain::Permit2 { payment, .. } => word.bit(bit_of(payment.nonce)),
        }
    }

    /// The error a payment whose nonce is spent gets: the token's, or Permit2's (`permit2_invalid_nonce`).
    pub(crate) fn spent_reason(&self) -> &'static str {
        match self {
            OnChain::Eip3009 { .. } => crate::verify::RejectReason::NonceAlreadyUsed.as_str(),
            OnChain::Permit2 { .. } => super::revert::PERMIT2_INVALID_NONCE,
        }
    }

    /// Whether a call with `input` to `to` settles this Permit2 payment (the proxy's `settle` for its owner
    /// and nonce). Always `false` for EIP-3009, whose token logs the nonce it uses.
    pub(crate) fn is_settle_call(&self, to: Address, input: &[u8]) -> bool {
        let OnChain::Permit2 { payment: p, .. } = self else {
            return false;
        };
        if to != p.spender {
            return false;
        }
        // With or without a permit: the buyer's permit may have been applied by whoever settled.
        let decoded = if p.facilitator.is_none() {
            settle_0Call::abi_decode(input)
                .map(|c| (c.owner, c.permit.nonce))
                .or_else(|_| {
                    settleWithPermit_0Call::abi_decode(input).map(|c| (c.owner, c.permit.nonce))
                })
        } else {
            settle_1Call::abi_decode(input)
                .map(|c| (c.owner, c.permit.nonce))
                .or_else(|_| {
                    settleWithPermit_1Call::abi_decode(input).map(|c| (c.owner, c.permit.nonce))
                })
        };
        decoded.is_ok_and(|(owner, nonce)| owner == p.from && nonce == p.nonce)
    }

    /// Whether Permit2's `UnorderedNonceInvalidation` log data (`word`, `mask`) cancels this payment's nonce.
    pub(crate) fn is_cancelled_by(&self, data: &[u8]) -> bool {
        let OnChain::Permit2 { payment, .. } = self else {
            return false;
        };
        if data.len() < 64 {
            return false;
        }
        let word = U256::from_be_slice(&data[..32]);
        let mask = U256::from_be_slice(&data[32..64]);
        word == payment.nonce >> 8 && mask.bit(bit_of(payment.nonce))
    }
}

/// The payer's EIP-2612 permit in `request`'s extensions, read and checked at `now` (0: the deadline is not
/// checked), if it sent one.
pub(crate) fn sponsoring(
    request: &SettleRequest,
    payment: &Permit2Payment,
    now: u64,
) -> Option<Result<Eip2612Permit, &'static str>> {
    let crate::proto::PaymentPayload::V2(p) = &request.payload else {
        return None;
    };
    Eip2612Permit::read(
        p.extensions.as_ref()?.get(),
        payment.from,
        payment.token,
        now,
    )
}

/// The payment of `request` as the chain sees it. Every entry point of the settler refuses a payment it
/// cannot settle first ([`OnChain::of`]), so what is inside sees only these; were one to slip through, it
/// would read as an EIP-3009 authorization by nobody on no token, which no chain honours.
pub(crate) fn view(request: &SettleRequest) -> OnChain<'_> {
    static NOBODY: Eip3009Payment = Eip3009Payment {
        authorization: crate::proto::Authorization {
            from: Address::ZERO,
            to: Address::ZERO,
            value: U256::ZERO,
            valid_after: U256::ZERO,
            valid_before: U256::ZERO,
            nonce: B256::ZERO,
        },
        signature: Bytes::new(),
    };
    OnChain::of(request).unwrap_or(OnChain::Eip3009 {
        token: Address::ZERO,
        payment: &NOBODY,
    })
}

/// The contract a settlement of `request` calls and its calldata, or `None` for a scheme the on-chain
/// settler does not settle: what anybody holding the signed payment could broadcast.
pub fn settlement_call(request: &SettleRequest) -> Option<(Address, Bytes)> {
    OnChain::of(request).map(|p| (p.target(), p.calldata()))
}

/// The position of `nonce` in its word of Permit2's bitmap.
fn bit_of(nonce: U256) -> usize {
    // The low byte of the nonce: below 256.
    usize::from(nonce.byte(0))
}

/// `balanceOf(owner)` and `allowance(owner, Permit2)` calldata, to tell why Permit2 could not move a
/// payer's tokens.
pub(crate) fn funds_queries(owner: Address) -> (Bytes, Bytes) {
    (
        balanceOfCall { account: owner }.abi_encode().into(),
        allowanceCall {
            owner,
            spender: PERMIT2,
        }
        .abi_encode()
        .into(),
    )
}

/// The first word of a call's answer as a number (zero when the answer is shorter).
pub(crate) fn word(out: &[u8]) -> U256 {
    out.get(..32).map_or(U256::ZERO, U256::from_be_slice)
}
