// SPDX-License-Identifier: MIT OR Apache-2.0
pragma solidity ^0.8.28;

// An ERC-20 without EIP-3009 (but with EIP-2612, as most tokens sold over Permit2 have), for tests:
// six decimals, anyone may mint.

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";
import {ERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/ERC20Permit.sol";

contract PlainToken is ERC20, ERC20Permit {
    constructor() ERC20("Plain Dollar", "PLAIN") ERC20Permit("Plain Dollar") {}

    function decimals() public pure override returns (uint8) {
        return 6;
    }

    function mint(address to, uint256 amount) external {
        _mint(to, amount);
    }
}
