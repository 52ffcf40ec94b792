//! DRF-style limit/offset pagination for Tower services.
#![warn(missing_docs)]
