// Command cacheclient is the lab's misbehaving client: it resolves a Service name, keeps the
// answer in its own cache for a fixed time whatever the DNS TTL (like the JVM's
// networkaddress.cache.ttl=30), and dials the cached IPs round robin, logging every failure
// with Go's own error text. During a rollout it keeps dialing the IPs of removed pods until its
// cache expires, which is what `ghostip explain` is tested on.
//
// Every loop is bounded: by -duration and by -max-dials.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"syscall"
	"time"
)

type config struct {
	name        string
	port        int
	cacheTTL    time.Duration
	interval    time.Duration
	dialTimeout time.Duration
	duration    time.Duration
	maxDials    int
}

func main() {
	var c config
	flag.StringVar(&c.name, "name", "web.demo.svc.cluster.local", "DNS name to resolve (a headless Service)")
	flag.IntVar(&c.port, "port", 8080, "TCP port to dial")
	flag.DurationVar(&c.cacheTTL, "cache-ttl", 30*time.Second, "how long a resolution is kept, whatever the DNS TTL")
	flag.DurationVar(&c.interval, "interval", 200*time.Millisecond, "pause between dials")
	flag.DurationVar(&c.dialTimeout, "dial-timeout", time.Second, "connect timeout of one dial")
	flag.DurationVar(&c.duration, "duration", 90*time.Second, "stop after this long")
	flag.IntVar(&c.maxDials, "max-dials", 2000, "stop after this many dials")
	flag.Parse()
	if c.port < 1 || c.port > 65535 || c.interval <= 0 || c.maxDials < 1 {
		fmt.Fprintln(os.Stderr, "cacheclient: -port must be 1-65535, -interval > 0, -max-dials >= 1")
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.String(slog.TimeKey, a.Value.Time().UTC().Format("2006-01-02T15:04:05.000Z07:00"))
			}
			return a
		},
	}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()
	os.Exit(run(ctx, c, log))
}

func run(ctx context.Context, c config, log *slog.Logger) int {
	var cached []string
	var resolvedAt time.Time
	next, ok, failed := 0, 0, 0
	port := strconv.Itoa(c.port)
	log.Info("starting", "name", c.name, "port", c.port, "cache_ttl", c.cacheTTL.String())
	for dials := 0; dials < c.maxDials; dials++ {
		if ctx.Err() != nil {
			break
		}
		if cached == nil || time.Since(resolvedAt) >= c.cacheTTL {
			lctx, lcancel := context.WithTimeout(ctx, 2*time.Second)
			ips, err := net.DefaultResolver.LookupHost(lctx, c.name)
			lcancel()
			if err != nil {
				log.Error("resolve failed", "name", c.name, "err", err)
			} else {
				sort.Strings(ips)
				cached, resolvedAt = ips, time.Now()
				log.Info("resolved", "name", c.name, "ips", fmt.Sprint(ips), "cached_for", c.cacheTTL.String())
			}
		}
		if len(cached) > 0 {
			addr := net.JoinHostPort(cached[next%len(cached)], port)
			next++
			if err := dial(ctx, addr, c.dialTimeout); err != nil {
				failed++
				log.Error("request failed", "addr", addr, "err", err)
			} else {
				ok++
				log.Info("request ok", "addr", addr)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(c.interval):
		}
	}
	log.Info("done", "ok", ok, "failed", failed)
	return 0
}

// dial connects and reads the server's greeting (podsync serve writes one line and closes).
func dial(ctx context.Context, addr string, timeout time.Duration) error {
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	_, err = io.ReadAll(io.LimitReader(conn, 4096))
	return err
}
