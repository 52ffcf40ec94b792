//! Interface A: content licensing behind x402.
