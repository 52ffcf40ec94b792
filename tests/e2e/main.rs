//! End-to-end tests across the workspace (filled in by the interoperability work).
