// podsync keeps the ghostip lab's pod network in step with the pods that
// kwok fakes: it plays the part of the kubelet and the CNI plugin for every
// pod scheduled to a lab node.
//
//	podsync run   --kubeconfig K --state-dir D --nodes node-1,node-2 --coredns BIN
//	podsync serve --pod NS/NAME --ip IP --tcp 8080 --udp 53
//	podsync lookup --server 10.96.0.10:53 --name kubernetes.default.svc.cluster.local
//
// `run` watches Pods with an informer. For each pod on a lab node it
// allocates a pod IP from the node's podCIDR (sequentially, see ipam.go),
// creates a network namespace ghostip-pod-<short> wired Calico-style to the
// hub namespace, starts the pod's process in it (the real CoreDNS binary for
// k8s-app=kube-dns pods, `podsync serve` otherwise), waits for the pod's
// readiness probe, and only then writes the IP to the pod annotation
// ghostip.lab/pod-ip, from which kwok's pod-ready stage fills status.podIP
// and marks the pod Ready. When the pod gets a deletionTimestamp it emulates
// the preStop hook, stops the process within the grace period, deletes the
// namespace (so the pod IP's route disappears) and deletes the Pod object,
// like the kubelet does.
//
// `serve` is the tiny stand-in for an application container: a TCP listener
// that writes one line naming the pod (or a minimal HTTP answer) and closes,
// and a UDP echo. With --keepalive it answers HTTP/1.1 on kept-alive
// connections; with --drain it shuts down like a service with a drain phase
// (see serve.go). The pod annotation ghostip.lab/serve-args adds such flags.
//
// `lookup` is one A query with a deadline, exit 0 when answered: a DNS
// liveness probe for the lab's server image (lookup.go).
//
// Every action is logged as one JSON object per line.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runMain(os.Args[2:])
	case "serve":
		err = serveMain(os.Args[2:])
	case "lookup":
		err = lookupMain(os.Args[2:])
	case "-h", "--help", "help":
		usage()
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "podsync: %v\n", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: podsync run --kubeconfig FILE --state-dir DIR --nodes a,b --coredns BIN [--log FILE]")
	fmt.Fprintln(os.Stderr, "       podsync serve --pod NS/NAME [--ip IP] [--tcp P,P] [--udp P,P] [--keepalive] [--drain D]")
	fmt.Fprintln(os.Stderr, "       podsync lookup --server IP:PORT --name NAME [--timeout D]")
	os.Exit(2)
}
