//! Zone names: normalization and which zone covers a name.

use super::NODELOCAL_DOMAIN_PLACEHOLDER;

/// Lower-case, fully qualified zone (`cluster.local.`); `.` for the root.
pub(super) fn normalize_zone(z: &str) -> String {
    let z = z.trim().trim_end_matches('.').to_ascii_lowercase();
    if z.is_empty() {
        ".".to_string()
    } else {
        format!("{z}.")
    }
}

/// Whether `zone` contains `name` (both normalized).
pub(super) fn zone_contains(zone: &str, name: &str) -> bool {
    zone == "." || name == zone || name.ends_with(&format!(".{zone}"))
}

/// The zone a server key matches `name` with; NodeLocal's domain placeholder matches any domain.
pub(super) fn key_zone_match(zone: &str, name: &str) -> Option<String> {
    if zone == NODELOCAL_DOMAIN_PLACEHOLDER {
        return Some(name.to_string());
    }
    zone_contains(zone, name).then(|| zone.to_string())
}

/// The most specific of `zones` containing `name`.
pub(super) fn best_zone<'a>(zones: &'a [String], name: &str) -> Option<&'a String> {
    zones
        .iter()
        .filter(|z| zone_contains(z, name))
        .max_by_key(|z| z.len())
}
