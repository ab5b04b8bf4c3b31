//! Zone names: normalization and which zone covers a name.

use super::DOMAIN_PLACEHOLDER_ZONE;
use super::placeholder;

/// Lower-case, fully qualified zone (`cluster.local.`); `.` for the root;
/// [`DOMAIN_PLACEHOLDER_ZONE`] for a template placeholder standing for a domain.
pub(super) fn normalize_zone(z: &str) -> String {
    let z = z.trim().trim_end_matches('.');
    if placeholder::is_domain(z) {
        return DOMAIN_PLACEHOLDER_ZONE.to_string();
    }
    let z = z.to_ascii_lowercase();
    if z.is_empty() {
        ".".to_string()
    } else {
        format!("{z}.")
    }
}

/// Whether `zone` contains `name` (both normalized); a domain placeholder contains any name.
pub(super) fn zone_contains(zone: &str, name: &str) -> bool {
    zone == "."
        || zone == DOMAIN_PLACEHOLDER_ZONE
        || name == zone
        || name.ends_with(&format!(".{zone}"))
}

/// The zone a server key matches `name` with; a domain placeholder matches as `name` itself.
pub(super) fn key_zone_match(zone: &str, name: &str) -> Option<String> {
    if zone == DOMAIN_PLACEHOLDER_ZONE {
        return Some(name.to_string());
    }
    zone_contains(zone, name).then(|| zone.to_string())
}

/// The most specific of `zones` containing `name`.
pub(super) fn best_zone<'a>(zones: &'a [String], name: &str) -> Option<&'a String> {
    zones
        .iter()
        .filter(|z| zone_contains(z, name))
        .max_by_key(|z| {
            if **z == DOMAIN_PLACEHOLDER_ZONE {
                name.len()
            } else {
                z.len()
            }
        })
}

/// A zone as shown in notes: a domain placeholder as the name it is taken for.
pub(super) fn shown<'a>(zone: &'a str, name: &'a str) -> &'a str {
    if zone == DOMAIN_PLACEHOLDER_ZONE {
        name
    } else {
        zone
    }
}
