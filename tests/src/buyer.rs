//! The workspace's own paying client (`x402_tower::client`) driven the two ways a Rust program uses it: the
//! Tower layer over hyper-util's client, and the reqwest-middleware adapter.

use alloy_signer_local::PrivateKeySigner;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use tower::{Layer, ServiceExt};
use x402_tower::client::{Paid, PaymentPolicy, X402ClientLayer, reqwest::X402Middleware};
use x402_tower::{
    Price,
    network::{Network, Token},
};

use crate::chain::{Chain, TOKEN_NAME, TOKEN_VERSION};

/// What a purchase by the Rust client gave.
#[derive(Debug)]
pub struct Bought {
    /// HTTP status of the final answer.
    pub status: u16,
    /// Its body.
    pub body: String,
    /// What was paid, if anything.
    pub paid: Option<Paid>,
}

/// Up to `max` USDC per request, on the built-in networks and in the chain's USDC on `network` (the chain's
/// id unless anvil runs as a named network).
pub fn policy(chain: Option<&Chain>, network: &Network, max: &str) -> PaymentPolicy {
    let policy = PaymentPolicy::new(Price::from_usdc_decimal(max).expect("price"));
    match chain {
        Some(chain) => policy.allow_token(
            network,
            Token::new(chain.usdc, TOKEN_NAME, TOKEN_VERSION, 6),
        ),
        None => policy,
    }
}

/// Buys `url` through [`X402ClientLayer`] over hyper-util's client.
pub async fn buy_with_layer(url: &str, key: &str, policy: PaymentPolicy) -> Bought {
    let signer: PrivateKeySigner = key.parse().expect("key");
    let http = HyperClient::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let client = X402ClientLayer::new(signer, policy).layer(http);
    let request = http::Request::get(url)
        .body(Full::default())
        .expect("request");
    let response = client.oneshot(request).await.expect("purchase");
    let status = response.status().as_u16();
    let paid = response.extensions().get::<Paid>().cloned();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    Bought {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
        paid,
    }
}

/// Buys `url` through [`X402Middleware`] on a reqwest client.
pub async fn buy_with_middleware(url: &str, key: &str, policy: PaymentPolicy) -> Bought {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let signer: PrivateKeySigner = key.parse().expect("key");
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(X402Middleware::new(signer, policy))
        .build();
    let response = client.get(url).send().await.expect("purchase");
    let status = response.status().as_u16();
    let paid = response.extensions().get::<Paid>().cloned();
    Bought {
        status,
        body: response.text().await.expect("body"),
        paid,
    }
}
