//! Interface B: the asset registry listing.
