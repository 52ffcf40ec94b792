//! Integration tests: the real server on a free loopback port.

mod common;
mod connections;
mod crashes;
mod errors;
mod extensions;
mod faults;
mod licenses;
mod licensing;
mod migrate;
mod operations;
mod payments;
mod registry;
mod shutdown;
mod store;
