package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"time"
)

// lookupMain resolves one name with one A query to one DNS server, within a
// deadline, and fails unless an address comes back: a pod's DNS liveness probe
// (exec) in the Cilium stale-backend scenario. No retry and no search list: a
// query the datapath sends to a dead backend fails the probe, as a 1 s probe
// of a real application did in the incident.
func lookupMain(args []string) error {
	fs := flag.NewFlagSet("lookup", flag.ExitOnError)
	server := fs.String("server", "", "DNS server, IP:port (e.g. the kube-dns ClusterIP 10.96.0.10:53)")
	name := fs.String("name", "", "the name to resolve (absolute: no search list is applied)")
	timeout := fs.Duration("timeout", 900*time.Millisecond, "deadline of the whole lookup")
	_ = fs.Parse(args)
	if *server == "" || *name == "" {
		return errors.New("lookup: --server and --name are required")
	}
	if _, _, err := net.SplitHostPort(*server); err != nil {
		return fmt.Errorf("lookup: --server %q: %w", *server, err)
	}
	r := &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", *server)
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	fqdn := *name
	if fqdn[len(fqdn)-1] != '.' {
		fqdn += "."
	}
	start := time.Now()
	ips, err := r.LookupIP(ctx, "ip4", fqdn)
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		return fmt.Errorf("lookup %s via %s: %w (after %s)", fqdn, *server, err, took)
	}
	fmt.Printf("%s %v %s\n", fqdn, ips, took)
	return nil
}
