//! A JVM's DNS cache settings as the JDK reads them, from a container's spec and the ConfigMaps
//! it mounts.
//!
//! The JDK (`sun.net.InetAddressCachePolicy`) takes the positive TTL from the security property
//! `networkaddress.cache.ttl`, else from the system property `sun.net.inetaddr.ttl`, else 30 s
//! (no security manager); the negative TTL likewise from `networkaddress.cache.negative.ttl`,
//! `sun.net.inetaddr.negative.ttl`, 10 s. Security properties come from the JDK's
//! `java.security` file and from a file named by `-Djava.security.properties=FILE` (`==FILE`
//! replaces `java.security`), never from `-Dnetworkaddress.cache.ttl`, which the JDK ignores.
//! Options are read from `JAVA_TOOL_OPTIONS`, `JAVA_OPTS`, `JDK_JAVA_OPTIONS`, `_JAVA_OPTIONS`
//! (a value, or a ConfigMap key) and the command and args (a `java` word anywhere, so
//! `sh -c "exec java …"` counts); files from ConfigMap volumes (and projected ones) mounted
//! into the container.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMapProjection, Container, KeyToPath, PodSpec};

use super::client::ttl_text;
use crate::audit::inventory::ConfigMapData;

/// The JDK's positive DNS cache when nothing sets it (no security manager): 30 s.
pub(super) const JVM_DEFAULT_TTL: i64 = 30;
/// The JDK's negative DNS cache when nothing sets it: 10 s.
pub(super) const JVM_DEFAULT_NEGATIVE_TTL: i64 = 10;

/// Environment variables the JVM (or its launch scripts) read options from.
const JVM_ENV: &[&str] = &[
    "JAVA_TOOL_OPTIONS",
    "JAVA_OPTS",
    "JDK_JAVA_OPTIONS",
    "_JAVA_OPTIONS",
];

/// A JVM container's DNS caches, each with where its value comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct JvmCache {
    /// Positive cache in seconds (-1 forever) and its source.
    pub(super) positive: (i64, String),
    /// Negative cache in seconds (-1 forever) and its source.
    pub(super) negative: (i64, String),
}

/// What a container sees at a path from a ConfigMap: a file's text, a file of a ConfigMap that
/// was not read, or a directory of a ConfigMap that was not read (its files are unknown).
enum Mounted<'a> {
    Text(&'a str, String),
    NotRead(String),
    UnreadDir(String),
}

/// The DNS caches of `c` when it runs a JVM, `None` otherwise. `namespace` is the pod's,
/// `config_maps` those the input holds.
pub(super) fn jvm_cache(
    c: &Container,
    spec: &PodSpec,
    namespace: &str,
    config_maps: &[ConfigMapData],
) -> Option<JvmCache> {
    let cm = |name: &str| {
        config_maps
            .iter()
            .find(|m| m.obj.namespace == namespace && m.obj.name == name)
    };
    let mut jvm = false;
    let mut unseen: Vec<String> = Vec::new();
    let mut words: Vec<String> = Vec::new();
    for e in c.env.as_deref().unwrap_or_default() {
        if !JVM_ENV.contains(&e.name.as_str()) {
            continue;
        }
        jvm = true;
        if let Some(v) = &e.value {
            words.extend(v.split_whitespace().map(String::from));
        } else if let Some(r) = e
            .value_from
            .as_ref()
            .and_then(|f| f.config_map_key_ref.as_ref())
        {
            match cm(&r.name).and_then(|m| m.data.get(&r.key)) {
                Some(v) => words.extend(v.split_whitespace().map(String::from)),
                None => unseen.push(format!(
                    "{} from ConfigMap {namespace}/{} not read",
                    e.name, r.name
                )),
            }
        }
    }
    for part in c.command.iter().flatten().chain(c.args.iter().flatten()) {
        words.extend(part.split_whitespace().map(String::from));
    }
    let words: Vec<&str> = words
        .iter()
        .map(|w| w.trim_matches(|ch| ch == '"' || ch == '\'' || ch == ';'))
        .collect();
    if words.iter().any(|w| w.rsplit('/').next() == Some("java")) {
        jvm = true;
    }
    let sys_ttl = system_property(&words, "sun.net.inetaddr.ttl");
    let sys_neg = system_property(&words, "sun.net.inetaddr.negative.ttl");
    let ignored: Vec<&str> = words
        .iter()
        .copied()
        .filter(|w| w.starts_with("-Dnetworkaddress.cache."))
        .collect();
    let files = mounted_files(c, spec, namespace, config_maps);
    // Security properties: the JDK's java.security (a file mounted over it), then the file
    // named by -Djava.security.properties.
    let mut security: BTreeMap<&'static str, (i64, String)> = BTreeMap::new();
    for (path, m) in &files {
        match m {
            Mounted::Text(text, from) if path.ends_with("/java.security") => {
                jvm = true;
                read_security(text, "java.security", from, &mut security);
            }
            Mounted::NotRead(cm) if path.ends_with("/java.security") => {
                jvm = true;
                unseen.push(format!("java.security from {cm} not read"));
            }
            Mounted::UnreadDir(cm) if path.ends_with("/security") => {
                unseen.push(format!("{path} from {cm} not read"));
            }
            _ => {}
        }
    }
    if let Some(arg) = words
        .iter()
        .rev()
        .find_map(|w| w.strip_prefix("-Djava.security.properties="))
    {
        jvm = true;
        let (replace, path) = match arg.strip_prefix('=') {
            Some(p) => (true, p),
            None => (false, arg),
        };
        let path = path.strip_prefix("file:").unwrap_or(path);
        if replace {
            security.clear();
        }
        let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
        let found = files.iter().find(|(p, m)| match m {
            Mounted::UnreadDir(_) => p == dir,
            _ => p == path,
        });
        match found {
            Some((_, Mounted::Text(text, from))) => read_security(text, path, from, &mut security),
            Some((_, Mounted::NotRead(cm) | Mounted::UnreadDir(cm))) => {
                unseen.push(format!("{path} from {cm} not read"));
            }
            None => unseen.push(format!("security properties file {path} not in the input")),
        }
    }
    if sys_ttl.is_some() || sys_neg.is_some() || !ignored.is_empty() {
        jvm = true;
    }
    if !jvm {
        return None;
    }
    let name = &c.name;
    let mut also: Vec<String> = ignored
        .iter()
        .map(|w| {
            format!("{w} is ignored: a security property, read from java.security, not from -D")
        })
        .collect();
    also.extend(unseen);
    let tail = |base: String| {
        if also.is_empty() {
            format!("{base})")
        } else {
            format!("{base}; {})", also.join("; "))
        }
    };
    let positive = match (security.get("networkaddress.cache.ttl"), sys_ttl) {
        (Some((v, src)), _) => (*v, tail(format!("{src} (container {name}"))),
        (None, Some(v)) => (
            v,
            tail(format!("JVM cache {} (container {name}", ttl_text(v))),
        ),
        (None, None) => (
            JVM_DEFAULT_TTL,
            tail(format!(
                "JVM default cache 30 s (container {name}, no networkaddress.cache.ttl"
            )),
        ),
    };
    let negative = match (security.get("networkaddress.cache.negative.ttl"), sys_neg) {
        (Some((v, src)), _) => (*v, format!("{src} (container {name})")),
        (None, Some(v)) => (
            v,
            format!("JVM negative cache {} (container {name})", ttl_text(v)),
        ),
        (None, None) => (
            JVM_DEFAULT_NEGATIVE_TTL,
            format!("JVM default negative cache 10 s (container {name})"),
        ),
    };
    Some(JvmCache { positive, negative })
}

/// The last `-D<name>=<integer>` among `words`, as the java launcher keeps the last one.
pub(super) fn system_property(words: &[&str], name: &str) -> Option<i64> {
    words
        .iter()
        .filter_map(|w| w.strip_prefix("-D")?.strip_prefix(name)?.strip_prefix('='))
        .filter_map(|v| v.trim().parse::<i64>().ok())
        .next_back()
}

/// Reads `networkaddress.cache.ttl` and `.negative.ttl` from a security properties file
/// (Java properties: `key=value`, `key: value` or `key value`; `#`/`!` comments).
fn read_security(
    text: &str,
    file: &str,
    from: &str,
    out: &mut BTreeMap<&'static str, (i64, String)>,
) {
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let split = line
            .find(|c: char| c == '=' || c == ':' || c.is_whitespace())
            .unwrap_or(line.len());
        let (key, rest) = line.split_at(split);
        let value = rest.trim_start().trim_start_matches(['=', ':']).trim();
        for known in [
            "networkaddress.cache.ttl",
            "networkaddress.cache.negative.ttl",
        ] {
            if key == known
                && let Ok(v) = value.parse::<i64>()
            {
                out.insert(known, (v, format!("{known}={v} in {file} from {from}")));
            }
        }
    }
}

/// The files `c` sees from ConfigMap volumes: `(path, content)`.
fn mounted_files<'a>(
    c: &Container,
    spec: &PodSpec,
    namespace: &str,
    config_maps: &'a [ConfigMapData],
) -> Vec<(String, Mounted<'a>)> {
    let mut out = Vec::new();
    for m in c.volume_mounts.as_deref().unwrap_or_default() {
        let Some(v) = spec
            .volumes
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|v| v.name == m.name)
        else {
            continue;
        };
        // The ConfigMaps of the volume, each with the items it maps (all keys when none).
        let mut sources: Vec<(&str, Option<&[KeyToPath]>)> = Vec::new();
        if let Some(cm) = &v.config_map {
            sources.push((&cm.name, cm.items.as_deref()));
        }
        let projected = v
            .projected
            .as_ref()
            .and_then(|p| p.sources.as_deref())
            .unwrap_or_default()
            .iter()
            .filter_map(|s| s.config_map.as_ref());
        for p in projected {
            let ConfigMapProjection { name, items, .. } = p;
            sources.push((name, items.as_deref()));
        }
        for (name, items) in sources {
            let shown = format!("ConfigMap {namespace}/{name}");
            let data = config_maps
                .iter()
                .find(|d| d.obj.namespace == namespace && d.obj.name == name)
                .map(|d| &d.data);
            // (file name inside the volume, key)
            let entries: Vec<(String, Option<&str>)> = match (items, data) {
                (Some(items), _) => items
                    .iter()
                    .map(|i| {
                        (
                            i.path.clone(),
                            data.and_then(|d| d.get(&i.key)).map(String::as_str),
                        )
                    })
                    .collect(),
                (None, Some(d)) => d
                    .iter()
                    .map(|(k, v)| (k.clone(), Some(v.as_str())))
                    .collect(),
                (None, None) => Vec::new(),
            };
            let mount = m.mount_path.trim_end_matches('/');
            match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                Some(sub) => {
                    let text = entries
                        .iter()
                        .find(|(file, _)| file == sub)
                        .and_then(|(_, t)| *t);
                    out.push((mount.to_string(), mounted(text, &shown)));
                }
                None if data.is_none() && items.is_none() => {
                    out.push((mount.to_string(), Mounted::UnreadDir(shown)));
                }
                None => {
                    for (file, text) in entries {
                        out.push((format!("{mount}/{file}"), mounted(text, &shown)));
                    }
                }
            }
        }
    }
    out
}

fn mounted<'a>(text: Option<&'a str>, from: &str) -> Mounted<'a> {
    match text {
        Some(t) => Mounted::Text(t, from.to_string()),
        None => Mounted::NotRead(from.to_string()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_last_system_property_wins() {
        let words = [
            "-Dsun.net.inetaddr.ttl=30",
            "-Xmx1g",
            "-Dsun.net.inetaddr.ttl=-1",
            "-Dsun.net.inetaddr.ttlx=5",
        ];
        assert_eq!(system_property(&words, "sun.net.inetaddr.ttl"), Some(-1));
        assert_eq!(system_property(&["-Dfoo=1"], "sun.net.inetaddr.ttl"), None);
    }

    #[test]
    fn security_files_are_java_properties() {
        let mut out = BTreeMap::new();
        read_security(
            "# comment\n! also\nnetworkaddress.cache.ttl : 5\nnetworkaddress.cache.negative.ttl 1\nnetworkaddress.cache.ttl=7\nother=1\n",
            "java.security",
            "ConfigMap a/b",
            &mut out,
        );
        assert_eq!(out.get("networkaddress.cache.ttl").map(|v| v.0), Some(7));
        assert_eq!(
            out.get("networkaddress.cache.negative.ttl").map(|v| v.0),
            Some(1)
        );
        assert_eq!(
            out.get("networkaddress.cache.ttl").map(|v| v.1.as_str()),
            Some("networkaddress.cache.ttl=7 in java.security from ConfigMap a/b")
        );
    }
}
