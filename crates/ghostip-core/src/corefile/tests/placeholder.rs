//! Template placeholders left in a Corefile: a placeholder for the cluster domain is taken as
//! the cluster zone with a caveat naming it; the others are named, never matched.

use super::*;

/// The Corefile of kube-up's cluster addon and kubeadm, with `ph` as the kubernetes zone.
fn classic_with_zone(ph: &str) -> String {
    format!(
        ".:53 {{\n    errors\n    kubernetes {ph} in-addr.arpa ip6.arpa {{\n        ttl 30\n    }}\n    forward . /etc/resolv.conf\n    cache 30\n}}\n"
    )
}

const DOMAIN_PLACEHOLDERS: &[&str] = &[
    "%{CLUSTER_DOMAIN}%",
    "{{ .ClusterDomain }}",
    "{{ .DNSDomain }}",
    "__PILLAR__DNS__DOMAIN__",
    "__DNS__DOMAIN__",
    "$DNS_DOMAIN",
    "${DNS_DOMAIN}",
    "CLUSTER_DOMAIN",
    "{$CLUSTER_DOMAIN}",
];

#[test]
fn a_domain_placeholder_is_the_cluster_zone_not_a_forward() {
    for ph in DOMAIN_PLACEHOLDERS {
        let text = classic_with_zone(ph);
        let l = match Corefile::parse(&text).and_then(|c| c.expected_lag("cluster.local")) {
            Ok(l) => l,
            Err(e) => panic!("{ph}: {e}"),
        };
        // Before: the kubernetes plugin's zone did not match, and `forward .` answered.
        assert_eq!(l.source, AnswerSource::Kubernetes { ttl: 30 }, "{ph}");
        assert_eq!(l.cache_lag, s(30), "{ph}");
    }
}

#[test]
fn a_domain_placeholder_is_named_in_a_caveat() {
    for ph in DOMAIN_PLACEHOLDERS {
        let c = Corefile::parse(&classic_with_zone(ph)).unwrap_or_else(|e| panic!("{ph}: {e}"));
        let l = c
            .expected_lag("cluster.local")
            .unwrap_or_else(|e| panic!("{ph}: {e}"));
        let want = format!(
            "zone is the template placeholder {ph} (line 3); lag computed assuming it is the cluster zone cluster.local"
        );
        assert_eq!(l.caveats, vec![want.clone()], "{ph}");
        assert!(l.notes.contains(&want), "{ph}: caveats are notes too");
        assert!(
            c.placeholders
                .iter()
                .any(|p| p.text == *ph && p.line == 3 && p.domain && !p.fills_text),
            "{ph}: {:?}",
            c.placeholders
        );
    }
}

#[test]
fn a_placeholder_server_address_serves_the_zone() {
    let text = "$DNS_DOMAIN:53 {\n    kubernetes {\n        ttl 10\n    }\n    cache 30\n}\n.:53 {\n    forward . /etc/resolv.conf\n    cache 3600\n}\n";
    let c = Corefile::parse(text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.servers[0].keys[0].zone, DOMAIN_PLACEHOLDER_ZONE);
    assert_eq!(c.servers[0].keys[0].host(), "$DNS_DOMAIN");
    let l = c
        .expected_lag("cluster.local")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(l.source, AnswerSource::Kubernetes { ttl: 10 });
    assert_eq!(l.cache_lag, s(10));
    assert!(
        l.caveats
            .iter()
            .any(|c| c.starts_with("zone is the template placeholder $DNS_DOMAIN (line 1)")),
        "{:?}",
        l.caveats
    );
}

#[test]
fn sed_placeholders_are_named_and_glued_ones_split_from_their_brace() {
    // coredns/deployment's template for `sed` (CoreDNS 1.6.2), as published.
    let text = ".:53 {\n    errors\n    kubernetes CLUSTER_DOMAIN REVERSE_CIDRS {\n      fallthrough in-addr.arpa ip6.arpa\n    }FEDERATIONS\n    forward . UPSTREAMNAMESERVER\n    cache 30\n}STUBDOMAINS\n";
    let c = Corefile::parse(text).unwrap_or_else(|e| panic!("{e}"));
    let found: Vec<(&str, usize, bool, bool)> = c
        .placeholders
        .iter()
        .map(|p| (p.text.as_str(), p.line, p.domain, p.fills_text))
        .collect();
    assert_eq!(
        found,
        [
            ("CLUSTER_DOMAIN", 3, true, false),
            ("REVERSE_CIDRS", 3, false, false),
            ("FEDERATIONS", 5, false, true),
            ("UPSTREAMNAMESERVER", 6, false, false),
            ("STUBDOMAINS", 8, false, true),
        ]
    );
    assert!(
        c.placeholders
            .iter()
            .all(|p| p.syntax == PlaceholderSyntax::Sed)
    );
    let l = c
        .expected_lag("cluster.local")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(l.source, AnswerSource::Kubernetes { ttl: 5 });
    assert_eq!(l.cache_lag, s(5));
    assert_eq!(
        l.caveats,
        [
            "zone is the template placeholder CLUSTER_DOMAIN (line 3); lag computed assuming it is the cluster zone cluster.local",
            "template placeholders FEDERATIONS (line 5), STUBDOMAINS (line 8) stand for text the installer adds there (server blocks or plugins, possibly none): not seen",
            "template placeholders whose values ghostip does not see: REVERSE_CIDRS (line 3), UPSTREAMNAMESERVER (line 6)",
        ]
    );
}

#[test]
fn go_template_fields_glued_to_braces_are_placeholders() {
    // kubeadm's template of Kubernetes 1.19–1.21.
    let text = ".:53 {\n    kubernetes {{ .DNSDomain }} in-addr.arpa ip6.arpa {\n       ttl 30\n    }{{ .Federation }}\n    forward . {{ .UpstreamNameserver }}\n    cache 30\n}{{ .StubDomain }}\n";
    let c = Corefile::parse(text).unwrap_or_else(|e| panic!("{e}"));
    let found: Vec<(&str, bool)> = c
        .placeholders
        .iter()
        .map(|p| (p.text.as_str(), p.fills_text))
        .collect();
    assert_eq!(
        found,
        [
            ("{{ .DNSDomain }}", false),
            ("{{ .Federation }}", true),
            ("{{ .UpstreamNameserver }}", false),
            ("{{ .StubDomain }}", true),
        ]
    );
    let l = c
        .expected_lag("cluster.local")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(l.source, AnswerSource::Kubernetes { ttl: 30 });
    assert_eq!(l.cache_lag, s(30));
    assert_eq!(l.caveats.len(), 3, "{:?}", l.caveats);
}

#[test]
fn go_template_control_actions_are_refused_at_their_line() {
    // kubeadm's newest template: whether the cache block exists depends on a value.
    let text = ".:53 {\n    kubernetes {{ .DNSDomain }} {\n       ttl 30\n    }\n    cache 30\n    {{- if .DNSDomain }} {\n       disable success {{ .DNSDomain }}\n    }\n    {{- end }}\n}\n";
    assert_eq!(
        Corefile::parse(text),
        Err(CorefileError::Template {
            line: 6,
            token: "{{- if .DNSDomain }}".into()
        })
    );
}

#[test]
fn plugin_syntax_is_not_a_placeholder() {
    // The template plugin's own Go templates are quoted; DNS words are upper case.
    let text = ".:53 {\n    template ANY HINFO . {\n        rcode NXDOMAIN\n    }\n    template IN A x {\n        answer \"{{ .Name }} 60 IN A 127.0.0.1\"\n    }\n    rewrite name regex (.*)\\.foo$ {1}.bar\n    kubernetes cluster.local\n}\n";
    let c = Corefile::parse(text).unwrap_or_else(|e| panic!("{e}"));
    assert!(c.placeholders.is_empty(), "{:?}", c.placeholders);
    let l = c
        .expected_lag("cluster.local")
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(l.caveats.is_empty(), "{:?}", l.caveats);
}

#[test]
fn imports_and_an_unknown_upstream_are_caveats() {
    let c = Corefile::parse(
        ".:53 {\n kubernetes cluster.local\n import custom/*.override\n}\nimport custom/*.server\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let l = c
        .expected_lag("cluster.local")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(l.caveats.len(), 2, "{:?}", l.caveats);
    assert!(l.caveats[0].starts_with("import custom/*.override not followed"));
    assert!(l.caveats[1].starts_with("top-level import custom/*.server not followed"));
    let l = lag("cluster.local:53 {\n cache 30\n forward . 10.96.0.10\n}\n");
    assert_eq!(
        l.caveats,
        [
            "the upstream of this forwarding cache (10.96.0.10) was not read: its own lag is not counted"
        ]
    );
}
