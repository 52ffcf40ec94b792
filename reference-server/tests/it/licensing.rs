//! Interface A tests.
