//! Writes a generated kube-proxy-shaped dump to stdout.
//!
//! `cargo run --release -p ghostip-datapath --example gen_dump -- iptables|nft-json|nft-script SERVICES ENDPOINTS [--inline-dnat] [--empty-every N] [--endpoint-comments]`
//!
//! kube-proxy writes no comment on endpoint rules above 1 000 endpoints; so does the
//! generator, unless `--endpoint-comments` (the layout of smaller clusters).
//!
//! `iptables` output loads with `iptables-restore`; `nft-script` with `nft -f`.
#![allow(clippy::print_stderr)]

use std::io::{BufWriter, Write};
use std::process::ExitCode;

use ghostip_testkit::dumps::{GenModel, GenSpec};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(kind), Some(services), Some(endpoints)) = (
        args.first(),
        args.get(1).and_then(|s| s.parse::<usize>().ok()),
        args.get(2).and_then(|s| s.parse::<usize>().ok()),
    ) else {
        eprintln!(
            "usage: gen_dump iptables|nft-json|nft-script SERVICES ENDPOINTS [--inline-dnat] [--empty-every N] [--endpoint-comments]"
        );
        return ExitCode::from(2);
    };
    let mut spec = GenSpec::new(services, endpoints);
    spec.nft_inline_dnat = args.iter().any(|a| a == "--inline-dnat");
    if args.iter().any(|a| a == "--endpoint-comments") {
        spec.large_cluster = Some(false);
    }
    if let Some(i) = args.iter().position(|a| a == "--empty-every") {
        spec.empty_every = args.get(i + 1).and_then(|s| s.parse().ok()).unwrap_or(0);
    }
    let model = GenModel::generate(&spec);
    let stdout = std::io::stdout();
    let mut w = BufWriter::with_capacity(1 << 20, stdout.lock());
    let res = match kind.as_str() {
        "iptables" => model.write_iptables_save(&mut w),
        "nft-json" => model.write_nft_json(&mut w),
        "nft-script" => model.write_nft_script(&mut w),
        other => {
            eprintln!("unknown kind {other:?}");
            return ExitCode::from(2);
        }
    };
    match res.and_then(|()| w.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("write: {e}");
            ExitCode::from(1)
        }
    }
}
