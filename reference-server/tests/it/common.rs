//! Shared test helpers: start the server, HTTP client.
