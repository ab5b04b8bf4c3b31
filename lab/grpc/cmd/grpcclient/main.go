// Command grpcclient is the lab's client-side-balancing gRPC client: it dials --target
// (dns:///name:port resolves a headless Service to its pod IPs) with the round_robin
// balancer, calls Echo at a fixed --rate for --duration, and logs every failure with the
// library's own text, an RFC3339Nano timestamp and the target. It serves channelz on
// --channelz-listen, which is what ghostip's channelz layer reads.
//
// Every loop is bounded: by --duration and by --max-calls.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	channelzsvc "google.golang.org/grpc/channelz/service"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"ghostip.lab/grpc/echo"
)

func main() {
	target := flag.String("target", "dns:///web.demo.svc.cluster.local:50051", "gRPC target to dial (any scheme grpc-go resolves)")
	rate := flag.Float64("rate", 10, "calls per second")
	duration := flag.Duration("duration", 90*time.Second, "stop after this long")
	maxCalls := flag.Int("max-calls", 100000, "stop after this many calls")
	callTimeout := flag.Duration("call-timeout", time.Second, "deadline of one call")
	czListen := flag.String("channelz-listen", ":9901", "address to serve channelz on (empty: none)")
	addrList := flag.String("addresses", "", "comma-separated host:port list the target's name resolves to, instead of its resolver (tests on loopback)")
	addrFile := flag.String("addresses-file", "", "file of host:port lines the target's name resolves to, instead of its resolver")
	flag.Parse()
	log.SetFlags(0)
	log.SetOutput(os.Stdout)
	logf := func(format string, args ...any) {
		log.Printf("%s grpcclient: %s", time.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
	}
	if *rate <= 0 || *maxCalls < 1 {
		fmt.Fprintln(os.Stderr, "grpcclient: --rate must be > 0 and --max-calls >= 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()

	if *czListen != "" {
		lis, err := net.Listen("tcp", *czListen)
		if err != nil {
			logf("channelz listen %s: %v", *czListen, err)
			os.Exit(2)
		}
		cz := grpc.NewServer()
		channelzsvc.RegisterChannelzServiceToServer(cz)
		go func() { _ = cz.Serve(lis) }()
		defer cz.Stop()
		logf("channelz on %s", lis.Addr())
	}

	dialOpts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin":{}}]}`),
	}
	addrs, err := fixedAddresses(*addrList, *addrFile)
	if err != nil {
		logf("%v", err)
		os.Exit(2)
	}
	if len(addrs) > 0 {
		// The target keeps its text (what channelz shows); its scheme resolves to addrs.
		scheme, _, ok := strings.Cut(*target, ":///")
		if !ok {
			scheme = "dns"
		}
		r := manual.NewBuilderWithScheme(scheme)
		state := resolver.State{}
		for _, a := range addrs {
			state.Addresses = append(state.Addresses, resolver.Address{Addr: a})
		}
		r.InitialState(state)
		dialOpts = append(dialOpts, grpc.WithResolvers(r))
		logf("target=%s resolves to %d fixed addresses", *target, len(addrs))
	}
	cc, err := grpc.NewClient(*target, dialOpts...)
	if err != nil {
		logf("target=%s dial: %v", *target, err)
		os.Exit(2)
	}
	defer cc.Close()
	logf("target=%s calling at %.1f/s for %v", *target, *rate, *duration)

	tick := time.NewTicker(time.Duration(float64(time.Second) / *rate))
	defer tick.Stop()
	var calls, failures int
	for calls < *maxCalls {
		select {
		case <-ctx.Done():
			logf("target=%s done: %d calls, %d failures", *target, calls, failures)
			return
		case <-tick.C:
		}
		calls++
		cctx, ccancel := context.WithTimeout(ctx, *callTimeout)
		_, err := echo.Call(cctx, cc)
		ccancel()
		if err != nil && ctx.Err() == nil {
			failures++
			logf("target=%s call failed: %v", *target, err)
		}
	}
	logf("target=%s done: %d calls, %d failures", *target, calls, failures)
}

// fixedAddresses reads --addresses and --addresses-file: host:port entries, blank lines and
// lines starting with # skipped.
func fixedAddresses(list, file string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--addresses-file: %w", err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				out = append(out, l)
			}
		}
	}
	for _, a := range out {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("address %q: %w", a, err)
		}
	}
	return out, nil
}
