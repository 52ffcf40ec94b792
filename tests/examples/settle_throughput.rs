//! Settled purchases per second on anvil (send + receipt) with the on-chain settler: one at a time, then
//! pipelined (many settlements in flight from one relayer key).
//!
//!     source scripts/test-deps.sh && cargo run --release -p workspace-tests --example settle_throughput [N]

use std::time::Instant;

use workspace_tests::chain::{Chain, DEV_KEYS, address_of};
use workspace_tests::pay::{Knobs, settle_request};
use x402_tower::settle::onchain::OnchainSettler;
use x402_tower::settle::{SettleOutcome, SettleRequest, Settler};

const PRICE: u64 = 10_000;

async fn prepared(n: usize) -> (Chain, OnchainSettler, Vec<SettleRequest>) {
    let chain = Chain::start().await;
    for key in &DEV_KEYS[2..] {
        chain.mint(address_of(key), 1_000_000_000).await;
    }
    let settler = OnchainSettler::builder(chain.anvil.url.clone(), DEV_KEYS[1])
        .build()
        .expect("settler");
    let requests = (0..n)
        .map(|i| settle_request(chain.usdc, PRICE, DEV_KEYS[2 + i % 8], &Knobs::default()))
        .collect();
    (chain, settler, requests)
}

fn check(outcome: &SettleOutcome) {
    assert!(
        matches!(outcome, SettleOutcome::Settled { .. }),
        "{outcome:?}"
    );
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(300);

    let (_chain, settler, requests) = prepared(n).await;
    let start = Instant::now();
    for r in &requests {
        check(&settler.settle(r).await);
    }
    let sequential = n as f64 / start.elapsed().as_secs_f64();
    println!("one at a time: {n} settlements, {sequential:.0} settled/s");

    for in_flight in [8usize, 32] {
        let (_chain, settler, requests) = prepared(n).await;
        let start = Instant::now();
        let semaphore = std::sync::Arc::new(tokio::sync::Semaphore::new(in_flight));
        let mut set = tokio::task::JoinSet::new();
        for r in requests {
            let s = settler.clone();
            let permit = semaphore.clone().acquire_owned().await.expect("semaphore");
            set.spawn(async move {
                let outcome = s.settle(&r).await;
                drop(permit);
                outcome
            });
        }
        for outcome in set.join_all().await {
            check(&outcome);
        }
        let rate = n as f64 / start.elapsed().as_secs_f64();
        println!("pipelined ({in_flight} in flight): {n} settlements, {rate:.0} settled/s");
    }
}
