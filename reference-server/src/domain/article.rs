//! An article of the catalog and the license receipt of one purchase, as the store keeps them.

use serde::Serialize;

use crate::domain::license::License;

/// One article of the catalog, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Article {
    /// Identifier (a URL-safe slug), the `articleId` of the API.
    pub id: String,
    /// Title.
    pub title: String,
    /// Short free teaser shown in the catalog.
    pub excerpt: String,
    /// Full text, sold.
    pub content: String,
    /// Author's display name.
    pub author_name: String,
    /// Publication date, `YYYY-MM-DD`.
    pub published_date: String,
    /// Price in USDC atomic units (6 decimals: 10 000 = 0.01 USDC).
    pub price_atomic: u64,
    /// Only published articles are listed and sold.
    pub published: bool,
    /// The licenses it is sold under, each at its own price (empty: the site's default terms at
    /// `price_atomic`; see [`licensing::license`](crate::domain::license)).
    pub licenses: Vec<License>,
}

/// A durable license receipt: proof that `payer` paid for `article_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Receipt {
    /// Receipt (NFT-style) token id: a decimal uint256 derived from the payment identity.
    pub token_id: String,
    /// The licensed article.
    pub article_id: String,
    /// Who paid (0x address).
    pub payer: String,
    /// Who was paid (0x address).
    pub pay_to: String,
    /// Amount paid, token atomic units, decimal string.
    pub amount_atomic: String,
    /// CAIP-2 network of the payment.
    pub network: String,
    /// Token contract address.
    pub asset: String,
    /// EIP-3009 authorization nonce.
    pub nonce: String,
    /// x402 protocol version the client used (1 or 2).
    pub x402_version: u8,
    /// Settlement transaction hash, or `verify-only`.
    pub settlement: String,
    /// When the receipt was issued, RFC 3339 UTC.
    pub created_at: String,
    /// The receipt signed by the server's receipt key (x402 offer-receipt, EIP-712), as JSON; `None` for
    /// receipts issued before signing existed.
    pub signed: Option<String>,
    /// The license bought (its id within the article); `None` for receipts issued before licenses existed.
    pub license_id: Option<String>,
    /// The version of the article's terms it was bought under (the x402 `terms` version of the 402).
    pub license_version: Option<String>,
    /// The buyer's verified crawler identity (Web Bot Auth), when its request was signed.
    pub agent: Option<String>,
}

impl Receipt {
    /// Whether the token id is the payment's ([`token_id`](crate::domain::token::token_id) of its
    /// network, asset, payer and nonce, with the authorization's `validBefore`; or the
    /// [`legacy_token_id`](crate::domain::token::legacy_token_id) of receipts issued before ids sorted
    /// by time): the identical payment always yields the same id, so the token id's key is what refuses a
    /// second receipt for a payment.
    pub fn token_is_its_payments(&self) -> bool {
        crate::domain::token::is_token_of(
            &self.token_id,
            &self.network,
            &self.asset,
            &self.payer,
            &self.nonce,
        )
    }
}
