//! Sell a JSON weather report for 0.01 USDC on Base Sepolia with axum.
//!
//! ```sh
//! cargo run -p x402-tower --example seller_axum              # serves on 127.0.0.1:3000 until Ctrl-C
//! cargo run -p x402-tower --example seller_axum -- --check   # asks itself once, expects 402, exits
//! ```
//!
//! An unpaid `GET /weather` is answered 402 with the payment requirements; a request carrying a valid
//! payment (`PAYMENT-SIGNATURE` or `X-PAYMENT`, e.g. from `examples/pay.rs`) reaches the handler, which
//! finds the payer in the request's extensions. The engine is verify-only: signatures are checked and no
//! money moves (see `seller_facilitator` for settling through a facilitator).

use std::sync::Arc;

use alloy_primitives::address;
use axum::{Extension, Router, routing::get};
use x402_tower::settle::VerifyOnlySettler;
use x402_tower::{PaymentEngine, PaymentOffer, Price, VerifiedPayment, X402Layer};

async fn weather(Extension(paid): Extension<VerifiedPayment>) -> String {
    format!("{{\"forecast\":\"sunny\",\"paid_by\":\"{}\"}}", paid.payer)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let check = std::env::args().any(|a| a == "--check");
    let listener = tokio::net::TcpListener::bind(if check {
        "127.0.0.1:0"
    } else {
        "127.0.0.1:3000"
    })
    .await?;
    let addr = listener.local_addr()?;

    let engine = PaymentEngine::builder()
        .settler(Arc::new(VerifyOnlySettler))
        .build()?;
    let paid = X402Layer::builder(format!("http://{addr}"))
        .engine(Arc::new(engine))
        .offer(
            PaymentOffer::usdc(
                "base-sepolia".parse()?,
                address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
                Price::from_usdc_decimal("0.01")?,
            )?
            .description("Weather report")
            .mime_type("application/json"),
        )
        .build()?;
    let app = Router::new()
        .route("/weather", get(weather).route_layer(paid))
        .route("/", get(|| async { "GET /weather costs 0.01 USDC" }));

    if check {
        tokio::spawn(async move { axum::serve(listener, app).await });
        let status = common::status_of(addr, "/weather").await?;
        println!("GET /weather without a payment: {status}");
        return if status == 402 {
            Ok(())
        } else {
            Err(format!("expected 402, got {status}").into())
        };
    }
    println!("selling http://{addr}/weather for 0.01 USDC (verify-only: no money moves)");
    axum::serve(listener, app).await?;
    Ok(())
}

mod common;
