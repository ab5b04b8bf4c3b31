//! DNS probing of every DNS path (placeholder).
