// SPDX-License-Identifier: MIT
// The license token of the reference server: one ERC-721 token per license receipt, minted to the payer,
// its id the receipt's token id and its URI the receipt's JSON (`<base>/<tokenId>` = the verify URL).
// Compiled with solc 0.8.37 against @openzeppelin/contracts 5.7.0 (tests/js/license-token.mjs);
// the bytecode the server deploys is contracts/LicenseToken.bin (checked against a fresh compile by the
// end-to-end tests).
pragma solidity ^0.8.24;

import {ERC721} from "@openzeppelin/contracts/token/ERC721/ERC721.sol";
import {Ownable} from "@openzeppelin/contracts/access/Ownable.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";
import {Strings} from "@openzeppelin/contracts/utils/Strings.sol";

contract LicenseToken is ERC721, Ownable, Pausable {
    string private baseUri;

    /// The owner is the minter (the server's relayer account).
    constructor(address owner_, string memory baseUri_) ERC721("x402 License Receipt", "X402LIC") Ownable(owner_) {
        baseUri = baseUri_;
    }

    /// Mints each token not minted yet (idempotent: a retried batch skips what an earlier one minted).
    function mintBatch(address[] calldata to, uint256[] calldata tokenIds) external onlyOwner whenNotPaused {
        require(to.length == tokenIds.length, "length mismatch");
        for (uint256 i = 0; i < to.length; i++) {
            if (_ownerOf(tokenIds[i]) == address(0)) {
                _mint(to[i], tokenIds[i]);
            }
        }
    }

    function tokenURI(uint256 tokenId) public view override returns (string memory) {
        _requireOwned(tokenId);
        return string.concat(baseUri, Strings.toString(tokenId));
    }

    function setBaseUri(string calldata baseUri_) external onlyOwner {
        baseUri = baseUri_;
    }

    function pause() external onlyOwner {
        _pause();
    }

    function unpause() external onlyOwner {
        _unpause();
    }
}
