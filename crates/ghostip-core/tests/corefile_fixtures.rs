//! Reads every Corefile sample under `../shared/fixtures/coredns/` in place and checks the
//! expected lag ghostip computes for each known distribution.
//!
//! Samples are taken as published: templates are rendered here the way their installers do
//! (kubeadm's Go template, coredns/deployment's `sed`, NodeLocal's `__PILLAR__` values), and
//! ConfigMap YAML is unwrapped to its `Corefile` key. The raw, unrendered text must still
//! never panic the parser. Ignored by default (`needs the fixture corpus`); run with
//! `--ignored`, they fail when the corpus (`$GHOSTIP_FIXTURES`, default `../shared/fixtures`) is
//! absent.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use ghostip_core::corefile::{AnswerSource, Corefile, CorefileError, ExpectedLag};

const DOMAIN: &str = "cluster.local";

/// The Corefile samples of the fixture corpus (`$GHOSTIP_FIXTURES` or `../shared/fixtures`);
/// the test fails naming the folder where it is absent.
fn fixtures_dir() -> PathBuf {
    ghostip_testkit::env::fixtures("coredns")
}

/// The sample `name` of `dir`; the test fails naming the file where it cannot be read.
fn read_sample(dir: &Path, name: &str) -> String {
    let path = dir.join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What a sample must produce.
#[derive(Clone, Copy, Debug)]
enum Want {
    /// Served by the kubernetes plugin.
    Kube {
        ttl: u32,
        cache_lag: u64,
        client_ttl: u64,
    },
    /// A forwarding cache (NodeLocal-style), computed without knowing the upstream.
    Forward {
        cache_lag: u64,
        client_ttl: u64,
        denial_lag: u64,
        serve_stale: Option<u64>,
    },
    /// Not a Corefile (kube-dns's dnsmasq arguments): a typed parse error, no panic.
    NotACorefile,
}

/// Expectations by file-name prefix; every fixture must match one.
const TABLE: &[(&str, Want)] = &[
    // AKS LocalDNS: node-level CoreDNS forwarding to the cluster DNS, cache 3600 + serve_stale.
    ("Corefile_aks-localdns", FWD_3600_STALE_1H),
    // coredns/deployment templates: no kubernetes ttl (5 s), cache 30.
    ("Corefile_coredns-deployment-coredns.yaml.sed_", TTL5),
    // Helm chart (RKE2 style): ttl 30, cache 30.
    ("Corefile_coredns-helm-chart-rendered", CLASSIC),
    // EKS: no ttl before v1.8, ttl 30 since.
    ("Corefile_eks-coredns-v1.6.6", TTL5),
    ("Corefile_eks-coredns-v1.7.0", TTL5),
    ("Corefile_eks-coredns-v1.8.3", CLASSIC),
    // kube-up cluster addon: the classic ttl 30 + cache 30.
    ("Corefile_k8s-cluster-addons-coredns.yaml.base", CLASSIC),
    // NodeLocal DNSCache: success 9984 30, denial 9984 5, forward to the cluster DNS.
    ("Corefile_k8s-cluster-addons-nodelocaldns", NODELOCAL),
    ("Corefile_node-local-dns_tke-guide", NODELOCAL),
    // kubeadm classic (v1.19 onwards until the newest): ttl 30, cache 30.
    ("Corefile_kubeadm-manifests.go_k8s-1.19-1.21-era", CLASSIC),
    ("Corefile_minikube-kubeadm", CLASSIC),
    // kubeadm newest: cache 30 { disable success/denial cluster.local }: no cache lag, TTL 30.
    (
        "Corefile_kubeadm-manifests.go_latest",
        Want::Kube {
            ttl: 30,
            cache_lag: 0,
            client_ttl: 30,
        },
    ),
    // Nomad (not Kubernetes): cluster.local is forwarded through a default cache, serve_stale 24h.
    (
        "Corefile_nomad-template",
        Want::Forward {
            cache_lag: 3600,
            client_ttl: 3600,
            denial_lag: 1800,
            serve_stale: Some(86400),
        },
    ),
    // OpenShift: no kubernetes ttl; caches of 30, 9999 and 900 s all leave 5 s.
    ("Corefile_openshift-cluster-dns-operator_", TTL5),
    // k3s: no kubernetes ttl, cache 30.
    ("configmap-coredns_k3s-", TTL5),
    // RKE2 (ConfigMap with a JSON-escaped Corefile): ttl 30, cache 30.
    ("configmap-rke2-coredns", CLASSIC),
    ("kube-dns_dnsmasq-args", Want::NotACorefile),
];

const CLASSIC: Want = Want::Kube {
    ttl: 30,
    cache_lag: 30,
    client_ttl: 30,
};
const TTL5: Want = Want::Kube {
    ttl: 5,
    cache_lag: 5,
    client_ttl: 5,
};
const NODELOCAL: Want = Want::Forward {
    cache_lag: 30,
    client_ttl: 30,
    denial_lag: 5,
    serve_stale: None,
};
// `cache 3600` sets the denial maximum too.
const FWD_3600_STALE_1H: Want = Want::Forward {
    cache_lag: 3600,
    client_ttl: 3600,
    denial_lag: 3600,
    serve_stale: Some(3600),
};

fn expectation(name: &str) -> Option<Want> {
    TABLE
        .iter()
        .find(|(prefix, _)| name.starts_with(prefix))
        .map(|(_, w)| *w)
}

/// Renders the placeholders of the templates the way their installers do.
fn render(name: &str, text: &str) -> String {
    let mut t = text.to_string();
    if name.contains("coredns.yaml.sed") {
        // coredns/deployment's deploy.sh.
        for (k, v) in [
            ("CLUSTER_DOMAIN", DOMAIN),
            ("REVERSE_CIDRS", "in-addr.arpa ip6.arpa"),
            ("SERVICE_CIDR", "10.96.0.0/12"),
            ("POD_CIDR", "10.244.0.0/16"),
            ("UPSTREAMNAMESERVER", "/etc/resolv.conf"),
            ("FEDERATIONS", ""),
            ("STUBDOMAINS", ""),
        ] {
            t = t.replace(k, v);
        }
    }
    // NodeLocal: the domain is rendered at install time; the other values by node-cache at run time.
    t = t.replace("__PILLAR__DNS__DOMAIN__", DOMAIN);
    // kube-up's cluster addon.
    t = t.replace("__DNS__DOMAIN__", DOMAIN);
    if t.contains("{{") {
        t = render_go_template(&t);
    }
    if name.contains("helm-chart-rendered") {
        // The sample starts with the ConfigMap key name on a line of its own.
        t = t.strip_prefix("Corefile\n").unwrap_or(&t).to_string();
    }
    t
}

/// A tiny Go text/template renderer: known fields, `if`/`end` (condition true), `{{-`/`-}}` trims.
fn render_go_template(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let (before, after) = rest.split_at(start);
        let Some(end) = after.find("}}") else { break };
        let action = &after[2..end];
        let trim_left = action.starts_with('-');
        let trim_right = action.ends_with('-');
        out.push_str(if trim_left { before.trim_end() } else { before });
        let field = action.trim_matches('-').trim();
        out.push_str(match field {
            ".DNSDomain" => DOMAIN,
            ".UpstreamNameserver" => "/etc/resolv.conf",
            ".MinikubeHostIP" => "192.168.49.1",
            ".MinikubeHostFQDN" => "host.minikube.internal",
            _ => "", // .Federation, .StubDomain, if …, end
        });
        rest = &after[end + 2..];
        if trim_right {
            rest = rest.trim_start();
        }
    }
    out.push_str(rest);
    out
}

/// The `Corefile` value of a ConfigMap dump: a `|` block scalar or a double-quoted scalar.
fn configmap_corefile(text: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let (idx, line) = lines
        .iter()
        .enumerate()
        .find(|(_, l)| l.trim_start().starts_with("Corefile:"))?;
    let key_indent = line.len() - line.trim_start().len();
    let value = line
        .trim_start()
        .trim_start_matches("Corefile:")
        .trim_start();
    if value.starts_with('|') {
        let body: Vec<&str> = lines[idx + 1..]
            .iter()
            .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > key_indent)
            .copied()
            .collect();
        let indent = body
            .iter()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.len() - l.trim_start().len())
            .min()?;
        let out: Vec<&str> = body.iter().map(|l| l.get(indent..).unwrap_or("")).collect();
        return Some(out.join("\n") + "\n");
    }
    let first = value.strip_prefix('"')?;
    let mut raw = vec![first.to_string()];
    raw.extend(lines[idx + 1..].iter().map(|l| l.to_string()));
    Some(yaml_double_quoted(&raw))
}

/// Decodes a YAML double-quoted scalar spread over lines (folding and escapes).
fn yaml_double_quoted(lines: &[String]) -> String {
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        let mut l = line.as_str();
        if i > 0 {
            l = l.trim_start_matches([' ', '\t']);
            // A line break between two lines folds into one space.
            out.push(' ');
        }
        let mut chars = l.chars();
        let mut escaped_tail = false;
        let mut piece = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => piece.push('\n'),
                    Some('t') => piece.push('\t'),
                    Some(' ') => piece.push(' '),
                    Some('"') => piece.push('"'),
                    Some('\\') => piece.push('\\'),
                    Some(other) => piece.push(other),
                    None => escaped_tail = true,
                },
                '"' => {
                    out.push_str(&piece);
                    return out;
                }
                c => piece.push(c),
            }
        }
        if !escaped_tail {
            let trimmed = piece.trim_end_matches([' ', '\t']).len();
            piece.truncate(trimmed);
        }
        out.push_str(&piece);
    }
    out
}

fn check(name: &str, lag: &ExpectedLag, want: &Want) {
    let ctx = || format!("{name}: {lag:#?}");
    match want {
        Want::Kube {
            ttl,
            cache_lag,
            client_ttl,
        } => {
            assert_eq!(
                lag.source,
                AnswerSource::Kubernetes { ttl: *ttl },
                "{}",
                ctx()
            );
            assert_eq!(lag.cache_lag, Duration::from_secs(*cache_lag), "{}", ctx());
            assert_eq!(
                lag.client_ttl,
                Duration::from_secs(*client_ttl),
                "{}",
                ctx()
            );
        }
        Want::Forward {
            cache_lag,
            client_ttl,
            denial_lag,
            serve_stale,
        } => {
            assert!(
                matches!(lag.source, AnswerSource::Forward { .. }),
                "{}",
                ctx()
            );
            assert_eq!(lag.cache_lag, Duration::from_secs(*cache_lag), "{}", ctx());
            assert_eq!(
                lag.client_ttl,
                Duration::from_secs(*client_ttl),
                "{}",
                ctx()
            );
            assert_eq!(
                lag.denial_lag,
                Duration::from_secs(*denial_lag),
                "{}",
                ctx()
            );
            assert_eq!(
                lag.serve_stale,
                serve_stale.map(Duration::from_secs),
                "{}",
                ctx()
            );
        }
        Want::NotACorefile => panic!("{name}: expected a parse error, got {lag:?}"),
    }
}

#[test]
#[ignore = "needs the fixture corpus (../shared/fixtures)"]
fn every_fixture_corefile_has_the_expected_lag() {
    let dir = fixtures_dir();
    let entries = std::fs::read_dir(&dir).unwrap();
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    let mut read = 0;
    let mut unknown = Vec::new();
    for path in &paths {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let raw =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        read += 1;
        // The text as published must never panic, whatever it contains.
        let _ = Corefile::parse(&raw).map(|c| c.expected_lag(DOMAIN));
        let Some(want) = expectation(&name) else {
            unknown.push(name);
            continue;
        };
        let text = if name.starts_with("configmap-") {
            configmap_corefile(&raw).unwrap_or_else(|| panic!("{name}: no Corefile key"))
        } else {
            render(&name, &raw)
        };
        let parsed = Corefile::parse(&text);
        if let Want::NotACorefile = want {
            assert!(parsed.is_err(), "{name}: parsed as a Corefile: {parsed:?}");
            continue;
        }
        let corefile = parsed.unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
        let lag = corefile
            .expected_lag(DOMAIN)
            .unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
        check(&name, &lag, &want);
        println!(
            "{name}: cache lag {} s, client TTL {} s, denial lag {} s",
            lag.cache_lag.as_secs(),
            lag.client_ttl.as_secs(),
            lag.denial_lag.as_secs()
        );
    }
    println!("read {read} Corefile fixtures from {}", dir.display());
    assert!(
        unknown.is_empty(),
        "fixtures without an expectation (add them to the table): {unknown:?}"
    );
}

/// What a template gives as published, before its installer renders it: the same lag as
/// rendered, with each placeholder named (`Some(placeholder)`: one a caveat must name), or a
/// refusal at the line of a Go template action whose output cannot be known.
/// A placeholder a caveat must name, or the line and text of a refused template action.
type Published = Result<&'static str, (usize, &'static str)>;

const AS_PUBLISHED: &[(&str, Published)] = &[
    (
        "Corefile_coredns-deployment-coredns.yaml.sed_coredns-1.0.3",
        Ok("CLUSTER_DOMAIN"),
    ),
    (
        "Corefile_coredns-deployment-coredns.yaml.sed_coredns-1.3.1",
        Ok("STUBDOMAINS"),
    ),
    (
        "Corefile_coredns-deployment-coredns.yaml.sed_coredns-1.6.2",
        Ok("FEDERATIONS"),
    ),
    (
        "Corefile_coredns-deployment-coredns.yaml.sed_coredns-1.9.4",
        Ok("CLUSTER_DOMAIN"),
    ),
    (
        "Corefile_k8s-cluster-addons-coredns.yaml.base",
        Ok("__DNS__DOMAIN__"),
    ),
    (
        "Corefile_k8s-cluster-addons-nodelocaldns",
        Ok("__PILLAR__DNS__DOMAIN__"),
    ),
    (
        "Corefile_node-local-dns_tke-guide",
        Ok("__PILLAR__CLUSTER__DNS__"),
    ),
    (
        "Corefile_kubeadm-manifests.go_k8s-1.19-1.21-era",
        Ok("{{ .DNSDomain }}"),
    ),
    ("Corefile_minikube-kubeadm", Ok("{{ .MinikubeHostIP }}")),
    ("Corefile_nomad-template", Ok("{$NOMAD_IP_dns}")),
    (
        "Corefile_kubeadm-manifests.go_latest",
        Err((17, "{{- if .DNSDomain }}")),
    ),
];

#[test]
#[ignore = "needs the fixture corpus (../shared/fixtures)"]
fn templates_as_published_have_their_lag_and_name_their_placeholders() {
    let dir = fixtures_dir();
    let entries = std::fs::read_dir(&dir).unwrap();
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .collect();
    names.sort();
    let mut seen = 0;
    for (prefix, want) in AS_PUBLISHED {
        let Some(name) = names.iter().find(|n| n.starts_with(prefix)) else {
            panic!("no fixture named {prefix}*");
        };
        seen += 1;
        let raw = std::fs::read_to_string(dir.join(name)).unwrap();
        let parsed = Corefile::parse(&raw);
        let (placeholder, corefile) = match (want, parsed) {
            (Err((line, action)), got) => {
                assert_eq!(
                    got,
                    Err(CorefileError::Template {
                        line: *line,
                        token: (*action).into()
                    }),
                    "{name}"
                );
                continue;
            }
            (Ok(p), Ok(c)) => (p, c),
            (Ok(_), Err(e)) => panic!("{name}: {e}"),
        };
        // The same figures as the rendered text.
        let lag = corefile
            .expected_lag(DOMAIN)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let rendered = Corefile::parse(&render(name, &raw))
            .and_then(|c| c.expected_lag(DOMAIN))
            .unwrap_or_else(|e| panic!("{name} rendered: {e}"));
        assert_eq!(lag.source, rendered.source, "{name}");
        assert_eq!(lag.cache_lag, rendered.cache_lag, "{name}");
        assert_eq!(lag.client_ttl, rendered.client_ttl, "{name}");
        assert_eq!(lag.denial_lag, rendered.denial_lag, "{name}");
        assert!(
            corefile.placeholders.iter().any(|p| p.text == *placeholder),
            "{name}: {:?}",
            corefile.placeholders
        );
        assert!(
            lag.caveats.iter().any(|c| c.contains(placeholder)),
            "{name}: no caveat names {placeholder}: {:#?}",
            lag.caveats
        );
        println!("{name}: {} caveat(s)", lag.caveats.len());
    }
    assert_eq!(seen, AS_PUBLISHED.len());
}

#[test]
#[ignore = "needs the fixture corpus (../shared/fixtures)"]
fn nodelocal_fixture_behind_kubeadm_classic() {
    let dir = fixtures_dir();
    let nodelocal = read_sample(
        &dir,
        "Corefile_k8s-cluster-addons-nodelocaldns.yaml_k8s-dns-node-cache-1.26.4.template",
    );
    let kubeadm = read_sample(
        &dir,
        "Corefile_k8s-cluster-addons-coredns.yaml.base_coredns-v1.14.2.template",
    );
    let upstream = Corefile::parse(&render("coredns.yaml.base", &kubeadm))
        .unwrap()
        .expected_lag(DOMAIN)
        .unwrap();
    let lag = Corefile::parse(&render("nodelocaldns", &nodelocal))
        .unwrap()
        .expected_lag_behind(DOMAIN, Some(&upstream))
        .unwrap();
    assert_eq!(lag.cache_lag, Duration::from_secs(35), "{lag:#?}");
    assert_eq!(lag.client_ttl, Duration::from_secs(30));
    assert_eq!(lag.denial_lag, Duration::from_secs(35));
    // Unrendered, the __PILLAR__DNS__DOMAIN__ server address is taken as the cluster domain.
    let raw = Corefile::parse(&nodelocal)
        .unwrap()
        .expected_lag(DOMAIN)
        .unwrap();
    assert_eq!(raw.cache_lag, Duration::from_secs(30));
    assert_eq!(raw.denial_lag, Duration::from_secs(5));
    assert!(
        raw.notes.iter().any(|n| n.contains("placeholder")),
        "{raw:#?}"
    );
}

#[test]
#[ignore = "needs the fixture corpus (../shared/fixtures)"]
fn kubeadm_latest_notes_explain_the_computation() {
    let dir = fixtures_dir();
    let text = read_sample(
        &dir,
        "Corefile_kubeadm-manifests.go_latest_cache-30-disable-success-denial.template",
    );
    let lag = Corefile::parse(&render("kubeadm", &text))
        .unwrap()
        .expected_lag(DOMAIN)
        .unwrap();
    for n in &lag.notes {
        println!("  {n}");
    }
    assert!(
        lag.notes
            .iter()
            .any(|n| n.contains("min(max(30, MINTTL 5), MAXTTL 30) = 30 s"))
    );
    assert!(
        lag.notes
            .iter()
            .any(|n| n.contains("disable success cluster.local."))
    );
}
