//! Sell a report without axum: the layer around a plain `tower::service_fn`, served by hyper.
//!
//! ```sh
//! cargo run -p x402-tower --example seller_tower              # serves on 127.0.0.1:3001 until Ctrl-C
//! cargo run -p x402-tower --example seller_tower -- --check   # asks itself once, expects 402, exits
//! ```
//!
//! `X402Layer` wraps any `Service<http::Request<B>>`: here a `service_fn` over `Full<Bytes>` bodies, adapted
//! to hyper's `Incoming` body by `map_request`, and served by hyper's HTTP/1.1 connection (hyper-util's
//! `TowerToHyperService` adapts the Tower service).

use std::convert::Infallible;
use std::sync::Arc;

use alloy_primitives::address;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tower::{Layer as _, ServiceBuilder};
use x402_tower::settle::VerifyOnlySettler;
use x402_tower::{PaymentEngine, PaymentOffer, Price, VerifiedPayment, X402Layer};

mod common;

/// The paid service: the payer is in the request's extensions.
async fn report(req: Request<Full<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    let payer = req.extensions().get::<VerifiedPayment>().map(|p| p.payer);
    Ok(Response::new(Full::new(Bytes::from(format!(
        "the report, paid by {payer:?}\n"
    )))))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let check = std::env::args().any(|a| a == "--check");
    let listener = tokio::net::TcpListener::bind(if check {
        "127.0.0.1:0"
    } else {
        "127.0.0.1:3001"
    })
    .await?;
    let addr = listener.local_addr()?;

    let engine = PaymentEngine::builder()
        .settler(Arc::new(VerifyOnlySettler))
        .build()?;
    let layer = X402Layer::builder(format!("http://{addr}"))
        .engine(Arc::new(engine))
        .offer(PaymentOffer::usdc(
            "base-sepolia".parse()?,
            address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
            Price::from_usdc_decimal("0.02")?,
        )?)
        .build()?;
    // Collect hyper's streaming body into `Full<Bytes>` (a paid GET carries none), then the x402 layer.
    let service = ServiceBuilder::new()
        .map_request(|req: Request<Incoming>| req.map(|_| Full::new(Bytes::new())))
        .service(layer.layer(tower::service_fn(report)));

    let serve = async move {
        loop {
            let (stream, _) = listener.accept().await?;
            let service = TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
        #[allow(unreachable_code)]
        Ok::<(), std::io::Error>(())
    };
    if check {
        tokio::spawn(serve);
        let status = common::status_of(addr, "/report").await?;
        println!("GET /report without a payment: {status}");
        return if status == 402 {
            Ok(())
        } else {
            Err(format!("expected 402, got {status}").into())
        };
    }
    println!("selling http://{addr}/report for 0.02 USDC (verify-only: no money moves)");
    serve.await?;
    Ok(())
}
