//! What a person in a browser gets instead of the JSON 402 (a request whose `Accept` prefers HTML).
//!
//! - [`Paywall::Builtin`] (the default): a page that shows what is sold (the offer's description, price in USDC,
//!   network, payee) and lets the reader pay from any EIP-1193 wallet (EIP-6963 discovery when several are
//!   installed, else `window.ethereum`): connect, switch to the offer's chain, show the USDC balance, sign the
//!   EIP-3009 authorization with `eth_signTypedData_v4`, repeat the request with `PAYMENT-SIGNATURE` and show
//!   the paid answer in place (HTML replaces the page; JSON is rendered: an article with its receipt links, or
//!   pretty-printed). Plain JavaScript compiled into the crate (about 8 KB, no CDN, works offline), the page
//!   rendered by an askama template (escaping by default), sent with a `Content-Security-Policy` that allows
//!   only its own inline script and style (by hash) and requests to its own origin.
//! - [`Paywall::Custom`]: your template ([`PaywallTemplate`], or any `Fn(&PaywallPage) -> String`).
//! - [`Paywall::Off`]: browsers get the JSON 402 like any client.
//!
//! ```
//! use x402_tower::layer::paywall::{Paywall, PaywallPage};
//! let custom = Paywall::custom(|page: &PaywallPage<'_>| {
//!     format!("<!doctype html><title>Pay</title><p>{} costs {} atomic units</p>",
//!         x402_tower::layer::paywall::escape(page.resource_url), page.offers[0].amount.atomic_units())
//! });
//! # let _ = custom;
//! ```

use std::sync::{Arc, LazyLock};

use askama::Template;
use base64::Engine as _;
use http::HeaderValue;
use sha2::{Digest, Sha256};

use crate::offer::PaymentOffer;
use crate::price::format_decimal;

/// Renders a paywall page for a 402.
pub trait PaywallTemplate: Send + Sync + 'static {
    /// The whole HTML document.
    fn render(&self, page: &PaywallPage<'_>) -> String;
}

impl<F> PaywallTemplate for F
where
    F: Fn(&PaywallPage<'_>) -> String + Send + Sync + 'static,
{
    fn render(&self, page: &PaywallPage<'_>) -> String {
        self(page)
    }
}

/// What a paywall page is made from.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct PaywallPage<'a> {
    /// The absolute URL sold.
    pub resource_url: &'a str,
    /// The server's reason (`error` of the 402).
    pub error: &'a str,
    /// The offers (the first is the one the built-in page pays).
    pub offers: &'a [PaymentOffer],
    /// The v2 `PaymentRequired` document (JSON), as in the `PAYMENT-REQUIRED` header.
    pub payment_required: &'a str,
}

/// Which page a browser gets. See the [module docs](self).
#[derive(Clone, Default)]
pub enum Paywall {
    /// The built-in page that pays from a browser wallet.
    #[default]
    Builtin,
    /// Your page.
    Custom(Arc<dyn PaywallTemplate>),
    /// No page: the JSON 402.
    Off,
}

impl std::fmt::Debug for Paywall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Paywall::Builtin => "Paywall::Builtin",
            Paywall::Custom(_) => "Paywall::Custom",
            Paywall::Off => "Paywall::Off",
        })
    }
}

impl Paywall {
    /// [`Paywall::Custom`] from a template or closure.
    pub fn custom(template: impl PaywallTemplate) -> Self {
        Paywall::Custom(Arc::new(template))
    }
}

/// HTML-escapes text (for custom templates written by hand).
pub fn escape(text: &str) -> String {
    askama::filters::escape(text, askama::filters::Html)
        .map(|s| s.to_string())
        .unwrap_or_default()
}

const SCRIPT: &str = include_str!("../../paywall/paywall.js");
const STYLE: &str = include_str!("../../paywall/paywall.css");

/// The built-in page's `Content-Security-Policy`: its inline script and style by hash, requests to its own
/// origin only (the paid request), nothing else.
static CSP: LazyLock<HeaderValue> = LazyLock::new(|| {
    let hash = |s: &str| base64::engine::general_purpose::STANDARD.encode(Sha256::digest(s));
    HeaderValue::try_from(format!(
        "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; connect-src 'self'; \
         img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        hash(SCRIPT),
        hash(STYLE)
    ))
    .unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'"))
});

#[derive(Template)]
#[template(path = "paywall.html")]
struct Builtin<'a> {
    title: &'a str,
    description: &'a str,
    price: String,
    network: String,
    pay_to: String,
    resource_url: &'a str,
    reason: &'static str,
    css: &'static str,
    script: &'static str,
    data: String,
}

/// `wallet_addEthereumChain` parameters of the public testnets, for a wallet that does not know the chain
/// (mainnets are in every wallet). Their public RPC endpoints and explorers.
fn add_chain_params(v1_name: &str, chain_id: u64) -> Option<serde_json::Value> {
    let (name, native, rpc, explorer) = match v1_name {
        "base-sepolia" => (
            "Base Sepolia",
            "ETH",
            "https://sepolia.base.org",
            "https://sepolia.basescan.org",
        ),
        "avalanche-fuji" => (
            "Avalanche Fuji",
            "AVAX",
            "https://api.avax-test.network/ext/bc/C/rpc",
            "https://testnet.snowtrace.io",
        ),
        "polygon-amoy" => (
            "Polygon Amoy",
            "POL",
            "https://rpc-amoy.polygon.technology",
            "https://amoy.polygonscan.com",
        ),
        "arbitrum-sepolia" => (
            "Arbitrum Sepolia",
            "ETH",
            "https://sepolia-rollup.arbitrum.io/rpc",
            "https://sepolia.arbiscan.io",
        ),
        _ => return None,
    };
    Some(serde_json::json!({
        "chainId": format!("0x{chain_id:x}"),
        "chainName": name,
        "nativeCurrency": {"name": native, "symbol": native, "decimals": 18},
        "rpcUrls": [rpc],
        "blockExplorerUrls": [explorer],
    }))
}

/// The spec's reasons a reader may see, in words: used for the page's first rendering and sent to its
/// script (in the data block) for the answers it gets itself. One table for both.
const REASONS: &[(&str, &str)] = &[
    (
        "insufficient_funds",
        "Your USDC balance is too low for this payment.",
    ),
    (
        "invalid_exact_evm_payload_signature",
        "The wallet's signature was not accepted.",
    ),
    (
        "invalid_exact_evm_nonce_already_used",
        "This payment was already used.",
    ),
    (
        "invalid_exact_evm_payload_authorization_valid_before",
        "The payment expired before it arrived. Try again.",
    ),
    (
        "invalid_exact_evm_payload_authorization_value",
        "The amount signed is not the price.",
    ),
    (
        "settlement_pending",
        "The payment is being confirmed on chain. Try again in a moment: you will not be charged twice.",
    ),
];

/// [`REASONS`] as the JSON object the script reads, serialised once.
static REASONS_JSON: LazyLock<String> = LazyLock::new(|| {
    let map: serde_json::Map<String, serde_json::Value> = REASONS
        .iter()
        .map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(*v)))
        .collect();
    serde_json::Value::Object(map).to_string()
});

/// The server's reason in words (empty for the first 402 of a request without payment).
fn reason_in_words(error: &str) -> &'static str {
    if error.is_empty() || error == crate::layer::NO_PAYMENT_ERROR {
        return "";
    }
    match REASONS.iter().find(|(k, _)| *k == error) {
        Some((_, words)) => words,
        None if error.starts_with("siwx_") => "Signing in did not work: pay to read.",
        None => "The last payment was refused. Try again.",
    }
}

/// The page for `page` and the headers it needs (the CSP of the built-in page), or `None` when the paywall
/// is off.
pub(crate) fn render(
    paywall: &Paywall,
    page: &PaywallPage<'_>,
) -> Option<(String, Option<HeaderValue>)> {
    match paywall {
        Paywall::Off => None,
        Paywall::Custom(t) => Some((t.render(page), None)),
        Paywall::Builtin => {
            let first = page.offers.first()?;
            let network = match first.network.info() {
                Some(i) => format!("{} ({})", i.v1_name, i.caip2),
                None => first.network.caip2().to_owned(),
            };
            // The requirements for the script, with what it shows; `<` escaped so nothing in the JSON can
            // close the data block.
            let chain = first
                .network
                .info()
                .and_then(|i| add_chain_params(i.v1_name, i.chain_id))
                .map(|c| format!("\"chain\":{c},"))
                .unwrap_or_default();
            let data = format!(
                "{{\"networkName\":{},\"decimals\":{},\"reasons\":{},{chain}{}",
                serde_json::to_string(&network).unwrap_or_default(),
                first.token.decimals,
                *REASONS_JSON,
                page.payment_required.get(1..).unwrap_or("}")
            )
            .replace('<', "\\u003c");
            let title = if first.description.is_empty() {
                page.resource_url
            } else {
                &first.description
            };
            let html = Builtin {
                title,
                description: "",
                price: format_decimal(first.amount.atomic_units(), first.token.decimals),
                network,
                pay_to: first.pay_to.to_checksum(None),
                resource_url: page.resource_url,
                reason: reason_in_words(page.error),
                css: STYLE,
                script: SCRIPT,
                data,
            }
            .render()
            .unwrap_or_else(|e| {
                format!("<!doctype html><title>402</title><p>Payment required ({e})</p>")
            });
            Some((html, Some(CSP.clone())))
        }
    }
}
