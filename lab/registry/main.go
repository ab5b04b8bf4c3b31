// Command registry is the lab's service-registry stand-in for the JVM client's registry mode: a
// tiny HTTP server that answers the one call of Nacos's open API a client's instance-list refresh
// makes (GET /nacos/v1/ns/instance/list?serviceName=NAME), in Nacos's JSON shape, with the ready
// endpoints of one Service's EndpointSlices, polled from the Kubernetes API.
//
// A real registry learns about instances from the instances themselves (registration at start,
// deregistration at shutdown, heartbeats), so it lags behind the EndpointSlices: -lag keeps an
// instance listed that long after its endpoint stopped being ready, as a registry does that only
// drops an instance when its heartbeats stop.
//
// Every loop is bounded: the API is polled every -sync, and the server exits after -duration.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

type config struct {
	server, tokenFile, caFile string
	namespace, service        string
	port                      int
	listen                    string
	sync, lag, duration       time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.server, "server", "https://10.200.0.1:6443", "Kubernetes API server URL")
	flag.StringVar(&c.tokenFile, "token-file", "/var/lib/ghostip-lab/token", "file holding the bearer token")
	flag.StringVar(&c.caFile, "ca-file", "/var/lib/ghostip-lab/pki/ca.crt", "CA certificate of the API server")
	flag.StringVar(&c.namespace, "namespace", "javademo", "namespace of the Service")
	flag.StringVar(&c.service, "service", "backend", "Service whose ready endpoints are the instances (also the registry's service name)")
	flag.IntVar(&c.port, "port", 8080, "port listed for every instance")
	flag.StringVar(&c.listen, "listen", "127.0.0.1:8848", "address to serve on (loopback unless you mean it)")
	flag.DurationVar(&c.sync, "sync", time.Second, "how often the EndpointSlices are read from the API")
	flag.DurationVar(&c.lag, "lag", 0, "how long an instance stays listed after its endpoint stopped being ready")
	flag.DurationVar(&c.duration, "duration", 10*time.Minute, "exit after this long")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if c.sync < 100*time.Millisecond || c.lag < 0 || c.duration <= 0 || c.port < 1 || c.port > 65535 {
		fmt.Fprintln(os.Stderr, "registry: -sync must be >= 100ms, -lag >= 0, -duration > 0, -port 1-65535")
		os.Exit(2)
	}
	if err := run(c, log); err != nil {
		fmt.Fprintf(os.Stderr, "registry: %v\n", err)
		os.Exit(1)
	}
}

// registry holds the instance list: IP -> when it was last seen ready.
type registry struct {
	mu       sync.Mutex
	lastSeen map[string]time.Time
	listed   []string
	synced   bool
}

// update applies one read of the ready endpoints at time now; it returns the
// listed instances and whether they changed.
func (r *registry) update(ready []string, now time.Time, lag time.Duration) ([]string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ip := range ready {
		r.lastSeen[ip] = now
	}
	var listed []string
	for ip, t := range r.lastSeen {
		if now.Sub(t) <= lag {
			listed = append(listed, ip)
		} else {
			delete(r.lastSeen, ip)
		}
	}
	slices.Sort(listed)
	changed := !r.synced || !slices.Equal(listed, r.listed)
	r.listed, r.synced = listed, true
	return listed, changed
}

func (r *registry) instances() ([]string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.listed), r.synced
}

func run(c config, log *slog.Logger) error {
	api, err := apiClient(c)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()

	reg := &registry{lastSeen: map[string]time.Time{}}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler(c, reg), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("serving", "listen", c.listen, "service", c.namespace+"/"+c.service, "sync", c.sync.String(), "lag", c.lag.String())

	tick := time.NewTicker(c.sync)
	defer tick.Stop()
	for {
		ready, err := api.readyIPs(ctx, c.namespace, c.service)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("reading EndpointSlices failed", "err", err)
		case err == nil:
			if listed, changed := reg.update(ready, time.Now(), c.lag); changed {
				log.Info("instances", "service", c.service, "ips", strings.Join(listed, ","), "ready", strings.Join(ready, ","))
			}
		}
		select {
		case <-ctx.Done():
			sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer scancel()
			_ = srv.Shutdown(sctx)
			log.Info("stopped")
			return nil
		case <-tick.C:
		}
	}
}

// handler answers GET /nacos/v1/ns/instance/list?serviceName=NAME (NAME or
// GROUP@@NAME) in the shape Nacos 2.x's v1 API uses.
func handler(c config, reg *registry) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /nacos/v1/ns/instance/list", func(w http.ResponseWriter, req *http.Request) {
		name := req.URL.Query().Get("serviceName")
		if i := strings.LastIndex(name, "@@"); i >= 0 {
			name = name[i+2:]
		}
		if name != c.service {
			http.Error(w, "caused: service not found: "+name, http.StatusNotFound)
			return
		}
		ips, synced := reg.instances()
		if !synced {
			http.Error(w, "not synced yet", http.StatusServiceUnavailable)
			return
		}
		full := "DEFAULT_GROUP@@" + c.service
		hosts := make([]map[string]any, 0, len(ips))
		for _, ip := range ips {
			hosts = append(hosts, map[string]any{
				"instanceId": fmt.Sprintf("%s#%d#DEFAULT#%s", ip, c.port, full),
				"ip":         ip, "port": c.port, "weight": 1.0, "healthy": true, "enabled": true,
				"ephemeral": true, "clusterName": "DEFAULT", "serviceName": full, "metadata": map[string]string{},
			})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"name": full, "groupName": "DEFAULT_GROUP", "clusters": "", "cacheMillis": 10000,
			"hosts": hosts, "lastRefTime": time.Now().UnixMilli(), "checksum": "", "allIPs": false,
			"reachProtectionThreshold": false, "valid": true,
		})
	})
	return mux
}

type apiServer struct {
	base  *url.URL
	token string
	http  *http.Client
}

func apiClient(c config) (*apiServer, error) {
	base, err := url.Parse(c.server)
	if err != nil {
		return nil, fmt.Errorf("-server: %w", err)
	}
	tok, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(c.caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s: no PEM certificate", c.caFile)
	}
	return &apiServer{base: base, token: strings.TrimSpace(string(tok)), http: &http.Client{
		Timeout:   3 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}}, nil
}

// readyIPs lists the addresses of the ready endpoints of the Service's
// EndpointSlices.
func (a *apiServer) readyIPs(ctx context.Context, ns, svc string) ([]string, error) {
	u := a.base.JoinPath("/apis/discovery.k8s.io/v1/namespaces", ns, "endpointslices")
	u.RawQuery = url.Values{"labelSelector": {"kubernetes.io/service-name=" + svc}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u.Path, resp.Status)
	}
	var list struct {
		Items []struct {
			Endpoints []struct {
				Addresses  []string `json:"addresses"`
				Conditions struct {
					Ready *bool `json:"ready"`
				} `json:"conditions"`
			} `json:"endpoints"`
		} `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, errors.Join(errors.New("decoding EndpointSliceList"), err)
	}
	var ips []string
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			// A nil ready condition means ready (discovery.k8s.io/v1).
			if (e.Conditions.Ready == nil || *e.Conditions.Ready) && len(e.Addresses) > 0 && !slices.Contains(ips, e.Addresses[0]) {
				ips = append(ips, e.Addresses[0])
			}
		}
	}
	slices.Sort(ips)
	return ips, nil
}
