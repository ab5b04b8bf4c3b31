// Command grpcserver is the lab's gRPC backend: the standard health service and one unary
// method, Echo, answering with the server's pod name and address. SIGTERM stops it
// gracefully (in-flight calls finish, clients get GOAWAY); --max-connection-age makes it
// close every connection after that long, which makes clients re-resolve.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"ghostip.lab/grpc/echo"
)

func main() {
	listen := flag.String("listen", ":50051", "address to listen on (host:port)")
	maxAge := flag.Duration("max-connection-age", 0, "close each client connection after this long (0: never), with a 5 s grace")
	grace := flag.Duration("grace", 10*time.Second, "on SIGTERM, how long in-flight calls may take before the server stops hard")
	name := flag.String("name", "", "name to answer Echo with (default: $POD_NAME, else the host name)")
	flag.Parse()
	log.SetFlags(0)
	log.SetOutput(os.Stdout)
	logf := func(format string, args ...any) {
		log.Printf("%s grpcserver: %s", time.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
	}
	who := *name
	if who == "" {
		who = os.Getenv("POD_NAME")
	}
	if who == "" {
		who, _ = os.Hostname()
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		logf("listen %s: %v", *listen, err)
		os.Exit(2)
	}
	who = fmt.Sprintf("%s %s", who, lis.Addr())
	var opts []grpc.ServerOption
	if *maxAge > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge:      *maxAge,
			MaxConnectionAgeGrace: 5 * time.Second,
		}))
	}
	g := grpc.NewServer(opts...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	echo.Register(g, &echo.Server{Who: who})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-sig
		logf("%v: stopping gracefully (at most %v)", s, *grace)
		hs.Shutdown()
		done := make(chan struct{})
		go func() { g.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(*grace):
			g.Stop()
		}
	}()
	logf("serving %s on %s (max-connection-age %v)", who, lis.Addr(), *maxAge)
	if err := g.Serve(lis); err != nil {
		logf("serve: %v", err)
		os.Exit(1)
	}
	logf("stopped")
}
