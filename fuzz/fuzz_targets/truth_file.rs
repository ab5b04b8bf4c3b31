//! Fuzzes the truth file reader of `ghostip datapath diff --truth FILE` (JSON, YAML, multi-doc
//! Lists of Services and EndpointSlices): arbitrary text must never panic, and a truth that
//! is read must agree with the counts reported beside it.
#![no_main]

use ghostip::kube::truth_file::read_truth;
use ghostip_core::Time;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(at) = Time::from_second(1_800_000_000) else {
        return;
    };
    match read_truth(text, "truth.json", at) {
        Ok(f) => {
            assert!(f.services + f.slices > 0);
            assert!(f.truth.services().count() <= f.services);
            assert!(f.truth.slice_count() <= f.slices);
            for svc in f.truth.services() {
                let key = &svc.key;
                let _ = f.truth.dns_answers(key);
                let _ = f.truth.datapath_backends(key, None);
            }
        }
        Err(e) => {
            // Every error names the file.
            assert!(e.to_string().starts_with("truth.json: "));
        }
    }
});
