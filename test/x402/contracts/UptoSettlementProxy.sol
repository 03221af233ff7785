// SPDX-License-Identifier: MIT
// Tollway x402 test bed: an independent implementation of the contract interface that
// @x402/evm's "upto" facilitator calls at its hard-coded proxy address (settle /
// settleWithPermit / PERMIT2 / WITNESS_TYPEHASH / WITNESS_TYPE_STRING). Written from the
// x402 upto protocol description and Permit2's public ISignatureTransfer interface; it is
// compiled at run time with npm solc and its runtime code placed at that address on anvil.
// Test use only.
pragma solidity ^0.8.20;

interface IPermit2SignatureTransfer {
    struct TokenPermissions {
        address token;
        uint256 amount;
    }

    struct PermitTransferFrom {
        TokenPermissions permitted;
        uint256 nonce;
        uint256 deadline;
    }

    struct SignatureTransferDetails {
        address to;
        uint256 requestedAmount;
    }

    function permitWitnessTransferFrom(
        PermitTransferFrom calldata permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 witness,
        string calldata witnessTypeString,
        bytes calldata signature
    ) external;
}

interface IERC20PermitLike {
    function permit(
        address owner,
        address spender,
        uint256 value,
        uint256 deadline,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external;
}

contract UptoSettlementProxy {
    // Constants, not immutables: the runtime code does not depend on where or how it was
    // deployed, so it can be placed anywhere with anvil_setCode.
    IPermit2SignatureTransfer public constant PERMIT2 =
        IPermit2SignatureTransfer(0x000000000022D473030F116dDEE9F6B43aC78BA3);

    // Permit2 appends this to "PermitWitnessTransferFrom(TokenPermissions permitted,address
    // spender,uint256 nonce,uint256 deadline," and hashes the result (EIP-712 encodeType with
    // the referenced struct types in alphabetical order).
    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)";

    bytes32 public constant WITNESS_TYPEHASH =
        keccak256("Witness(address to,address facilitator,uint256 validAfter)");

    struct Witness {
        address to; // the only allowed recipient (the requirement's payTo)
        address facilitator; // the only account allowed to submit the settlement
        uint256 validAfter; // unix seconds; settlement is refused before it
    }

    struct EIP2612Permit {
        uint256 value;
        uint256 deadline;
        bytes32 r;
        bytes32 s;
        uint8 v;
    }

    event Settled();
    event SettledWithPermit();

    error AmountExceedsPermitted();
    error InvalidDestination();
    error InvalidOwner();
    error PaymentTooEarly();
    error UnauthorizedFacilitator();
    error Permit2612AmountMismatch();

    /// Moves `amount` (at most the signed cap) of the permitted token from `owner` to
    /// `witness.to` through Permit2, binding the signature to the witness.
    function settle(
        IPermit2SignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external {
        _pull(permit, amount, owner, witness, signature);
        emit Settled();
    }

    /// Same as settle, first applying the payer's EIP-2612 approval of Permit2 (gas
    /// sponsoring). A permit that was already used (e.g. front-run) is tolerated; the
    /// transfer then fails by itself if the allowance is missing.
    function settleWithPermit(
        EIP2612Permit calldata permit2612,
        IPermit2SignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external {
        if (permit2612.value < permit.permitted.amount) revert Permit2612AmountMismatch();
        try
            IERC20PermitLike(permit.permitted.token).permit(
                owner,
                address(PERMIT2),
                permit2612.value,
                permit2612.deadline,
                permit2612.v,
                permit2612.r,
                permit2612.s
            )
        {} catch {}
        _pull(permit, amount, owner, witness, signature);
        emit SettledWithPermit();
    }

    function _pull(
        IPermit2SignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) private {
        if (owner == address(0)) revert InvalidOwner();
        if (witness.to == address(0)) revert InvalidDestination();
        if (msg.sender != witness.facilitator) revert UnauthorizedFacilitator();
        if (block.timestamp < witness.validAfter) revert PaymentTooEarly();
        if (amount > permit.permitted.amount) revert AmountExceedsPermitted();

        bytes32 witnessHash = keccak256(
            abi.encode(WITNESS_TYPEHASH, witness.to, witness.facilitator, witness.validAfter)
        );
        PERMIT2.permitWitnessTransferFrom(
            permit,
            IPermit2SignatureTransfer.SignatureTransferDetails({to: witness.to, requestedAmount: amount}),
            owner,
            witnessHash,
            WITNESS_TYPE_STRING,
            signature
        );
    }
}
