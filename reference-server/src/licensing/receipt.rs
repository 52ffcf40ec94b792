//! License receipts: token id, public JSON view, HTML certificate.

use alloy_primitives::{Address, U256};
use serde::Serialize;
use sha2::{Digest, Sha256};
use x402_tower::offer_receipt::SignedReceipt;

use crate::store::articles::{Article, Receipt};

/// The receipt token id: the decimal form of SHA-256 over the payment identity
/// (`network`, `asset`, `payer`, `nonce`, lower-cased). One payment can only ever yield one receipt,
/// and the id reveals nothing a payer did not already publish by paying.
pub fn token_id(network: &str, asset: &str, payer: &str, nonce: &str) -> String {
    let mut h = Sha256::new();
    for part in ["x402-license-receipt/1", network, asset, payer, nonce] {
        h.update(part.to_ascii_lowercase().as_bytes());
        h.update([0u8]);
    }
    U256::from_be_bytes::<32>(h.finalize().into()).to_string()
}

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
}

impl ReceiptView {
    /// The public view of a stored receipt.
    pub fn new(r: &Receipt, article_title: &str, public_url: &str, signer: Address) -> Self {
        Self {
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

pub use crate::html::html_escape;

/// The certificate's row about the signed receipt: who signed it, whether that is this server's key.
fn signed_row(r: &Receipt, server: Address) -> String {
    let Some(s) = signed(r) else {
        return "none (issued before receipts were signed)".to_owned();
    };
    match s.signer() {
        Ok(by) => format!(
            "EIP-712 (x402 offer-receipt), signed by <code>{by}</code>{note}<br><small>signature \
             <code>{sig}</code></small>",
            by = by.to_checksum(None),
            note = if by == server {
                " (this server's receipt key)"
            } else {
                " (<strong>not</strong> this server's current key: signed before a key change)"
            },
            sig = html_escape(&s.signature),
        ),
        Err(e) => format!("unreadable signature ({})", html_escape(&e.to_string())),
    }
}

/// The HTML certificate of a receipt.
pub fn certificate_html(
    r: &Receipt,
    article: Option<&Article>,
    signer: Address,
    public_url: &str,
) -> String {
    let e = html_escape;
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
    let rows = [
        ("Article", format!("{} ({})", e(title), e(&r.article_id))),
        ("Author", e(author)),
        ("Licensee (payer)", format!("<code>{}</code>", e(&r.payer))),
        ("Paid to", format!("<code>{}</code>", e(&r.pay_to))),
        (
            "Amount",
            format!("{} USDC ({} atomic units)", e(&amount), e(&r.amount_atomic)),
        ),
        ("Network", e(&r.network)),
        ("Token contract", format!("<code>{}</code>", e(&r.asset))),
        (
            "Authorization nonce",
            format!("<code>{}</code>", e(&r.nonce)),
        ),
        ("Settlement", format!("<code>{}</code>", e(&settlement))),
        ("x402 version", r.x402_version.to_string()),
        ("Issued", e(&r.created_at)),
        ("Signed receipt", signed_row(r, signer)),
    ];
    let mut table = String::new();
    for (k, v) in rows {
        table.push_str(&format!("<tr><th>{k}</th><td>{v}</td></tr>\n"));
    }
    let verify = e(&verify_url(public_url, &r.token_id));
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>License certificate {token}</title>\
         <style>body{{font-family:Georgia,serif;max-width:46rem;margin:2rem auto;padding:0 1rem;color:#222}}\
         .cert{{border:6px double #8a6d3b;padding:1.5rem 2rem}}h1{{text-align:center;margin-top:0}}\
         th{{text-align:left;padding:.3rem 1rem .3rem 0;vertical-align:top;white-space:nowrap}}\
         td{{padding:.3rem 0;word-break:break-all}}code{{font-size:.85em}}</style></head>\n\
         <body><div class=\"cert\"><h1>Content License Certificate</h1>\
         <p>This certifies that the licensee below paid for a license to <em>{title}</em> through the x402 \
         protocol.</p><p>Receipt token <strong>{token}</strong></p>\n<table>\n{table}</table>\n\
         <p>Machine-readable receipt: <a href=\"{verify}\">{verify}</a></p></div></body></html>\n",
        token = e(&r.token_id),
        title = e(title),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_id_is_stable_case_insensitive_and_decimal() {
        let a = token_id("eip155:84532", "0xAbC", "0xDeF", "0x01");
        assert_eq!(a, token_id("eip155:84532", "0xabc", "0xdef", "0x01"));
        assert_ne!(a, token_id("eip155:84532", "0xabc", "0xdef", "0x02"));
        assert!(a.bytes().all(|b| b.is_ascii_digit()));
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(
            html_escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
