//! [`PaymentOffer`]: one way to pay for a route.

use alloy_primitives::Address;

use crate::network::{Network, Token};
use crate::price::Price;

/// The default `maxTimeoutSeconds` of an offer (the official v2 default).
pub const DEFAULT_MAX_TIMEOUT_SECONDS: u64 = 300;

/// One thing a route sells: an amount of one token on one network, paid to one address.
///
/// A route may offer several (USDC on Base and on Polygon, say): the client picks one.
///
/// ```
/// use x402_tower::{network::Network, PaymentOffer, Price};
/// use alloy_primitives::address;
///
/// let offer = PaymentOffer::usdc(
///     "base-sepolia".parse().unwrap(),
///     address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
///     Price::from_usdc_decimal("0.01").unwrap(),
/// )
/// .unwrap()
/// .description("Weather report")
/// .mime_type("application/json");
/// assert_eq!(offer.token.name, "USDC");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PaymentOffer {
    /// The scheme it is sold under (`"exact"` unless set with [`PaymentOffer::scheme`]); the engine's
    /// [`Scheme`](crate::scheme::Scheme) of that name (and, for `exact`, of its
    /// `extra.assetTransferMethod`) reads and checks its payments.
    pub scheme: std::borrow::Cow<'static, str>,
    /// The network the payment is made on.
    pub network: Network,
    /// The token paid (its contract is the offer's `asset`).
    pub token: Token,
    /// The recipient.
    pub pay_to: Address,
    /// The amount, in the token's atomic units.
    pub amount: Price,
    /// How long a signed authorization should stay valid (clients set `validBefore = now + this`).
    pub max_timeout_seconds: u64,
    /// Description of the resource (`""` allowed).
    pub description: String,
    /// MIME type of the resource (`""` allowed).
    pub mime_type: String,
    /// Members of the offer's `extra` besides the token's EIP-712 `name` and `version` (which they cannot
    /// replace): what tells offers of one resource apart, such as the license each one sells. A v2 client
    /// echoes them in `accepted`, so they are part of what its payment must match.
    pub extra: std::collections::BTreeMap<String, String>,
}

/// An offer that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OfferError {
    /// USDC is not in the network table for this network: give a [`Token`] explicitly.
    #[error("no USDC known on {0}: give the token explicitly with PaymentOffer::new")]
    NoUsdc(Network),
}

impl PaymentOffer {
    /// An offer in USDC on a network of the table.
    pub fn usdc(network: Network, pay_to: Address, amount: Price) -> Result<Self, OfferError> {
        let token = Token::usdc(&network).ok_or_else(|| OfferError::NoUsdc(network.clone()))?;
        Ok(Self::new(network, token, pay_to, amount))
    }

    /// An offer in any EIP-3009 token (a local chain, another stablecoin).
    pub fn new(network: Network, token: Token, pay_to: Address, amount: Price) -> Self {
        PaymentOffer {
            scheme: std::borrow::Cow::Borrowed(crate::proto::SCHEME_EXACT),
            network,
            token,
            pay_to,
            amount,
            max_timeout_seconds: DEFAULT_MAX_TIMEOUT_SECONDS,
            description: String::new(),
            mime_type: String::new(),
            extra: std::collections::BTreeMap::new(),
        }
    }

    /// Sells the offer under the scheme `name` (default `"exact"`): the engine must know a
    /// [`Scheme`](crate::scheme::Scheme) that sells it
    /// ([`PaymentEngineBuilder::scheme`](crate::engine::PaymentEngineBuilder::scheme)).
    pub fn scheme(mut self, name: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        self.scheme = name.into();
        self
    }

    /// Sets the description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Sets the MIME type.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = mime_type.into();
        self
    }

    /// Adds `key: value` to the offer's `extra` (`name` and `version` are the token's and stay so).
    ///
    /// ```
    /// # use x402_tower::{PaymentOffer, Price};
    /// # let pay_to = alloy_primitives::address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C");
    /// let training = PaymentOffer::usdc("base".parse().unwrap(), pay_to, Price::from(100_000u64))
    ///     .unwrap()
    ///     .extra("license", "training");
    /// let extra = training.requirements_v2().extra.unwrap();
    /// assert_eq!((extra["name"].as_str(), extra["license"].as_str()), (Some("USD Coin"), Some("training")));
    /// ```
    pub fn extra(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.extra.insert(key.into(), value.into());
        self
    }

    /// Sets `maxTimeoutSeconds`.
    pub fn max_timeout_seconds(mut self, seconds: u64) -> Self {
        self.max_timeout_seconds = seconds;
        self
    }

    /// The x402 v2 `accepts` entry of this offer (its scheme, CAIP-2 network, the token's EIP-712 name
    /// and version in `extra`, then the offer's own `extra`). The layer's 402 sends this with what the
    /// offer's [`Scheme`](crate::scheme::Scheme) adds to `extra`.
    pub fn requirements_v2(&self) -> crate::proto::PaymentRequirementsV2 {
        self.requirements_v2_with(|_, _| {})
    }

    /// [`Self::requirements_v2`], with `scheme_extra`'s members in `extra` after the token's.
    pub(crate) fn requirements_v2_with(
        &self,
        scheme_extra: impl FnOnce(&Self, &mut serde_json::Map<String, serde_json::Value>),
    ) -> crate::proto::PaymentRequirementsV2 {
        crate::proto::PaymentRequirementsV2 {
            scheme: self.scheme.clone().into_owned(),
            network: self.network.caip2().to_owned(),
            amount: self.amount.atomic_units(),
            asset: self.token.address,
            pay_to: self.pay_to,
            max_timeout_seconds: self.max_timeout_seconds,
            extra: Some(self.extra_json(scheme_extra)),
        }
    }

    /// `extra`: the token's EIP-712 `name` and `version`, the scheme's members, then
    /// [`PaymentOffer::extra`]'s.
    fn extra_json(
        &self,
        scheme_extra: impl FnOnce(&Self, &mut serde_json::Map<String, serde_json::Value>),
    ) -> serde_json::Value {
        let mut extra = serde_json::Map::new();
        extra.insert("name".into(), self.token.name.clone().into());
        extra.insert("version".into(), self.token.version.clone().into());
        scheme_extra(self, &mut extra);
        for (key, value) in &self.extra {
            extra
                .entry(key.clone())
                .or_insert_with(|| value.clone().into());
        }
        serde_json::Value::Object(extra)
    }
}
