//! Buy one URL from any x402 server: the Rust equivalent of `@x402/fetch`.
//!
//! ```sh
//! X402_PAYER_KEY=0x... cargo run -p x402-tower --example pay --features client -- \
//!     https://example.com/paid --max 0.10 --network base-sepolia
//! ```
//!
//! The body goes to stdout, what was paid (and the settlement receipt) to stderr as JSON. Exit status: 0
//! when the answer is 2xx, 1 when it is not or the payment was refused by the policy, 2 on bad arguments.
//! `--token CAIP2,ADDRESS,NAME,VERSION` allows a token the built-in table does not know (USDC on a local
//! chain). The HTTP client is reqwest (through `tower::service_fn`): the layer works over any Tower client.

use std::process::ExitCode;

use alloy_signer_local::PrivateKeySigner;
use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use serde_json::json;
use tower::{Layer, ServiceExt};
use x402_tower::client::{ClientError, Paid, PaymentPolicy, X402ClientLayer};
use x402_tower::{Network, Price, Token};

#[derive(Parser)]
#[command(about = "Buy a URL from an x402 server (key from X402_PAYER_KEY)")]
struct Args {
    /// The URL to buy.
    url: String,
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

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
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
    let request = match http::Request::get(&args.url).body(Full::<Bytes>::default()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: bad URL {:?}: {e}", args.url);
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
