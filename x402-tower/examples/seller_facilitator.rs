//! Sell a report whose payments a remote x402 facilitator verifies and settles (it moves the money).
//!
//! ```sh
//! cargo run -p x402-tower --example seller_facilitator -- https://x402.org/facilitator
//! cargo run -p x402-tower --example seller_facilitator -- --check   # asks itself once, expects 402, exits
//! ```
//!
//! The engine keeps its payment records in memory (one process: a database-backed `PaymentStore` shares
//! them between instances) and reports every settlement to the facilitator's `/settle`. A 402 needs no
//! facilitator: `--check` asks for the report unpaid and never calls it.

use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::address;
use axum::{Extension, Router, routing::get};
use x402_tower::settle::FacilitatorSettler;
use x402_tower::{PaymentEngine, PaymentOffer, Price, VerifiedPayment, X402Layer};

mod common;

async fn report(Extension(paid): Extension<VerifiedPayment>) -> String {
    let transaction = paid.settlement.map(|s| s.transaction).unwrap_or_default();
    format!(
        "the report, paid by {} (transaction {transaction})\n",
        paid.payer
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let check = args.iter().any(|a| a == "--check");
    let facilitator = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .cloned()
        .unwrap_or_else(|| "https://x402.org/facilitator".to_owned());
    let listener = tokio::net::TcpListener::bind(if check {
        "127.0.0.1:0"
    } else {
        "127.0.0.1:3002"
    })
    .await?;
    let addr = listener.local_addr()?;

    let settler = FacilitatorSettler::builder(facilitator.clone())
        .settle_timeout(Duration::from_secs(30))
        .build()?;
    let engine = PaymentEngine::builder()
        .settler(Arc::new(settler))
        .build()?;
    let paid = X402Layer::builder(format!("http://{addr}"))
        .engine(Arc::new(engine))
        .offer(PaymentOffer::usdc(
            "base-sepolia".parse()?,
            address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
            Price::from_usdc_decimal("0.05")?,
        )?)
        // Settle before the handler runs, so the handler sees the transaction.
        .settle_timing(x402_tower::settle::SettleTiming::BeforeHandler)
        .build()?;
    let app = Router::new().route("/report", get(report).route_layer(paid));

    if check {
        tokio::spawn(async move { axum::serve(listener, app).await });
        let status = common::status_of(addr, "/report").await?;
        println!("GET /report without a payment: {status}");
        return if status == 402 {
            Ok(())
        } else {
            Err(format!("expected 402, got {status}").into())
        };
    }
    println!("selling http://{addr}/report for 0.05 USDC, settled by {facilitator}");
    axum::serve(listener, app).await?;
    Ok(())
}
