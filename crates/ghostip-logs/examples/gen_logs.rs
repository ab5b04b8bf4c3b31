//! Writes a generated realistic log (mixed formats, 1 % error lines by default) to a file.
//!
//! `cargo run --release -p ghostip-logs --example gen_logs -- PATH SIZE_MB [ERROR_RATIO] [SEED]`

use std::io::Write;

use ghostip_testkit::logs::{GenConfig, GenSummary, LogGenerator};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(path), Some(size)) = (args.get(1), args.get(2)) else {
        return Err("usage: gen_logs PATH SIZE_MB [ERROR_RATIO] [SEED]".into());
    };
    let size_mb: u64 = size.parse()?;
    let cfg = GenConfig {
        error_ratio: args.get(3).map_or(Ok(0.01), |s| s.parse())?,
        seed: args.get(4).map_or(Ok(0x5eed), |s| s.parse())?,
        ..GenConfig::default()
    };
    let mut generator = LogGenerator::new(cfg);
    let mut out = std::io::BufWriter::with_capacity(8 << 20, std::fs::File::create(path)?);
    let mut total = GenSummary::default();
    let mut buf = Vec::with_capacity(9 << 20);
    while total.bytes < size_mb << 20 {
        buf.clear();
        let s = generator.fill(&mut buf, 8 << 20);
        out.write_all(&buf)?;
        total.lines += s.lines;
        total.bytes += s.bytes;
        total.errors += s.errors;
        total.with_target += s.with_target;
        for (k, n) in s.per_kind {
            *total.per_kind.entry(k).or_default() += n;
        }
        for (f, n) in s.per_format {
            *total.per_format.entry(f).or_default() += n;
        }
    }
    out.flush()?;
    println!("{}", serde_json::to_string_pretty(&total)?);
    Ok(())
}
