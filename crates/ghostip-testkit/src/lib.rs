//! Generators of test inputs: kube-proxy-shaped datapath dumps with the truth they came
//! from ([`dumps`]), realistic client logs with connection failures ([`logs`]), truth records
//! with the fields a test does not care about left empty ([`records`]), a seeded random number
//! generator ([`rng`]), and what a test does when its environment is absent ([`env`]).
//!
//! Used by tests, benchmarks and examples only; nothing here is part of the shipped binary.
//! Both generators are deterministic and pure: writers take any [`std::io::Write`].
#![forbid(unsafe_code)]

pub mod dumps;
pub mod env;
pub mod logs;
pub mod records;
pub mod rng;
