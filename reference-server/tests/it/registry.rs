//! Interface B tests.
