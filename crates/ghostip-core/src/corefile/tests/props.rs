//! Property tests: no input text panics the parser or the lag rules.

use super::*;

proptest::proptest! {
    #[test]
    fn never_panics_on_arbitrary_text(text in ".{0,400}") {
        if let Ok(c) = Corefile::parse(&text) {
            let _ = c.expected_lag("cluster.local");
        }
    }

    #[test]
    fn never_panics_on_corefile_like_text(
        parts in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::strategy::Just("{".to_string()),
                proptest::strategy::Just("}".to_string()),
                proptest::strategy::Just("\n".to_string()),
                proptest::strategy::Just(" ".to_string()),
                proptest::strategy::Just("\"".to_string()),
                proptest::strategy::Just("#".to_string()),
                proptest::strategy::Just(".:53".to_string()),
                proptest::strategy::Just("cache".to_string()),
                proptest::strategy::Just("kubernetes".to_string()),
                proptest::strategy::Just("forward".to_string()),
                proptest::strategy::Just("ttl".to_string()),
                proptest::strategy::Just("success".to_string()),
                proptest::strategy::Just("disable".to_string()),
                proptest::strategy::Just("serve_stale".to_string()),
                proptest::strategy::Just("prefetch".to_string()),
                proptest::strategy::Just("cluster.local".to_string()),
                "[0-9]{1,6}",
                "[0-9]{1,3}(ms|s|m|h|%)",
            ],
            0..80,
        )
    ) {
        let text = parts.concat();
        if let Ok(c) = Corefile::parse(&text) {
            let _ = c.expected_lags("cluster.local", None);
            let _ = c.expected_lag("cluster.local");
        }
    }
}
