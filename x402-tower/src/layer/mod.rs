//! The middleware: [`X402Layer`], [`X402`], [`ResponseFuture`], [`ResponseBody`].

mod body;
mod config;
mod flow;
mod future;
pub mod response;
mod service;

pub use body::ResponseBody;
pub use config::{
    ConfigError, DEFAULT_MAX_HEADER_LEN, SettleTiming, VerifiedPayment, X402Config, X402Layer,
};
pub use flow::NO_PAYMENT_ERROR;
pub use future::ResponseFuture;
pub use service::X402;
