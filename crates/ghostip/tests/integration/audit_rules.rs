//! Every audit rule fires on its positive case and stays silent on its negative case.
//!
//! The cases are small manifests written for this test under `tests/data/audit/`, named
//! `<rule id>-pos.yaml` and `<rule id>-neg.yaml`; a rule without both files fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use ghostip::printer::audit as render;
use ghostip_analysis::audit::load::add_manifest;
use ghostip_analysis::audit::{
    AuditConfig, AuditReport, Finding, Inventory, RULES, RuleId, Severity, audit, staleness_budget,
    staleness_budget_from_parts,
};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/audit")
        .join(name)
}

fn run(name: &str) -> AuditReport {
    let path = data(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut inv = Inventory::new("default");
    add_manifest(&mut inv, name, &text).unwrap_or_else(|e| panic!("{e}"));
    let report = audit(&inv, &AuditConfig::default());
    assert!(report.problems.is_empty(), "{name}: {:?}", report.problems);
    report
}

fn of(report: &AuditReport, rule: RuleId) -> Vec<&Finding> {
    report.findings.iter().filter(|f| f.rule == rule).collect()
}

#[test]
fn every_rule_has_a_positive_and_a_negative_case() {
    for rule in RULES {
        let pos = run(&format!("{}-pos.yaml", rule.id));
        let hits = of(&pos, rule.id);
        assert!(
            !hits.is_empty(),
            "{}: the positive case raised nothing: {:#?}",
            rule.id,
            pos.findings
        );
        for f in &hits {
            assert!(!f.fix.is_empty(), "{}: finding without a fix", rule.id);
            assert!(f.object.origin.line.is_some(), "{}: no line", rule.id);
        }
        let neg = run(&format!("{}-neg.yaml", rule.id));
        assert!(
            of(&neg, rule.id).is_empty(),
            "{}: the negative case raised {:#?}",
            rule.id,
            of(&neg, rule.id)
        );
    }
}

#[test]
fn the_issue_example_has_its_numbers_and_fix() {
    let report = run("GIP-DNS-001-pos.yaml");
    let f = of(&report, RuleId::Dns001);
    assert_eq!(f.len(), 1, "{f:#?}");
    let f = f[0];
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(f.object.kind, "Deployment");
    assert_eq!(f.object.name, "web");
    assert_eq!(f.object.origin.to_string(), "GIP-DNS-001-pos.yaml:36");
    assert_eq!(
        f.service.as_ref().map(ToString::to_string).as_deref(),
        Some("demo/web")
    );
    assert!(
        f.message.starts_with(
            "DNS may serve a removed IP for up to 30 s (kubernetes ttl 30, cache 30) + JVM cache 30 s"
        ),
        "{}",
        f.message
    );
    assert!(
        f.message.ends_with(
            "but preStop covers 0 s: expect up to 60 s of dials to dead IPs per rollout"
        ),
        "{}",
        f.message
    );
    // A 60 s budget is large: drain-wait first, a fixed sleep as the alternative, then the
    // Corefile change and what it leaves.
    let fixes: Vec<&str> = f.fix.split("; ").collect();
    assert_eq!(fixes.len(), 3, "{}", f.fix);
    assert!(
        fixes[0].starts_with(
            "preStop exec `ghostip drain-wait` with terminationGracePeriodSeconds ≥ 70 s: "
        ),
        "{}",
        f.fix
    );
    assert!(
        fixes[1].starts_with(
            "or a fixed preStop sleep ≥ 60 s with terminationGracePeriodSeconds ≥ 70 s"
        ),
        "{}",
        f.fix
    );
    assert_eq!(
        fixes[2],
        "cache 5 or `disable success cluster.local` in ConfigMap kube-system/coredns lowers the budget to 35 s"
    );
    assert_eq!(f.figures.get("exposure_s"), Some(&60));
    // The budget chain is reported per Service, with the caller named.
    let b = &report.services[0];
    assert_eq!(b.budget_s, Some(60));
    assert_eq!(b.callers, vec!["Deployment demo/checkout".to_string()]);
}

#[test]
fn a_recreate_rollout_reports_the_denial_cache() {
    let report = run("GIP-ROLL-001-pos.yaml");
    let f = of(&report, RuleId::Roll001);
    assert!(
        f[0].message.contains("denial up to 30 s"),
        "{}",
        f[0].message
    );
}

#[test]
fn forever_caches_are_errors_and_unbound_the_budget() {
    let report = run("GIP-CLIENT-001-pos.yaml");
    assert_eq!(report.worst(), Some(Severity::Error));
    assert_eq!(report.services[0].client_cache_s, Some(-1));
    assert_eq!(report.services[0].budget_s, None);
    // A 5 s JVM cache is counted in the budget instead.
    let report = run("GIP-CLIENT-001-neg.yaml");
    assert_eq!(report.services[0].budget_s, Some(35));
}

#[test]
fn namespace_and_selector_scope_services() {
    let text = std::fs::read_to_string(data("GIP-DNS-001-pos.yaml")).unwrap();
    let mut inv = Inventory::new("default");
    add_manifest(&mut inv, "x.yaml", &text).unwrap();
    let other_ns = AuditConfig {
        namespace: Some("other".into()),
        ..AuditConfig::default()
    };
    let r = audit(&inv, &other_ns);
    assert!(r.services.is_empty());
    assert!(of(&r, RuleId::Dns001).is_empty());
    // Corefiles are always read.
    assert_eq!(of(&r, RuleId::Dns003).len(), 1);
    let unmatched = AuditConfig {
        selector: vec![("tier".into(), Some("db".into()), false)],
        ..AuditConfig::default()
    };
    let r = audit(&inv, &unmatched);
    assert!(r.services.is_empty());
    assert!(
        r.findings.iter().all(|f| f.rule == RuleId::Dns003),
        "{:#?}",
        r.findings
    );
}

/// The Corefiles of a cluster: the classic cluster DNS (`ttl 30`, `cache 30`) and `extra`.
fn with_corefiles(extra: &[(&str, &str)]) -> AuditReport {
    let mut inv = Inventory::new("default");
    inv.add_corefile_file("coredns.corefile", CLASSIC.to_string());
    for (name, text) in extra {
        inv.add_corefile_file(name, (*text).to_string());
    }
    audit(&inv, &AuditConfig::default())
}

const CLASSIC: &str = ".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n        pods insecure\n        fallthrough in-addr.arpa ip6.arpa\n        ttl 30\n    }\n    forward . /etc/resolv.conf\n    cache 30\n}\n";

fn roles(report: &AuditReport) -> Vec<(&'static str, u64)> {
    report.dns.iter().map(|l| (l.role, l.cache_lag_s)).collect()
}

#[test]
fn corefile_caveats_show_in_the_table_as_in_json() {
    let mut inv = Inventory::new("default");
    inv.add_corefile_file(
        "Corefile",
        ".:53 {\n kubernetes cluster.local\n cache 30\n import custom/*.override\n}\nimport custom/*.server\n"
            .to_string(),
    );
    let report = audit(&inv, &AuditConfig::default());
    let json = render::json(&report).to_string();
    let table = render::table(&report);
    for c in [
        "import custom/*.override not followed",
        "top-level import custom/*.server not followed",
    ] {
        assert!(json.contains(c), "{json}");
        assert!(table.contains(&format!("caveat: {c}")), "{table}");
    }
}

#[test]
fn a_cluster_dns_template_as_published_is_the_cluster_dns_with_its_placeholder_named() {
    // kube-up's cluster addon Corefile, `__DNS__DOMAIN__` not rendered.
    let report = {
        let mut inv = Inventory::new("default");
        inv.add_corefile_file(
            "coredns.yaml.base.corefile",
            CLASSIC.replace("cluster.local", "__DNS__DOMAIN__"),
        );
        audit(&inv, &AuditConfig::default())
    };
    assert_eq!(roles(&report), [("cluster-dns", 30)]);
    let table = render::table(&report);
    assert!(
        table.contains(
            "caveat: zone is the template placeholder __DNS__DOMAIN__ (line 3); lag computed assuming it is the cluster zone cluster.local"
        ),
        "{table}"
    );
    assert!(!table.contains("NodeLocal"), "{table}");
}

#[test]
fn a_forwarder_to_public_resolvers_is_not_a_cache_in_front_of_the_cluster_dns() {
    // CoreDNS under Nomad: its root zone goes to public resolvers, not to the cluster DNS.
    let nomad = ". {\n  bind {$NOMAD_IP_dns}\n  cache {\n    serve_stale 24h\n  }\n  forward . 8.8.8.8 8.8.4.4\n}\n";
    let report = with_corefiles(&[("nomad.corefile", nomad)]);
    assert_eq!(roles(&report), [("cluster-dns", 30)]);
    assert!(
        of(&report, RuleId::Dns002).is_empty(),
        "{:#?}",
        report.findings
    );
    let notes: Vec<&Finding> = of(&report, RuleId::Dns003)
        .into_iter()
        .filter(|f| f.object.name == "nomad.corefile")
        .collect();
    assert_eq!(notes.len(), 1, "{:#?}", report.findings);
    assert!(
        notes[0].message.contains("not counted"),
        "{}",
        notes[0].message
    );
    // A zone block forwarding to an address, or NodeLocal's placeholder, is a node cache.
    for cache in [
        "cluster.local:53 {\n    cache 30\n    forward . 10.0.0.10\n}\n.:53 {\n    forward . 168.63.129.16\n}\n",
        ".:53 {\n    cache 30\n    forward . __PILLAR__CLUSTER__DNS__\n}\n",
        ".:53 {\n    cache 30\n    forward . 10.96.0.10\n}\n",
    ] {
        let report = with_corefiles(&[("node.corefile", cache)]);
        assert_eq!(
            roles(&report),
            [("cluster-dns", 30), ("node-cache", 35)],
            "{cache}"
        );
    }
}

/// The issue's example with text replaced.
fn dns001_variant(replace: &[(&str, &str)]) -> AuditReport {
    let mut text = std::fs::read_to_string(data("GIP-DNS-001-pos.yaml")).unwrap();
    for (from, to) in replace {
        assert!(text.contains(from), "{from}");
        text = text.replace(from, to);
    }
    let mut inv = Inventory::new("default");
    add_manifest(&mut inv, "variant.yaml", &text).unwrap();
    audit(&inv, &AuditConfig::default())
}

#[test]
fn a_small_budget_keeps_the_fixed_sleep() {
    // 5 s of DNS lag (no kubernetes ttl) and no client cache: a 5 s sleep, no drain-wait.
    let report = dns001_variant(&[
        ("           ttl 30\n", ""),
        ("-Dsun.net.inetaddr.ttl=30", "-Dsun.net.inetaddr.ttl=0"),
    ]);
    let f = of(&report, RuleId::Dns001);
    assert_eq!(f.len(), 1, "{:#?}", report.findings);
    assert_eq!(f[0].figures.get("budget_s"), Some(&5));
    assert_eq!(f[0].fix, "preStop sleep ≥ 5 s");
}

#[test]
fn a_budget_reaching_the_grace_period_advises_drain_wait() {
    // 8 s of budget, under 10 s, but the pods have a 5 s grace period.
    let report = dns001_variant(&[
        ("           ttl 30\n", ""),
        ("-Dsun.net.inetaddr.ttl=30", "-Dsun.net.inetaddr.ttl=3"),
        (
            "      containers:\n      - name: web\n",
            "      terminationGracePeriodSeconds: 5\n      containers:\n      - name: web\n",
        ),
    ]);
    let f = of(&report, RuleId::Dns001);
    assert_eq!(f.len(), 1, "{:#?}", report.findings);
    assert_eq!(f[0].figures.get("budget_s"), Some(&8));
    assert!(
        f[0].fix.starts_with(
            "preStop exec `ghostip drain-wait` with terminationGracePeriodSeconds ≥ 18 s"
        ),
        "{}",
        f[0].fix
    );
}

#[test]
fn the_staleness_budget_of_one_service_has_its_chain() {
    let text = std::fs::read_to_string(data("GIP-DNS-001-pos.yaml")).unwrap();
    let mut inv = Inventory::new("default");
    add_manifest(&mut inv, "x.yaml", &text).unwrap();
    let key = ghostip_core::ServiceKey::new("demo", "web");
    let cfg = AuditConfig::default();
    let b = staleness_budget(&inv, &key, &cfg).unwrap();
    assert_eq!(b.total_s, Some(60));
    assert_eq!(b.dns_lag_s, Some(30));
    assert_eq!(b.client_cache_s, Some(30));
    let chain: Vec<(&str, i64, &str)> = b
        .chain
        .iter()
        .map(|c| (c.layer, c.seconds, c.detail.as_str()))
        .collect();
    assert_eq!(
        chain,
        [
            ("cluster-dns", 30, "kubernetes ttl 30, cache 30"),
            ("client-cache", 30, "caches 30 s"),
        ]
    );
    assert_eq!(b.chain[0].source, "ConfigMap kube-system/coredns");
    assert!(
        b.chain[1].source.contains("Deployment demo/checkout"),
        "{}",
        b.chain[1].source
    );
    assert!(b.caveats.is_empty(), "{:?}", b.caveats);
    // The audit reports the same figure.
    assert_eq!(audit(&inv, &cfg).services[0].budget_s, b.total_s);
    assert!(staleness_budget(&inv, &ghostip_core::ServiceKey::new("demo", "nope"), &cfg).is_none());

    // From the parts: NodeLocal DNSCache in front adds its floor; the caller is given.
    let coredns = inv.corefiles[0].text.clone();
    let nodelocal = "cluster.local:53 {\n    cache {\n        success 9984 30\n        denial 9984 5\n    }\n    forward . __PILLAR__CLUSTER__DNS__ {\n        force_tcp\n    }\n}\n";
    let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "demo"},
        "spec": {"clusterIP": "None", "selector": {"app": "web"}}
    }))
    .unwrap();
    let caller: k8s_openapi::api::core::v1::PodTemplateSpec =
        serde_json::from_value(serde_json::json!({
            "spec": {"containers": [{"name": "app", "command": ["java", "-Dsun.net.inetaddr.ttl=10", "-jar", "app.jar"]}]}
        }))
        .unwrap();
    let b = staleness_budget_from_parts(&[&coredns, nodelocal], &svc, &[caller], &cfg).unwrap();
    let chain: Vec<(&str, i64)> = b.chain.iter().map(|c| (c.layer, c.seconds)).collect();
    assert_eq!(
        chain,
        [("cluster-dns", 30), ("node-cache", 5), ("client-cache", 10)]
    );
    assert_eq!(b.total_s, Some(45));
    // A ClusterIP Service: its name answers the Service IP.
    let cluster_ip: k8s_openapi::api::core::v1::Service =
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"clusterIP": "10.96.0.20"}
        }))
        .unwrap();
    let b = staleness_budget_from_parts(&[&coredns], &cluster_ip, &[], &cfg).unwrap();
    assert_eq!((b.headless, b.total_s), (false, Some(0)));
    assert!(b.chain.is_empty() && b.caveats[0].contains("ClusterIP"));
    let nameless = k8s_openapi::api::core::v1::Service::default();
    assert!(staleness_budget_from_parts(&[], &nameless, &[], &cfg).is_err());
}

/// demo/web (headless, one pod without preStop) and a caller `checkout` whose pod spec is
/// `caller` (YAML, indented for `spec:` of the pod template), with `extra` documents.
fn jvm_case(caller: &str, extra: &str) -> AuditReport {
    let text = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: demo}}\nspec:\n  clusterIP: None\n  selector: {{app: web}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {{name: web-0, namespace: demo, labels: {{app: web}}}}\nspec:\n  containers: [{{name: web, image: web}}]\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: checkout, namespace: demo}}\nspec:\n  selector: {{matchLabels: {{app: checkout}}}}\n  template:\n    metadata: {{labels: {{app: checkout}}}}\n    spec:\n{caller}{extra}"
    );
    let mut inv = Inventory::new("default");
    add_manifest(&mut inv, "jvm.yaml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let report = audit(&inv, &AuditConfig::default());
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    report
}

fn client_cache(report: &AuditReport) -> Option<i64> {
    report.services[0].client_cache_s
}

#[test]
fn networkaddress_cache_ttl_as_a_system_property_is_ignored_like_the_jdk_does() {
    // A security property: the JDK reads it from java.security, never from -D.
    let r = jvm_case(
        "      containers:\n      - name: app\n        command: [java, -Dnetworkaddress.cache.ttl=5, -jar, app.jar, --web=web:8080]\n",
        "",
    );
    assert_eq!(client_cache(&r), Some(30));
    let f = of(&r, RuleId::Dns001);
    assert_eq!(f.len(), 1, "{:#?}", r.findings);
    assert!(
        f[0].message.contains("JVM default cache 30 s (container app, no networkaddress.cache.ttl; -Dnetworkaddress.cache.ttl=5 is ignored: a security property, read from java.security, not from -D)"),
        "{}",
        f[0].message
    );
    assert_eq!(r.services[0].budget_s, Some(30));
    let r2 = jvm_case(
        "      containers:\n      - name: app\n        env:\n        - {name: JAVA_TOOL_OPTIONS, value: \"-Dnetworkaddress.cache.ttl=-1\"}\n        - {name: WEB, value: \"http://web:8080\"}\n",
        "",
    );
    assert_eq!(client_cache(&r2), Some(30));
    assert!(of(&r2, RuleId::Client001).is_empty(), "{:#?}", r2.findings);
}

const JAVA_SECURITY_FOREVER: &str = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: jvm-security, namespace: demo}\ndata:\n  java.security: |\n    # site policy\n    securerandom.source=file:/dev/random\n    networkaddress.cache.ttl=-1\n    networkaddress.cache.negative.ttl = 0\n";

#[test]
fn a_java_security_mounted_from_a_configmap_sets_the_cache() {
    let caller = "      containers:\n      - name: app\n        command: [java, -Dsun.net.inetaddr.ttl=5, -jar, app.jar, --web=web:8080]\n        volumeMounts:\n        - {name: sec, mountPath: /opt/java/openjdk/conf/security/java.security, subPath: java.security}\n      volumes:\n      - name: sec\n        configMap: {name: jvm-security}\n";
    let r = jvm_case(caller, JAVA_SECURITY_FOREVER);
    // The security property wins over -Dsun.net.inetaddr.ttl.
    assert_eq!(client_cache(&r), Some(-1));
    let f = of(&r, RuleId::Client001);
    assert_eq!(f.len(), 1, "{:#?}", r.findings);
    assert!(
        f[0].message.contains(
            "networkaddress.cache.ttl=-1 in java.security from ConfigMap demo/jvm-security"
        ),
        "{}",
        f[0].message
    );
    // Not mounted: the ConfigMap alone changes nothing.
    let unmounted = "      containers:\n      - name: app\n        command: [java, -Dsun.net.inetaddr.ttl=5, -jar, app.jar, --web=web:8080]\n";
    assert_eq!(
        client_cache(&jvm_case(unmounted, JAVA_SECURITY_FOREVER)),
        Some(5)
    );
}

#[test]
fn a_security_properties_file_named_on_the_command_line_is_read_from_its_configmap() {
    let caller = "      containers:\n      - name: app\n        env:\n        - {name: JAVA_TOOL_OPTIONS, value: \"-Dsun.net.inetaddr.ttl=60 -Djava.security.properties=/etc/jvm/dns.properties\"}\n        - {name: WEB_HOST, value: web}\n        volumeMounts:\n        - {name: jvm, mountPath: /etc/jvm}\n      volumes:\n      - name: jvm\n        configMap:\n          name: jvm-dns\n          items:\n          - {key: dns, path: dns.properties}\n";
    let cm = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: jvm-dns, namespace: demo}\ndata:\n  dns: \"networkaddress.cache.ttl=5\\nnetworkaddress.cache.negative.ttl=1\\n\"\n";
    let r = jvm_case(caller, cm);
    assert_eq!(client_cache(&r), Some(5));
    // The file is not in the input: the -D value counts, and the file is named.
    let r = jvm_case(caller, "");
    assert_eq!(client_cache(&r), Some(60));
    let json = render::json(&r).to_string();
    assert!(json.contains("/etc/jvm/dns.properties"), "{json}");
}

#[test]
fn jvm_options_from_a_configmap_key_and_java_started_by_a_shell_are_read() {
    let caller = "      containers:\n      - name: app\n        command: [sh, -c, \"exec java -jar /app.jar\"]\n        env:\n        - name: JAVA_TOOL_OPTIONS\n          valueFrom:\n            configMapKeyRef: {name: jvm-opts, key: opts}\n        - {name: WEB_HOST, value: web}\n";
    let cm = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: jvm-opts, namespace: demo}\ndata:\n  opts: \"-Xmx1g -Dsun.net.inetaddr.ttl=7\"\n";
    assert_eq!(client_cache(&jvm_case(caller, cm)), Some(7));
    // Without the ConfigMap: java is still seen (sh -c), with the JDK default.
    assert_eq!(client_cache(&jvm_case(caller, "")), Some(30));
}
