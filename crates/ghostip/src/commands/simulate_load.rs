//! `ghostip simulate-load`: prints the simulated DNS and API watch load of watch and the agents during a rollout, with and without `--cluster-qps`.
//!
//! The simulation is the session crate's ([`ghostip_session::layers::dns::load`]): pure,
//! no cluster needed, nothing sent.

use ghostip_session::layers::dns::load::{LoadModel, LoadRow, simulate, table};
use serde::Serialize;

use super::Outcome;
use crate::cli::{GlobalArgs, OutputFormat, SimulateLoadArgs};

/// One row of `-o json`.
#[derive(Serialize)]
struct JsonRow {
    nodes: u32,
    pods: u32,
    cluster_qps: Option<u32>,
    rest_qps: f64,
    rest_qps_per_agent: f64,
    peak_qps: f64,
    within_budget: bool,
    watch_streams: u64,
    watch_events_per_s: f64,
    time_to_flag_s: f64,
}

impl From<&LoadRow> for JsonRow {
    fn from(r: &LoadRow) -> Self {
        Self {
            nodes: r.nodes,
            pods: r.pods,
            cluster_qps: r.cluster_qps,
            rest_qps: r.rest_qps,
            rest_qps_per_agent: r.rest_qps_per_agent,
            peak_qps: r.peak_qps,
            within_budget: r.within_budget(),
            watch_streams: r.watch_streams,
            watch_events_per_s: r.watch_events_per_s,
            time_to_flag_s: r.time_to_flag.as_secs_f64(),
        }
    }
}

pub(super) fn run(g: &GlobalArgs, args: SimulateLoadArgs) -> anyhow::Result<Outcome> {
    let rows = simulate(
        LoadModel::default(),
        &args.nodes,
        args.pods,
        args.cluster_qps,
    );
    let text = match g.output {
        OutputFormat::Json => {
            let rows: Vec<JsonRow> = rows.iter().map(JsonRow::from).collect();
            let mut s = serde_json::to_string(&rows)?;
            s.push('\n');
            s
        }
        _ => table(&rows),
    };
    crate::printer::write_stdout(text.as_bytes());
    Ok(Outcome::Clean)
}
