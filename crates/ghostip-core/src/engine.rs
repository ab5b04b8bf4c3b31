//! The staleness engine (placeholder until written).
