//! Corefile parsing (placeholder until written).
