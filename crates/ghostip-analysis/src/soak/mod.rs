//! The score of a soak: what the lab did (ground truth) against what ghostip recorded (findings, truth gaps, process metrics).
//!
//! Pure: the `ghostip soak-score` command reads `ground-truth.json`, the ledgers and the
//! scraped `/metrics` files and passes them here as data; [`score()`] matches them and
//! [`svg::render`] draws the chart. The contract of the inputs and the rules of the matching
//! are in docs/SOAK.md.
//!
//! - [`model`]: the ground truth as the soak writes it, and ghostip's records as the scorer
//!   takes them;
//! - [`score()`]: faults detected or missed with their time to detection, false positives with
//!   their evidence, truth gaps, RSS and CPU per process with the RSS verdict;
//! - [`svg`]: a self-contained SVG chart of the score.

pub mod model;
mod score;
pub mod svg;

pub use model::{
    Fault, GroundTruth, MetricSample, Rollout, SoakFinding, SoakGap, finding_node, is_judged,
};
pub use score::{
    APISERVER_AFTERMATH, ComponentStalled, Detection, FalsePositive, FaultScore, LagUnderCache,
    ProcessScore, RSS_SETTLE, RSS_TOLERANCE_PCT, STALLED_SLACK, Score, ScoreInput, StalledFault,
    StalledSample, score,
};
