package main

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The pod network, Calico style: each pod namespace hangs off its node's
// namespace. podsync runs inside the hub namespace and addresses the node
// and pod namespaces with `ip -n`.
//
//	pod netns ghostip-pod-<short>          node netns ghostip-node-N
//	  eth0  <podIP>/32  <──── veth ────>   gp<hash>  proxy_arp=1
//	  169.254.1.1 dev eth0 (static neigh)   route <podIP>/32 dev gp<hash>
//	  default via 169.254.1.1               blackhole <node podCIDR>   (lab/up)
//
// So a pod's traffic to a ClusterIP goes through its node's kube-proxy
// rules and conntrack, as in a real cluster. The node has no route for
// 169.254.1.1, so proxy ARP alone does not answer for it (verified); the pod
// gets a permanent neighbour entry with the node-side veth's MAC instead.

const gatewayIP = "169.254.1.1"

var nonName = regexp.MustCompile(`[^a-z0-9-]+`)

// netnsName returns a readable, unique, bounded namespace name for a pod.
func netnsName(name, uid string) string {
	n := nonName.ReplaceAllString(strings.ToLower(name), "-")
	if len(n) > 40 {
		n = n[:40]
	}
	return "ghostip-pod-" + n + "-" + shortUID(uid, 5)
}

// vethName is the hub-side interface name (at most 15 bytes).
func vethName(uid string) string { return "gp" + shortUID(uid, 10) }

func shortUID(uid string, n int) string {
	h := sha1.Sum([]byte(uid))
	return hex.EncodeToString(h[:])[:n]
}

func run(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// setupPodNetwork creates the pod namespace and wires it to its node.
func setupPodNetwork(ctx context.Context, node, ns, veth, ip string) error {
	steps := [][]string{
		{"netns", "add", ns},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", node, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"-n", ns, "addr", "add", ip + "/32", "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "route", "add", gatewayIP, "dev", "eth0", "scope", "link"},
		{"-n", ns, "route", "add", "default", "via", gatewayIP, "dev", "eth0"},
	}
	for _, s := range steps {
		if _, err := run(ctx, "ip", s...); err != nil {
			return err
		}
	}
	out, err := run(ctx, "ip", "-n", node, "-o", "link", "show", veth)
	if err != nil {
		return err
	}
	var mac string
	f := strings.Fields(out)
	for i := range f {
		if f[i] == "link/ether" && i+1 < len(f) {
			mac = f[i+1]
		}
	}
	if mac == "" {
		return fmt.Errorf("node veth %s: no MAC in %q", veth, out)
	}
	for _, s := range [][]string{
		{"netns", "exec", node, "sysctl", "-qw", "net.ipv4.conf." + veth + ".proxy_arp=1"},
		{"-n", ns, "neigh", "replace", gatewayIP, "lladdr", mac, "dev", "eth0", "nud", "permanent"},
		{"-n", node, "link", "set", veth, "up"},
		{"-n", node, "route", "replace", ip + "/32", "dev", veth},
	} {
		if _, err := run(ctx, "ip", s...); err != nil {
			return err
		}
	}
	return nil
}

// teardownPodNetwork kills whatever still runs in the namespace and deletes
// it; the veth pair and the hub route go with it. Safe to call twice.
func teardownPodNetwork(ctx context.Context, node, ns, veth, ip string) error {
	if _, err := os.Stat("/run/netns/" + ns); err == nil {
		if out, err := run(ctx, "ip", "netns", "pids", ns); err == nil {
			for _, f := range strings.Fields(out) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		// The namespace lives until its last process is reaped.
		for i := 0; i < 50; i++ {
			out, _ := run(ctx, "ip", "netns", "pids", ns)
			if strings.TrimSpace(out) == "" {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if _, err := run(ctx, "ip", "netns", "del", ns); err != nil {
			return err
		}
	}
	// Normally gone with the namespace; make sure.
	if node != "" {
		_, _ = run(ctx, "ip", "-n", node, "link", "del", veth)
		_, _ = run(ctx, "ip", "-n", node, "route", "del", ip+"/32", "dev", veth)
	}
	_ = os.RemoveAll("/etc/netns/" + ns)
	return nil
}

// listPodNetns returns existing ghostip-pod-* namespaces.
func listPodNetns() []string {
	ents, _ := os.ReadDir("/run/netns")
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "ghostip-pod-") {
			out = append(out, e.Name())
		}
	}
	return out
}
