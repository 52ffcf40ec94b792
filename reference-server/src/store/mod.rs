//! Storage: the one module that talks to the database.

/// Schema migrations, applied in order at start.
pub const MIGRATIONS: &[(&str, &str)] = &[
    ("0001_licensing", include_str!("migrations/0001_licensing.sql")),
    ("0002_registry", include_str!("migrations/0002_registry.sql")),
];
