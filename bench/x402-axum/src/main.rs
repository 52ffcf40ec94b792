//! The comparison server of the money path's benchmarks: x402-rs's `x402-axum` middleware selling
//! `/x402Article` (USDC on Base Sepolia, settled before the handler), its facilitator an in-memory
//! x402-tower facilitator door (verify-only: it checks the EIP-3009 signature and the nonce, moves nothing)
//! served by this same process on a second port, so this process's CPU is the server's plus the
//! facilitator's, which is where x402-axum verifies.
//!
//! Started by the load tool like a reference server (`LOAD_SERVER_BIN=<this binary>`): it takes
//! `--listen <addr>`, ignores the reference server's other flags, and prints its URL on the first line.

use std::net::SocketAddr;
use std::sync::Arc;

use alloy_primitives::address;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use x402_axum::X402Middleware;
use x402_chain_eip155::{KnownNetworkEip155, V2Eip155Exact};
use x402_tower::engine::PaymentEngine;
use x402_tower::engine::facilitator::FacilitatorPolicy;
use x402_tower::{proto::SupportedResponse, settle::VerifyOnlySettler};
use x402_types::networks::USDC;

/// A paid answer of about the size of the reference server's (an article and its receipt links).
const ARTICLE: &str = concat!(
    r#"{"id":"c2pa-explained","title":"C2PA explained","content":""#,
    "Provenance metadata travels with the media it describes. ",
    "Provenance metadata travels with the media it describes. ",
    "Provenance metadata travels with the media it describes. ",
    "Provenance metadata travels with the media it describes. ",
    "Provenance metadata travels with the media it describes. ",
    "Provenance metadata travels with the media it describes. ",
    "Provenance metadata travels with the media it describes. ",
    "Provenance metadata travels with the media it describes. ",
    r#""}"#
);

struct Door {
    engine: PaymentEngine,
    policy: FacilitatorPolicy,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut listen: SocketAddr = "127.0.0.1:0".parse()?;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--listen" {
            listen = args.next().ok_or("--listen needs an address")?.parse()?;
        }
    }

    let door = Arc::new(Door {
        engine: PaymentEngine::builder()
            .settler(Arc::new(VerifyOnlySettler))
            .build()?,
        policy: FacilitatorPolicy::default(),
    });
    let facilitator = Router::new()
        .route("/verify", post(verify))
        .route("/settle", post(settle))
        .route("/supported", get(supported))
        .with_state(door);
    let fac_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let fac_url = format!("http://{}/", fac_listener.local_addr()?);
    tokio::spawn(async move { axum::serve(fac_listener, facilitator).await });

    let listener = tokio::net::TcpListener::bind(listen).await?;
    let url = format!("http://{}", listener.local_addr()?);
    let x402 = X402Middleware::try_from(fac_url.as_str())?
        .settle_before_execution()
        .with_base_url(url.parse()?);
    let app = Router::new().route(
        "/x402Article",
        get(article).layer(x402.with_price_tag(V2Eip155Exact::price_tag(
            address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
            USDC::base_sepolia().amount(10_000u64),
        ))),
    );
    println!("x402-axum harness on {url} (facilitator {fac_url})");
    axum::serve(listener, app).await?;
    Ok(())
}

async fn article() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], ARTICLE).into_response()
}

async fn verify(State(door): State<Arc<Door>>, body: Bytes) -> Response {
    match door.engine.facilitator_verify(&door.policy, &body).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    }
}

async fn settle(State(door): State<Arc<Door>>, body: Bytes) -> Response {
    match door.engine.facilitator_settle(&door.policy, &body).await {
        Ok(s) => axum::Json(s).into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    }
}

async fn supported(State(door): State<Arc<Door>>) -> Response {
    match door.engine.settler().supported().await {
        Ok(s) => axum::Json::<SupportedResponse>(s).into_response(),
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}
