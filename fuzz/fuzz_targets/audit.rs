//! Fuzzes `ghostip audit` end to end without IO: the manifest loader (multi-document YAML and
//! JSON, Lists) into an inventory, an optional raw Corefile, then the pure rules and the three
//! renderings. Arbitrary text must never panic; a file that does not parse adds nothing.
#![no_main]

use ghostip::printer::audit as render;
use ghostip_analysis::audit::inventory::Inventory;
use ghostip_analysis::audit::load::add_manifest;
use ghostip_analysis::audit::rules::{AuditConfig, audit};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Text after the first NUL is a raw Corefile file; before it, a manifest file.
    let (manifest, corefile) = match text.split_once('\0') {
        Some((m, c)) => (m, Some(c)),
        None => (text, None),
    };
    let mut inv = Inventory::new("default");
    match add_manifest(&mut inv, "in.yaml", manifest) {
        Ok(_) => {}
        Err(p) => {
            assert!(inv.services.is_empty() && inv.workloads.is_empty());
            assert!(inv.corefiles.is_empty() && inv.counts.objects.is_empty());
            assert!(p.to_string().starts_with("in.yaml"));
            inv.problems.push(p);
        }
    }
    if let Some(c) = corefile {
        inv.add_corefile_file("Corefile", c.to_string());
    }
    let report = audit(&inv, &AuditConfig::default());
    assert!(report.problems.len() >= inv.problems.len());
    let _ = render::table(&report);
    let _ = render::json(&report);
    let _ = render::sarif(&report, "0.0.0");
});
