//! Buy one URL from any x402 server: the Rust equivalent of `@x402/fetch`.
//!
//! ```sh
//! X402_PAYER_KEY=0x... cargo run -p x402-tower --example pay --features client -- \
//!     https://example.com/paid --max 0.10 --network base-sepolia
//! ```
//!
//! The body goes to stdout, what was paid (and the settlement receipt, with the signed receipt checked
//! against the key that signed the offer, or `--receipt-key`) to stderr as JSON. Exit status: 0 when the
//! answer is 2xx, 1 when it is not or the payment was refused by the policy, 2 on bad arguments.
//!
//! `--discover FACILITATOR_URL` instead prints what a facilitator lists for discovery (x402 bazaar):
//!
//! ```sh
//! cargo run -p x402-tower --example pay --features client -- --discover http://127.0.0.1:8080/facilitator
//! ```
//! `--token CAIP2,ADDRESS,NAME,VERSION` allows a token the built-in table does not know (USDC on a local
//! chain). The HTTP client is reqwest (through `tower::service_fn`): the layer works over any Tower client.

use std::process::ExitCode;

use alloy_signer_local::PrivateKeySigner;
use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use serde_json::json;
use tower::{Layer, ServiceExt};
use x402_tower::client::{ClientError, Paid, PaymentPolicy, ReceiptError, X402ClientLayer};
use x402_tower::extensions::bazaar::{DiscoveryQuery, list_resources};
use x402_tower::{
    Price,
    network::{Network, Token},
};

#[derive(Parser)]
#[command(about = "Buy a URL from an x402 server (key from X402_PAYER_KEY)")]
struct Args {
    /// The URL to buy.
    #[arg(required_unless_present = "discover")]
    url: Option<String>,
    /// Print a facilitator's discovery listing (`GET {URL}/discovery/resources`) instead of buying.
    #[arg(long, value_name = "FACILITATOR_URL")]
    discover: Option<String>,
    /// The key the server publishes for its signed receipts (default: the key that signed the offer).
    #[arg(long)]
    receipt_key: Option<alloy_primitives::Address>,
    /// The most to pay for it, in USDC (decimal).
    #[arg(long, default_value = "0.10")]
    max: String,
    /// Networks to pay on (v1 name or CAIP-2), repeatable; default every network of the built-in table.
    #[arg(long)]
    network: Vec<String>,
    /// Also pay in this token: `CAIP2,ADDRESS,NAME,VERSION` (e.g. USDC on a local chain).
    #[arg(long)]
    token: Vec<String>,
    /// The private key's environment variable.
    #[arg(long, default_value = "X402_PAYER_KEY")]
    key_env: String,
}

fn policy(args: &Args) -> Result<PaymentPolicy, String> {
    let max = Price::from_usdc_decimal(&args.max).map_err(|e| format!("--max: {e}"))?;
    let mut policy = PaymentPolicy::new(max);
    if !args.network.is_empty() {
        let networks: Result<Vec<Network>, _> = args.network.iter().map(|n| n.parse()).collect();
        policy = policy.networks(networks.map_err(|e| format!("--network: {e}"))?);
    }
    for spec in &args.token {
        let parts: Vec<&str> = spec.split(',').collect();
        let [network, address, name, version] = parts[..] else {
            return Err(format!(
                "--token {spec:?}: expected CAIP2,ADDRESS,NAME,VERSION"
            ));
        };
        let network: Network = network.parse().map_err(|e| format!("--token: {e}"))?;
        let address = address
            .parse()
            .map_err(|e| format!("--token address {address:?}: {e}"))?;
        policy = policy.allow_token(&network, Token::new(address, name, version, 6));
    }
    Ok(policy)
}

/// Prints every page of a facilitator's discovery listing as one JSON document.
async fn discover(facilitator: &str) -> ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let mut items = Vec::new();
    // At most 10 000 resources (100 pages), whatever the facilitator claims its total is.
    for page in 0..100u64 {
        let query = DiscoveryQuery {
            kind: Some("http".into()),
            limit: Some(100),
            offset: Some(page * 100),
        };
        match list_resources(&http, facilitator, &query).await {
            Ok(list) => {
                let done = list.items.is_empty()
                    || list.pagination.offset + (list.items.len() as u64) >= list.pagination.total;
                items.extend(list.items);
                if done {
                    break;
                }
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        }
    }
    for item in &items {
        eprintln!(
            "{}  {} atomic units on {}",
            item.resource,
            item.accepts.first().map_or(&json!(null), |a| &a["amount"]),
            item.accepts.first().map_or(&json!(null), |a| &a["network"]),
        );
    }
    println!("{}", json!({ "items": items }));
    ExitCode::SUCCESS
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(facilitator) = &args.discover {
        return discover(facilitator).await;
    }
    let Some(url) = args.url.clone() else {
        eprintln!("error: give the URL to buy, or --discover");
        return ExitCode::from(2);
    };
    let signer: PrivateKeySigner = match std::env::var(&args.key_env).map(|k| k.trim().parse()) {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            eprintln!("error: {} is not a private key: {e}", args.key_env);
            return ExitCode::from(2);
        }
        Err(_) => {
            eprintln!(
                "error: set {} to the payer's private key (hex)",
                args.key_env
            );
            return ExitCode::from(2);
        }
    };
    let policy = match policy(&args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let request = match http::Request::get(&url).body(Full::<Bytes>::default()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: bad URL {url:?}: {e}");
            return ExitCode::from(2);
        }
    };

    // reqwest as the Tower HTTP client: http::Request in, http::Response out.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let reqwest = reqwest::Client::new();
    let http = tower::service_fn(move |req: http::Request<Full<Bytes>>| {
        let reqwest = reqwest.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let req = reqwest::Request::try_from(http::Request::from_parts(parts, body))?;
            let res = reqwest.execute(req).await?;
            Ok::<_, reqwest::Error>(http::Response::<reqwest::Body>::from(res))
        }
    });
    let client = X402ClientLayer::new(signer, policy).layer(http);

    let response = match client.oneshot(request).await {
        Ok(r) => r,
        Err(ClientError::Refused(r)) => {
            eprintln!("not paid: {r}");
            return ExitCode::from(1);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let status = response.status();
    let paid = response.extensions().get::<Paid>().cloned();
    let body = match response.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            eprintln!("error: reading the answer: {e}");
            return ExitCode::from(1);
        }
    };
    let summary = match &paid {
        Some(p) => json!({
            "status": status.as_u16(),
            "paid": {
                "amount": p.amount().to_string(),
                "network": p.network().caip2(),
                "asset": p.offer.asset.to_checksum(None),
                "payTo": p.offer.pay_to.to_checksum(None),
                "payer": p.payer.to_checksum(None),
                "x402Version": p.payment.x402_version,
                "resends": p.resends,
            },
            "settlement": p.settlement,
            "receipt": match p.verify_receipt(args.receipt_key) {
                Ok(r) => json!({"verified": true, "signer": r.signer().ok(), "signed": r}),
                Err(ReceiptError::Missing) => json!(null),
                Err(e) => json!({"verified": false, "why": e.to_string()}),
            },
        }),
        None => json!({"status": status.as_u16(), "paid": null}),
    };
    eprintln!("{summary}");
    use std::io::Write as _;
    let _ = std::io::stdout().write_all(&body);
    if status.is_success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
