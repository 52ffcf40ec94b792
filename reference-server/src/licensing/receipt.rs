//! License receipts: token id, public JSON view, HTML certificate.

use alloy_primitives::Address;
use serde::Serialize;
use x402_tower::extensions::offer_receipt::SignedReceipt;

use crate::domain::{Article, Receipt};

/// `{public}/receipts/{token}`: the receipt as JSON.
pub fn verify_url(public_url: &str, token_id: &str) -> String {
    format!("{public_url}/receipts/{token_id}")
}

/// `{public}/receipts/{token}/certificate`: the HTML certificate.
pub fn certificate_url(public_url: &str, token_id: &str) -> String {
    format!("{public_url}/receipts/{token_id}/certificate")
}

/// The JSON a verify URL answers.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptView {
    /// Receipt token id.
    pub token_id: String,
    /// Licensed article.
    pub article_id: String,
    /// Its title.
    pub article_title: String,
    /// Payer address.
    pub payer: String,
    /// Recipient address.
    pub pay_to: String,
    /// Amount in token atomic units.
    pub amount: String,
    /// Amount in USDC, for people.
    pub amount_usdc: f64,
    /// CAIP-2 network.
    pub network: String,
    /// Token contract.
    pub asset: String,
    /// EIP-3009 nonce.
    pub nonce: String,
    /// x402 protocol version used.
    pub x402_version: u8,
    /// Settlement transaction hash, or `verify-only`.
    pub settlement: String,
    /// Issue time (RFC 3339 UTC).
    #[schema(format = DateTime)]
    pub issued_at: String,
    /// Where the HTML certificate is.
    #[schema(format = "uri")]
    pub certificate_url: String,
    /// The receipt signed by the server (x402 offer-receipt, EIP-712), exactly as the buyer got it in
    /// `PAYMENT-RESPONSE` and the article answer; absent for receipts issued before signing existed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signed_receipt: Option<SignedReceipt>,
    /// The address this server signs offers and receipts with now (what a signed receipt's signature must
    /// recover to; also in the start-up banner and `/receipts/signer`).
    pub receipt_signer: String,
    /// The license bought and the terms it was bought under; absent for receipts issued before licenses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub license: Option<LicenseBought>,
    /// The buyer's verified crawler identity (Web Bot Auth agent), when its request was signed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The receipt's license token on chain (filled in by the handler).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub license_token: Option<LicenseTokenView>,
}

/// `license` of a [`ReceiptView`]: who paid for what use, under which terms.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct LicenseBought {
    /// The license's id within the article (`inference`, `training`, `standard`...).
    pub id: String,
    /// The version of the article's terms when it was bought (the x402 `terms` version of its 402).
    pub version: Option<String>,
    /// The article's RSL document (its terms now; `version` says whether they changed since).
    #[schema(format = "uri")]
    pub terms: String,
    /// What the license permits, prohibits and for whom, when the article's terms are still at `version`
    /// (then exactly what was bought); absent when they changed since (`terms` shows the new ones).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grants: Option<crate::domain::license::License>,
}

/// `licenseToken` of a [`ReceiptView`]: the receipt's ERC-721 license token on chain.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LicenseTokenView {
    /// `minted` (its owner read on chain now), `pending` (queued or being retried), or `not_minted` (this
    /// server mints no license tokens, or the payment was not settled on chain).
    pub status: &'static str,
    /// The license-token contract.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contract: Option<String>,
    /// `ownerOf(tokenId)` on chain, read for this answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The mint transaction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transaction: Option<String>,
    /// Why it is not minted (yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl LicenseTokenView {
    /// The license token of `r` as the server knows it now (reads `ownerOf` on chain when minted).
    pub async fn of(r: &Receipt, state: &crate::licensing::Licensing) -> Self {
        let Some(minter) = &state.minter else {
            return Self::none("this server mints no license tokens (no --license-token contract)");
        };
        let contract = Some(minter.contract().to_checksum(None));
        let row = state
            .licensing
            .license_mint(&r.token_id)
            .await
            .ok()
            .flatten();
        match row {
            Some(m) if m.status == "minted" => Self {
                status: "minted",
                contract,
                owner: minter
                    .owner_of(&r.token_id)
                    .await
                    .map(|a| a.to_checksum(None)),
                transaction: m.tx_hash,
                note: None,
            },
            Some(m) => Self {
                status: "pending",
                contract,
                owner: None,
                transaction: None,
                note: Some(match m.last_error {
                    Some(e) => format!("attempt {} failed, will retry: {e}", m.attempts),
                    None => "queued".to_owned(),
                }),
            },
            None if !r.settlement.starts_with("0x") => {
                Self::none("the payment was not settled on chain: no license token")
            }
            None => Self {
                status: "pending",
                contract,
                owner: None,
                transaction: None,
                note: Some("queued".to_owned()),
            },
        }
    }

    fn none(note: &str) -> Self {
        Self {
            status: "not_minted",
            contract: None,
            owner: None,
            transaction: None,
            note: Some(note.to_owned()),
        }
    }

    /// One line for the certificate.
    pub fn summary(&self) -> String {
        match (self.status, &self.owner) {
            ("minted", Some(owner)) => format!(
                "minted: owned on chain by {owner} (contract {}, transaction {})",
                self.contract.as_deref().unwrap_or("?"),
                self.transaction.as_deref().unwrap_or("?")
            ),
            _ => format!(
                "{}{}",
                self.status,
                self.note
                    .as_ref()
                    .map_or(String::new(), |n| format!(": {n}"))
            ),
        }
    }
}

impl LicenseBought {
    /// The license a stored receipt records; `current` is the article as the catalog sells it now (its
    /// licenses resolved, and the x402 `terms` whose version they have), if it is published.
    pub fn of(
        r: &Receipt,
        public_url: &str,
        current: Option<&super::articles::ForSale>,
    ) -> Option<Self> {
        let id = r.license_id.as_ref()?;
        let grants = current
            .filter(|f| f.terms.info().version == r.license_version)
            .and_then(|f| f.article.licenses.iter().find(|x| &x.id == id))
            .cloned();
        Some(LicenseBought {
            id: id.clone(),
            version: r.license_version.clone(),
            terms: crate::licensing::rsl::terms_url(public_url, &r.article_id),
            grants,
        })
    }
}

impl ReceiptView {
    /// The public view of a stored receipt.
    pub fn new(
        r: &Receipt,
        article_title: &str,
        public_url: &str,
        signer: Address,
        current: Option<&super::articles::ForSale>,
    ) -> Self {
        Self {
            license: LicenseBought::of(r, public_url, current),
            agent: r.agent.clone(),
            license_token: None,
            token_id: r.token_id.clone(),
            article_id: r.article_id.clone(),
            article_title: article_title.to_owned(),
            payer: r.payer.clone(),
            pay_to: r.pay_to.clone(),
            amount: r.amount_atomic.clone(),
            amount_usdc: r
                .amount_atomic
                .parse::<u64>()
                .map(super::usdc_amount)
                .unwrap_or(0.0),
            network: r.network.clone(),
            asset: r.asset.clone(),
            nonce: r.nonce.clone(),
            x402_version: r.x402_version,
            settlement: r.settlement.clone(),
            issued_at: r.created_at.clone(),
            certificate_url: certificate_url(public_url, &r.token_id),
            signed_receipt: signed(r),
            receipt_signer: signer.to_checksum(None),
        }
    }
}

/// The stored signed receipt of `r`, read back.
pub fn signed(r: &Receipt) -> Option<SignedReceipt> {
    parse_signed(r.signed.as_deref())
}

/// A stored signed receipt (JSON), read back.
pub fn parse_signed(json: Option<&str>) -> Option<SignedReceipt> {
    json.and_then(|j| serde_json::from_str(j).ok())
}

/// The signed receipt as the certificate shows it.
struct SignedRow {
    signer: String,
    current: bool,
    signature: String,
}

#[derive(askama::Template)]
#[template(path = "certificate.html")]
struct Certificate<'a> {
    token: &'a str,
    title: &'a str,
    rows: Vec<(&'static str, String)>,
    signed: Option<SignedRow>,
    unsigned: &'static str,
    verify_url: String,
}

/// The HTML certificate of a receipt.
pub fn certificate_html(
    r: &Receipt,
    article: Option<&Article>,
    signer: Address,
    public_url: &str,
    token: &LicenseTokenView,
) -> String {
    use askama::Template as _;
    let (title, author) = article.map_or(("(article removed)", ""), |a| {
        (a.title.as_str(), a.author_name.as_str())
    });
    let amount = r
        .amount_atomic
        .parse::<u64>()
        .map(super::usdc_display)
        .unwrap_or_else(|_| r.amount_atomic.clone());
    let settlement = if r.settlement == "verify-only" {
        "verify-only (payment signature verified; not submitted on chain)".to_owned()
    } else {
        r.settlement.clone()
    };
    let rows = vec![
        ("Article", format!("{title} ({})", r.article_id)),
        ("Author", author.to_owned()),
        ("Licensee (payer)", r.payer.clone()),
        ("Paid to", r.pay_to.clone()),
        (
            "Amount",
            format!("{amount} USDC ({} atomic units)", r.amount_atomic),
        ),
        ("Network", r.network.clone()),
        ("Token contract", r.asset.clone()),
        ("Authorization nonce", r.nonce.clone()),
        ("Settlement", settlement),
        ("x402 version", r.x402_version.to_string()),
        ("Issued", r.created_at.clone()),
        (
            "License",
            r.license_id.as_ref().map_or_else(
                || "(issued before licenses were recorded)".to_owned(),
                |id| {
                    format!(
                        "{id} (terms version {}; {})",
                        r.license_version.as_deref().unwrap_or("?"),
                        crate::licensing::rsl::terms_url(public_url, &r.article_id)
                    )
                },
            ),
        ),
        ("License token", token.summary()),
    ];
    let signed = signed(r).map(|s| {
        let by = s.signer().ok();
        SignedRow {
            signer: by.map_or_else(
                || "(unreadable signature)".to_owned(),
                |a| a.to_checksum(None),
            ),
            current: by == Some(signer),
            signature: s.signature,
        }
    });
    Certificate {
        token: &r.token_id,
        title,
        rows,
        signed,
        unsigned: "none (issued before receipts were signed)",
        verify_url: verify_url(public_url, &r.token_id),
    }
    .render()
    .unwrap_or_else(|e| format!("certificate unavailable: {e}"))
}

#[cfg(test)]
mod tests {}
