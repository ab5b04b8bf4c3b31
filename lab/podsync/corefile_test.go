package main

import (
	"strings"
	"testing"
)

const classic = `.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30
    loop
    reload
    loadbalance
}
`

func TestRewriteClassic(t *testing.T) {
	got := rewriteCorefile(classic, "/k.conf")
	want := `.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       kubeconfig /k.conf
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    # ghostip lab: removed (no upstream resolver): forward . /etc/resolv.conf {
    #   max_concurrent 1000
    #   }
    cache 30
    loop
    reload
    loadbalance
}
`
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestRewriteNoBlock(t *testing.T) {
	got := rewriteCorefile(".:53 {\n  kubernetes cluster.local\n  forward . 8.8.8.8\n  cache 5\n}\n", "/k")
	for _, s := range []string{"kubernetes cluster.local {\n     kubeconfig /k\n  }", "# ghostip lab: removed (no upstream resolver): forward . 8.8.8.8", "cache 5"} {
		if !strings.Contains(got, s) {
			t.Errorf("missing %q in\n%s", s, got)
		}
	}
}

func TestRewriteReplacesKubeconfig(t *testing.T) {
	got := rewriteCorefile(".:53 {\n kubernetes cluster.local {\n  kubeconfig /old\n }\n}\n", "/new")
	if strings.Contains(got, "/old") || !strings.Contains(got, "kubeconfig /new") {
		t.Fatalf("got:\n%s", got)
	}
}
