// SPDX-License-Identifier: MIT OR Apache-2.0
pragma solidity ^0.8.28;

// The x402 Permit2 proxies, written for local test chains to the ABI the official `@x402/evm` package
// publishes (functions, events and errors) and the behaviour its facilitator expects. The official
// contracts are not on any registry; these are this project's own. Their runtime code is put at the
// canonical addresses with `anvil_setCode`, so nothing lives in storage and Permit2's address is a constant.

import {ISignatureTransfer} from "@uniswap/v4-periphery/lib/permit2/src/interfaces/ISignatureTransfer.sol";
import {IERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/IERC20Permit.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";

/// An EIP-2612 permit the payer signed for Permit2 (the `eip2612GasSponsoring` extension).
struct EIP2612Permit {
    uint256 value;
    uint256 deadline;
    bytes32 r;
    bytes32 s;
    uint8 v;
}

/// What the two proxies share: Permit2, the checks on owner, recipient and time, the 2612 approval.
abstract contract Permit2ProxyBase is ReentrancyGuardTransient {
    ISignatureTransfer public constant PERMIT2 = ISignatureTransfer(0x000000000022D473030F116dDEE9F6B43aC78BA3);

    event Settled();
    event SettledWithPermit();

    error InvalidAmount();
    error InvalidDestination();
    error InvalidOwner();
    error InvalidPermit2Address();
    error PaymentTooEarly();
    error Permit2612AmountMismatch();

    function _check(address owner, address to, uint256 validAfter) internal view {
        if (owner == address(0)) revert InvalidOwner();
        if (to == address(0)) revert InvalidDestination();
        if (block.timestamp < validAfter) revert PaymentTooEarly();
    }

    /// Approves Permit2 with the payer's EIP-2612 signature. A permit that fails (already used, or the
    /// allowance already set by someone who saw it) does not stop the settlement: Permit2 then judges.
    function _approve(address token, address owner, EIP2612Permit calldata p, uint256 amount) internal {
        if (p.value != amount) revert Permit2612AmountMismatch();
        try IERC20Permit(token).permit(owner, address(PERMIT2), p.value, p.deadline, p.v, p.r, p.s) {} catch {}
    }

    function _transfer(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        address owner,
        address to,
        uint256 amount,
        bytes32 witness,
        string memory witnessTypeString,
        bytes calldata signature
    ) internal {
        PERMIT2.permitWitnessTransferFrom(
            permit,
            ISignatureTransfer.SignatureTransferDetails({to: to, requestedAmount: amount}),
            owner,
            witness,
            witnessTypeString,
            signature
        );
    }
}

/// `exact` over Permit2: moves the permitted amount to `witness.to`.
contract x402ExactPermit2Proxy is Permit2ProxyBase {
    struct Witness {
        address to;
        uint256 validAfter;
    }

    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,uint256 validAfter)";
    bytes32 public constant WITNESS_TYPEHASH = keccak256("Witness(address to,uint256 validAfter)");

    function settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        _settle(permit, owner, witness, signature);
        emit Settled();
    }

    function settleWithPermit(
        EIP2612Permit calldata permit2612,
        ISignatureTransfer.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        _approve(permit.permitted.token, owner, permit2612, permit.permitted.amount);
        _settle(permit, owner, witness, signature);
        emit SettledWithPermit();
    }

    function _settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) private {
        if (permit.permitted.amount == 0) revert InvalidAmount();
        _check(owner, witness.to, witness.validAfter);
        bytes32 hash = keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.validAfter));
        _transfer(permit, owner, witness.to, permit.permitted.amount, hash, WITNESS_TYPE_STRING, signature);
    }
}

/// `upto` over Permit2: the named facilitator moves `amount`, at most the permitted maximum, to `witness.to`.
contract x402UptoPermit2Proxy is Permit2ProxyBase {
    struct Witness {
        address to;
        address facilitator;
        uint256 validAfter;
    }

    error AmountExceedsPermitted();
    error UnauthorizedFacilitator();

    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)";
    bytes32 public constant WITNESS_TYPEHASH = keccak256("Witness(address to,address facilitator,uint256 validAfter)");

    function settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        _settle(permit, amount, owner, witness, signature);
        emit Settled();
    }

    function settleWithPermit(
        EIP2612Permit calldata permit2612,
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        _approve(permit.permitted.token, owner, permit2612, permit.permitted.amount);
        _settle(permit, amount, owner, witness, signature);
        emit SettledWithPermit();
    }

    function _settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) private {
        if (msg.sender != witness.facilitator) revert UnauthorizedFacilitator();
        if (amount == 0) revert InvalidAmount();
        if (amount > permit.permitted.amount) revert AmountExceedsPermitted();
        _check(owner, witness.to, witness.validAfter);
        bytes32 hash = keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.facilitator, witness.validAfter));
        _transfer(permit, owner, witness.to, amount, hash, WITNESS_TYPE_STRING, signature);
    }
}
