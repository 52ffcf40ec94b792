//! The networks this crate knows, in one table, and the tokens paid on them.
//!
//! Every chain-specific literal (CAIP-2 id, chain id, USDC address, EIP-712 domain name and version) lives in
//! [`NETWORKS`]. A wrong EIP-712 name (say `"USDC"` on Base mainnet) makes every settlement fail, so nothing
//! else in the crate repeats these values.

use std::fmt;
use std::str::FromStr;

use alloy_primitives::{Address, address};

/// One row of the network table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NetworkInfo {
    /// The x402 v1 network name (`"base-sepolia"`).
    pub v1_name: &'static str,
    /// The CAIP-2 identifier used by x402 v2 (`"eip155:84532"`).
    pub caip2: &'static str,
    /// The EVM chain id.
    pub chain_id: u64,
    /// Whether the legacy v1 clients (npm `x402` 1.x) know the v1 name. Offers on other networks are only
    /// advertised in v2 form: an unknown v1 name breaks the legacy client's schema.
    pub legacy_v1: bool,
    /// The USDC (FiatTokenV2) proxy contract on this chain.
    pub usdc_address: Address,
    /// The EIP-712 domain `name` of that USDC contract.
    pub usdc_name: &'static str,
    /// The EIP-712 domain `version` of that USDC contract.
    pub usdc_version: &'static str,
}

impl NetworkInfo {
    /// Whether this is a public test network (its USDC is free from faucets; no real money moves).
    pub fn is_testnet(&self) -> bool {
        matches!(
            self.v1_name,
            "base-sepolia" | "avalanche-fuji" | "polygon-amoy" | "arbitrum-sepolia"
        )
    }
}

/// USDC has 6 decimals on every chain listed here.
pub const USDC_DECIMALS: u8 = 6;

/// The network table: every network this crate knows by name.
pub const NETWORKS: &[NetworkInfo] = &[
    NetworkInfo {
        v1_name: "base",
        caip2: "eip155:8453",
        chain_id: 8453,
        legacy_v1: true,
        usdc_address: address!("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"),
        usdc_name: "USD Coin",
        usdc_version: "2",
    },
    NetworkInfo {
        v1_name: "base-sepolia",
        caip2: "eip155:84532",
        chain_id: 84532,
        legacy_v1: true,
        usdc_address: address!("0x036CbD53842c5426634e7929541eC2318f3dCF7e"),
        usdc_name: "USDC",
        usdc_version: "2",
    },
    NetworkInfo {
        v1_name: "avalanche",
        caip2: "eip155:43114",
        chain_id: 43114,
        legacy_v1: true,
        usdc_address: address!("0xB97EF9Ef8734C71904D8002F8b6Bc66Dd9c48a6E"),
        usdc_name: "USD Coin",
        usdc_version: "2",
    },
    NetworkInfo {
        v1_name: "avalanche-fuji",
        caip2: "eip155:43113",
        chain_id: 43113,
        legacy_v1: true,
        usdc_address: address!("0x5425890298aed601595a70AB815c96711a31Bc65"),
        usdc_name: "USD Coin",
        usdc_version: "2",
    },
    NetworkInfo {
        v1_name: "polygon",
        caip2: "eip155:137",
        chain_id: 137,
        legacy_v1: true,
        usdc_address: address!("0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359"),
        usdc_name: "USD Coin",
        usdc_version: "2",
    },
    NetworkInfo {
        v1_name: "polygon-amoy",
        caip2: "eip155:80002",
        chain_id: 80002,
        legacy_v1: true,
        usdc_address: address!("0x41E94Eb019C0762f9Bfcf9Fb1E58725BfB0e7582"),
        usdc_name: "USDC",
        usdc_version: "2",
    },
    NetworkInfo {
        v1_name: "arbitrum",
        caip2: "eip155:42161",
        chain_id: 42161,
        legacy_v1: false,
        usdc_address: address!("0xaf88d065e77c8cC2239327C5EDb3A432268e5831"),
        usdc_name: "USD Coin",
        usdc_version: "2",
    },
    NetworkInfo {
        v1_name: "arbitrum-sepolia",
        caip2: "eip155:421614",
        chain_id: 421614,
        legacy_v1: false,
        usdc_address: address!("0x75faf114eafb1BDbe2F0316DF893fd58CE46AA4d"),
        usdc_name: "USD Coin",
        usdc_version: "2",
    },
    NetworkInfo {
        v1_name: "ethereum",
        caip2: "eip155:1",
        chain_id: 1,
        legacy_v1: false,
        usdc_address: address!("0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"),
        usdc_name: "USD Coin",
        usdc_version: "2",
    },
];

/// An EVM network: either a row of [`NETWORKS`] or any other `eip155:<chain id>` (a local chain, say), which
/// then needs an explicitly given [`Token`].
///
/// ```
/// use x402_tower::network::Network;
///
/// let base: Network = "base".parse().unwrap();
/// assert_eq!(base.chain_id(), 8453);
/// assert_eq!(base, "eip155:8453".parse().unwrap());
/// let anvil: Network = "eip155:31337".parse().unwrap();
/// assert!(anvil.info().is_none());
/// assert_eq!(anvil.caip2(), "eip155:31337");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Network {
    chain_id: u64,
    caip2: String,
    info: Option<&'static NetworkInfo>,
}

impl Network {
    /// The network with this chain id (known or not).
    pub fn from_chain_id(chain_id: u64) -> Self {
        let info = NETWORKS.iter().find(|n| n.chain_id == chain_id);
        Network {
            chain_id,
            caip2: format!("eip155:{chain_id}"),
            info,
        }
    }

    /// Looks a known network up by its v1 name (`"base"`).
    pub fn from_v1_name(name: &str) -> Option<Self> {
        NETWORKS
            .iter()
            .find(|n| n.v1_name == name)
            .map(|n| Self::from_chain_id(n.chain_id))
    }

    /// The EVM chain id.
    pub fn chain_id(&self) -> u64 {
        self.chain_id
    }

    /// The CAIP-2 id (`"eip155:8453"`).
    pub fn caip2(&self) -> &str {
        &self.caip2
    }

    /// The v1 name, when the network is in the table.
    pub fn v1_name(&self) -> Option<&'static str> {
        self.info.map(|i| i.v1_name)
    }

    /// The v1 name if legacy v1 clients understand it; offers on other networks are advertised in v2 only.
    pub fn legacy_v1_name(&self) -> Option<&'static str> {
        self.info.filter(|i| i.legacy_v1).map(|i| i.v1_name)
    }

    /// The table row, if this network is known.
    pub fn info(&self) -> Option<&'static NetworkInfo> {
        self.info
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.caip2)
    }
}

/// A network string that is neither a known v1 name nor `eip155:<chain id>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown network {0:?}: expected a v1 name such as \"base\" or a CAIP-2 id such as \"eip155:8453\""
)]
pub struct UnknownNetwork(pub String);

impl FromStr for Network {
    type Err = UnknownNetwork;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(id) = s.strip_prefix("eip155:") {
            // Digits only (`u64::from_str` would also take a leading '+'), no leading zero, not 0.
            if !id.is_empty()
                && id.len() <= 20
                && id.bytes().all(|b| b.is_ascii_digit())
                && !(id.len() > 1 && id.starts_with('0'))
                && let Ok(chain_id) = id.parse::<u64>()
                && chain_id != 0
            {
                return Ok(Self::from_chain_id(chain_id));
            }
            return Err(UnknownNetwork(s.to_owned()));
        }
        Self::from_v1_name(s).ok_or_else(|| UnknownNetwork(s.to_owned()))
    }
}

/// An EIP-3009 token: its contract and its EIP-712 domain.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Token {
    /// The token (proxy) contract address: the offer's `asset` and the domain's `verifyingContract`.
    pub address: Address,
    /// The EIP-712 domain `name` (the offer's `extra.name`).
    pub name: String,
    /// The EIP-712 domain `version` (the offer's `extra.version`).
    pub version: String,
    /// Decimals of the token's atomic unit (6 for USDC).
    pub decimals: u8,
    /// Whether the token has EIP-3009's `transferWithAuthorization` (USDC does): `exact` over EIP-3009 is
    /// sold only for such a token. Any ERC-20 can be sold over Permit2 (`exact` with
    /// `extra.assetTransferMethod: "permit2"`, and `upto`), USDC too: an offer list may carry both.
    pub eip3009: bool,
}

impl Token {
    /// USDC on a known network, from [`NETWORKS`].
    pub fn usdc(network: &Network) -> Option<Token> {
        network.info.map(|i| Token {
            address: i.usdc_address,
            name: i.usdc_name.to_owned(),
            version: i.usdc_version.to_owned(),
            decimals: USDC_DECIMALS,
            eip3009: true,
        })
    }

    /// Whether this is USDC of `network` as [`NETWORKS`] knows it ([`Token::usdc`], without building it).
    pub(crate) fn is_usdc_on(&self, network: &Network) -> bool {
        network.info.is_some_and(|i| {
            self.address == i.usdc_address
                && self.name == i.usdc_name
                && self.version == i.usdc_version
                && self.decimals == USDC_DECIMALS
        })
    }

    /// Any EIP-3009 token, for example USDC deployed on a local chain.
    pub fn new(
        address: Address,
        name: impl Into<String>,
        version: impl Into<String>,
        decimals: u8,
    ) -> Token {
        Token {
            address,
            name: name.into(),
            version: version.into(),
            decimals,
            eip3009: true,
        }
    }

    /// An ERC-20 without EIP-3009, sold over Permit2 only (`name` and `version`: its EIP-712 domain, for
    /// EIP-2612 permits, or empty).
    ///
    /// ```
    /// use alloy_primitives::address;
    /// use x402_tower::network::Token;
    /// use x402_tower::{PaymentOffer, Price};
    ///
    /// let dai = Token::permit2_only(address!("50c5725949A6F0c72E6C4a641F24049A917DB0Cb"), "Dai", "1", 18);
    /// let base = "base".parse().unwrap();
    /// let pay_to = address!("209693Bc6afc0C5328bA36FaF03C514EF312287C");
    /// let offer = PaymentOffer::new(base, dai, pay_to, Price::from(10u64.pow(16)));
    /// // Over Permit2 it sells; over EIP-3009 the layer refuses to build.
    /// let layer = |offer: PaymentOffer| {
    ///     x402_tower::X402Layer::builder("https://example.org")
    ///         .offer(offer)
    ///         .build()
    /// };
    /// assert!(layer(offer.clone().extra("assetTransferMethod", "permit2")).is_ok());
    /// assert!(layer(offer).is_err());
    /// ```
    pub fn permit2_only(
        address: Address,
        name: impl Into<String>,
        version: impl Into<String>,
        decimals: u8,
    ) -> Token {
        Token {
            eip3009: false,
            ..Token::new(address, name, version, decimals)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usdc_is_recognised_without_being_built() {
        let network: Network = "base".parse().unwrap();
        let usdc = Token::usdc(&network).unwrap();
        assert!(usdc.is_usdc_on(&network));
        assert!(!usdc.is_usdc_on(&"base-sepolia".parse().unwrap()));
        assert!(!usdc.is_usdc_on(&"eip155:31337".parse().unwrap()));
        let renamed = Token::new(
            usdc.address,
            "Renamed Coin",
            usdc.version.clone(),
            usdc.decimals,
        );
        assert!(!renamed.is_usdc_on(&network));
    }

    #[test]
    fn table_is_consistent() {
        for n in NETWORKS {
            assert_eq!(n.caip2, format!("eip155:{}", n.chain_id));
            let net: Network = n.v1_name.parse().unwrap();
            assert_eq!(net, n.caip2.parse().unwrap());
            assert_eq!(Token::usdc(&net).unwrap().address, n.usdc_address);
        }
    }

    #[test]
    fn parse_rejects_garbage() {
        for bad in [
            "",
            "eip155:",
            "eip155:+1",
            "eip155:0",
            "eip155:01",
            "solana",
            "eip155:99999999999999999999999",
        ] {
            assert!(bad.parse::<Network>().is_err(), "{bad}");
        }
        assert_eq!("eip155:31337".parse::<Network>().unwrap().chain_id(), 31337);
    }
}
