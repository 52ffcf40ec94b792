//! HTTP plumbing shared by both interfaces and the operator endpoints; it knows no part of the server.
//!
//! - [`error`]: the JSON error of interface A and the operator endpoints.
//! - [`auth`]: bearer tokens, compared in constant time.
//! - [`conditional`]: ETags and `If-None-Match`.
//! - [`pages`] and [`html`]: rendering the server's HTML pages.
//! - [`layers`]: the middleware every request goes through.
//! - [`clock`]: the wall clock.

pub mod auth;
pub mod clock;
pub mod conditional;
pub mod error;
pub mod html;
pub mod layers;
pub mod pages;
