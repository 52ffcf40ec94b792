//! x402 payments for Tower services.
#![warn(missing_docs)]

pub mod layer;
pub mod metrics;
pub mod network;
pub mod offer;
pub mod price;
pub mod pricing;
pub mod proto;
pub mod replay;
pub mod settle;
pub mod verify;

pub use layer::{
    ConfigError, ResponseBody, ResponseFuture, SettleTiming, VerifiedPayment, X402, X402Config,
    X402Layer,
};
pub use metrics::{MetricsSnapshot, X402Metrics};
pub use network::{NETWORKS, Network, Token};
pub use offer::PaymentOffer;
pub use price::Price;
pub use pricing::{PriceDecision, PriceSource, StaticPrice};
pub use replay::{InMemoryReplayStore, ReplayKey, ReplayStore};
pub use settle::{SettleOutcome, Settler, VerifyOnlySettler};
