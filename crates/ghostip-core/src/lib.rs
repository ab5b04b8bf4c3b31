//! Pure core of ghostip: the truth, the shared observation vocabulary and the staleness engine.
//!
//! Nothing here does IO or reads a clock: adapters feed watch events, observations and
//! the current time in, and get verdicts out. See `DESIGN.md` for the vocabulary.
#![forbid(unsafe_code)]

pub mod clock;
pub mod corefile;
pub mod engine;
pub mod model;
pub mod truth;

pub use clock::Clock;
pub use model::*;
