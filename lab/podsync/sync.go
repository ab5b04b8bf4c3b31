package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
)

// ipAnnotation carries the pod IP podsync allocated. kwok's pod-ready stage
// (lab/kwok/pod-ready.yaml) waits for it and copies it to status.podIP(s).
const ipAnnotation = "ghostip.lab/pod-ip"

// serveArgsAnnotation holds extra `podsync serve` flags for a pod's process
// (space-separated, passed as arguments, never through a shell), e.g.
// "--keepalive --drain=5s".
const serveArgsAnnotation = "ghostip.lab/serve-args"

type config struct {
	kubeconfig string
	stateDir   string
	corednsBin string
	self       string
	nodes      map[string]bool
	dnsIP      string
	domain     string
	netnsPref  string
}

// nodeNetns is the network namespace that plays node n.
func (c *controller) nodeNetns(n string) string { return c.cfg.netnsPref + n }

// podRT is what podsync runs for one pod incarnation (keyed by UID).
type podRT struct {
	mu sync.Mutex // held by start and terminate

	key, ns, name, uid, node string
	ip, netns, veth          string
	kind                     string // "coredns" or "serve"
	lastPod                  *corev1.Pod

	cmd      *exec.Cmd
	exited   chan struct{}
	exitErr  error
	started  bool
	restarts int

	terminating bool
	done        bool
}

type controller struct {
	cfg    config
	client kubernetes.Interface
	pods   listersv1.PodLister
	nodes  listersv1.NodeLister
	queue  workqueue.TypedRateLimitingInterface[string]

	mu     sync.Mutex
	rts    map[string]*podRT // by UID
	cursor map[string]int    // IPAM cursor per node

	logMu sync.Mutex
	logW  io.Writer
}

func runMain(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	var cfg config
	var nodes, logPath string
	fs.StringVar(&cfg.kubeconfig, "kubeconfig", "", "kubeconfig (server reachable from the hub netns)")
	fs.StringVar(&cfg.stateDir, "state-dir", "/var/lib/ghostip-lab", "lab state directory")
	fs.StringVar(&cfg.corednsBin, "coredns", "", "CoreDNS binary")
	fs.StringVar(&nodes, "nodes", "", "comma-separated lab node names")
	fs.StringVar(&logPath, "log", "", "JSON-lines action log (default <state-dir>/logs/podsync.jsonl)")
	fs.StringVar(&cfg.dnsIP, "cluster-dns", "10.96.0.10", "nameserver written to pods' resolv.conf")
	fs.StringVar(&cfg.domain, "cluster-domain", "cluster.local", "cluster domain")
	fs.StringVar(&cfg.netnsPref, "node-netns-prefix", "ghostip-", "node N runs in network namespace <prefix>N")
	_ = fs.Parse(args)
	if cfg.kubeconfig == "" || cfg.corednsBin == "" || nodes == "" {
		return fmt.Errorf("--kubeconfig, --coredns and --nodes are required")
	}
	cfg.nodes = map[string]bool{}
	for _, n := range strings.Split(nodes, ",") {
		if n = strings.TrimSpace(n); n != "" {
			cfg.nodes[n] = true
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cfg.self = self
	if logPath == "" {
		logPath = filepath.Join(cfg.stateDir, "logs", "podsync.jsonl")
	}
	for _, d := range []string{filepath.Dir(logPath), filepath.Join(cfg.stateDir, "pods"), filepath.Join(cfg.stateDir, "logs", "pods")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()

	rc, err := clientcmd.BuildConfigFromFlags("", cfg.kubeconfig)
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = 50, 100
	rc.UserAgent = "ghostip-lab-podsync"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}

	c := &controller{
		cfg:    cfg,
		client: client,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 10*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "podsync"}),
		rts:    map[string]*podRT{},
		cursor: map[string]int{},
		logW:   lf,
	}
	c.event("podsync-start", nil, map[string]any{"nodes": nodes, "pid": os.Getpid()})

	// A previous podsync may have left pod namespaces behind; start clean.
	for _, ns := range listPodNetns() {
		err := teardownPodNetwork(context.Background(), "", ns, "", "")
		c.event("stale-netns-removed", nil, map[string]any{"netns": ns, "error": errString(err)})
	}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()

	factory := informers.NewSharedInformerFactory(client, 30*time.Second)
	podInf := factory.Core().V1().Pods()
	nodeInf := factory.Core().V1().Nodes()
	c.pods = podInf.Lister()
	c.nodes = nodeInf.Lister()
	enqueue := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	_, _ = podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, n any) { enqueue(n) },
		DeleteFunc: enqueue,
	})
	_, _ = nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		// A node getting its podCIDR may unblock pods.
		UpdateFunc: func(_, _ any) {
			pods, _ := c.pods.List(labels.Everything())
			for _, p := range pods {
				if p.Status.PodIP == "" {
					enqueue(p)
				}
			}
		},
	})
	factory.Start(ctx.Done())
	for t, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("cache sync failed for %v", t)
		}
	}
	c.event("caches-synced", nil, nil)

	const workers = 4
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.processNext(ctx) {
			}
		}()
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	c.event("podsync-stop", nil, map[string]any{"reason": "signal; pod processes and namespaces are left to lab/down"})
	return nil
}

func (c *controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.reconcile(ctx, key); err != nil {
		c.event("reconcile-error", nil, map[string]any{"key": key, "error": err.Error()})
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

func (c *controller) reconcile(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := c.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		pod = nil
	} else if err != nil {
		return err
	}

	// Older incarnations under this name, or a pod deleted without us seeing
	// its deletionTimestamp (force deletion): stop them now.
	c.mu.Lock()
	var stale []*podRT
	for _, rt := range c.rts {
		if rt.key == key && (pod == nil || rt.uid != string(pod.UID)) && !rt.terminating {
			rt.terminating = true
			stale = append(stale, rt)
		}
	}
	c.mu.Unlock()
	for _, rt := range stale {
		go c.terminate(rt, nil)
	}
	if pod == nil || !c.cfg.nodes[pod.Spec.NodeName] {
		return nil
	}

	c.mu.Lock()
	rt := c.rts[string(pod.UID)]
	c.mu.Unlock()

	if pod.DeletionTimestamp != nil {
		if rt == nil {
			// Nothing runs for it (e.g. never got an IP): finish the deletion
			// like the kubelet would.
			return c.deletePodObject(ctx, pod)
		}
		c.mu.Lock()
		already := rt.terminating
		rt.terminating = true
		rt.lastPod = pod.DeepCopy()
		c.mu.Unlock()
		if !already {
			go c.terminate(rt, pod.DeepCopy())
		}
		return nil
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		if rt != nil {
			c.mu.Lock()
			already := rt.terminating
			rt.terminating = true
			c.mu.Unlock()
			if !already {
				go c.stopCompleted(rt)
			}
		}
		return nil
	}
	if pod.Spec.HostNetwork {
		return c.annotateHostNetwork(ctx, pod)
	}
	if rt == nil {
		return c.admit(ctx, pod)
	}
	// Running: restart a process that died on its own.
	c.mu.Lock()
	rt.lastPod = pod.DeepCopy()
	dead := rt.started && isClosed(rt.exited) && !rt.terminating
	c.mu.Unlock()
	if dead {
		go c.restart(rt, pod.DeepCopy())
	}
	return nil
}

func isClosed(ch chan struct{}) bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// admit allocates an IP and starts the pod asynchronously.
func (c *controller) admit(ctx context.Context, pod *corev1.Pod) error {
	node, err := c.nodes.Get(pod.Spec.NodeName)
	if err != nil {
		return fmt.Errorf("node %s: %v", pod.Spec.NodeName, err)
	}
	uid := string(pod.UID)
	kind := "serve"
	if pod.Labels["k8s-app"] == "kube-dns" {
		kind = "coredns"
	}
	rt := &podRT{
		key: pod.Namespace + "/" + pod.Name, ns: pod.Namespace, name: pod.Name, uid: uid,
		node: pod.Spec.NodeName, netns: netnsName(pod.Name, uid), veth: vethName(uid),
		kind: kind, lastPod: pod.DeepCopy(),
	}
	c.mu.Lock()
	if _, exists := c.rts[uid]; exists {
		c.mu.Unlock()
		return nil
	}
	ip := pod.Annotations[ipAnnotation]
	if ip == "" {
		ip, err = c.allocateLocked(node)
		if err != nil {
			c.mu.Unlock()
			return err
		}
	}
	rt.ip = ip
	c.rts[uid] = rt
	rt.mu.Lock() // released by start
	c.mu.Unlock()
	c.event("ip-allocated", rt, map[string]any{"podCIDR": node.Spec.PodCIDR})
	go c.start(pod.DeepCopy(), rt)
	return nil
}

// allocateLocked hands out the next free IP of the node's podCIDR after the
// last one handed out (wrapping around), like host-local IPAM. A freed IP is
// thus reused only after the whole range has been cycled through. (kwok's
// own allocator hands a freed IP to the very next pod, which would make a
// removed pod IP come back at once during a rollout.)
func (c *controller) allocateLocked(node *corev1.Node) (string, error) {
	cidr := node.Spec.PodCIDR
	if cidr == "" {
		return "", fmt.Errorf("node %s has no podCIDR yet", node.Name)
	}
	_, ipnet, err := net.ParseCIDR(cidr)
	if err != nil || ipnet.IP.To4() == nil {
		return "", fmt.Errorf("node %s: unsupported podCIDR %q", node.Name, cidr)
	}
	ones, bits := ipnet.Mask.Size()
	size := 1 << (bits - ones)
	base := new(big.Int).SetBytes(ipnet.IP.To4())
	ipAt := func(off int) string {
		v := new(big.Int).Add(base, big.NewInt(int64(off))).Bytes()
		for len(v) < 4 {
			v = append([]byte{0}, v...)
		}
		return net.IP(v).String()
	}
	used := map[string]bool{}
	for _, rt := range c.rts {
		used[rt.ip] = true
	}
	if pods, err := c.pods.List(labels.Everything()); err == nil {
		for _, p := range pods {
			if a := p.Annotations[ipAnnotation]; a != "" {
				used[a] = true
			}
			if p.Status.PodIP != "" {
				used[p.Status.PodIP] = true
			}
		}
	}
	cur, ok := c.cursor[node.Name]
	if !ok {
		cur = 1
		for off := 2; off < size-1; off++ {
			if used[ipAt(off)] {
				cur = off
			}
		}
	}
	for i := 1; i <= size; i++ {
		off := (cur + i) % size
		if off < 2 || off >= size-1 { // network, .1 (gateway by convention), broadcast
			continue
		}
		if ip := ipAt(off); !used[ip] {
			c.cursor[node.Name] = off
			return ip, nil
		}
	}
	return "", fmt.Errorf("node %s: podCIDR %s exhausted", node.Name, cidr)
}

// start builds the pod's namespace, starts its process, waits for
// readiness and publishes the IP. rt.mu is held on entry.
func (c *controller) start(pod *corev1.Pod, rt *podRT) {
	defer rt.mu.Unlock()
	ctx := context.Background()
	fail := func(step string, err error) {
		c.event("start-failed", rt, map[string]any{"step": step, "error": err.Error()})
		c.stopProcess(rt, 0)
		_ = teardownPodNetwork(ctx, c.nodeNetns(rt.node), rt.netns, rt.veth, rt.ip)
		c.mu.Lock()
		delete(c.rts, rt.uid)
		c.mu.Unlock()
		c.removeStateFile(rt)
		c.queue.AddAfter(rt.key, 2*time.Second)
	}
	t0 := time.Now()
	if err := setupPodNetwork(ctx, c.nodeNetns(rt.node), rt.netns, rt.veth, rt.ip); err != nil {
		fail("netns", err)
		return
	}
	c.event("netns-created", rt, map[string]any{"veth": rt.veth, "route": rt.ip + "/32 dev " + rt.veth + " in " + c.nodeNetns(rt.node)})
	if err := c.writeResolvConf(pod, rt); err != nil {
		fail("resolv.conf", err)
		return
	}
	if err := c.startProcess(ctx, pod, rt); err != nil {
		fail("process", err)
		return
	}
	if err := c.waitReady(pod, rt); err != nil {
		if c.isTerminating(rt) {
			return // terminate takes over once we release rt.mu
		}
		fail("readiness", err)
		return
	}
	c.event("ready", rt, map[string]any{"after_ms": time.Since(t0).Milliseconds()})
	if pod.Annotations[ipAnnotation] != rt.ip {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{ipAnnotation: rt.ip}}})
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := c.client.CoreV1().Pods(rt.ns).Patch(pctx, rt.name, types.MergePatchType, patch, metav1.PatchOptions{})
		cancel()
		if err != nil && !apierrors.IsNotFound(err) {
			// Retried by the next reconcile: the process keeps running.
			c.event("annotate-failed", rt, map[string]any{"error": err.Error()})
			go c.retryAnnotate(rt)
			return
		}
		c.event("ip-published", rt, map[string]any{"annotation": ipAnnotation})
	}
}

func (c *controller) retryAnnotate(rt *podRT) {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{ipAnnotation: rt.ip}}})
	for i := 0; i < 120 && !c.isTerminating(rt); i++ {
		time.Sleep(time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.client.CoreV1().Pods(rt.ns).Patch(ctx, rt.name, types.MergePatchType, patch, metav1.PatchOptions{})
		cancel()
		if err == nil {
			c.event("ip-published", rt, map[string]any{"annotation": ipAnnotation, "retries": i + 1})
			return
		}
		if apierrors.IsNotFound(err) {
			return
		}
	}
}

func (c *controller) isTerminating(rt *podRT) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return rt.terminating
}

func (c *controller) writeResolvConf(pod *corev1.Pod, rt *podRT) error {
	if pod.Spec.DNSPolicy != "" && pod.Spec.DNSPolicy != corev1.DNSClusterFirst {
		return nil // CoreDNS itself uses dnsPolicy Default; no file then.
	}
	d := c.cfg.domain
	content := fmt.Sprintf("search %s.svc.%s svc.%s %s\nnameserver %s\noptions ndots:5\n", pod.Namespace, d, d, d, c.cfg.dnsIP)
	dir := "/etc/netns/" + rt.netns
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(content), 0o644)
}

func (c *controller) podDir(rt *podRT) string {
	return filepath.Join(c.cfg.stateDir, "pods", fmt.Sprintf("%s_%s_%s", rt.ns, rt.name, shortUID(rt.uid, 5)))
}

func (c *controller) stateFile(rt *podRT) string {
	return filepath.Join(c.cfg.stateDir, "pods", rt.ns+"_"+rt.name+".env")
}

func (c *controller) startProcess(ctx context.Context, pod *corev1.Pod, rt *podRT) error {
	var args []string
	switch rt.kind {
	case "coredns":
		corefile, cm, err := c.corefileFor(ctx, pod)
		if err != nil {
			return err
		}
		dir := c.podDir(rt)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		path := filepath.Join(dir, "Corefile")
		kc := filepath.Join(c.cfg.stateDir, "admin.kubeconfig")
		if err := os.WriteFile(path, []byte(rewriteCorefile(corefile, kc)), 0o644); err != nil {
			return err
		}
		c.event("corefile-written", rt, map[string]any{"configmap": cm, "path": path})
		args = []string{c.cfg.corednsBin, "-conf", path}
	default:
		var tcp, udp []string
		for _, ct := range pod.Spec.Containers {
			for _, p := range ct.Ports {
				if p.Protocol == corev1.ProtocolUDP {
					udp = append(udp, strconv.Itoa(int(p.ContainerPort)))
				} else if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
					tcp = append(tcp, strconv.Itoa(int(p.ContainerPort)))
				}
			}
		}
		args = []string{c.cfg.self, "serve", "--pod", rt.key, "--ip", rt.ip,
			"--tcp", strings.Join(tcp, ","), "--udp", strings.Join(udp, ",")}
		args = append(args, strings.Fields(pod.Annotations[serveArgsAnnotation])...)
	}
	logPath := filepath.Join(c.cfg.stateDir, "logs", "pods", fmt.Sprintf("%s_%s_%s.log", rt.ns, rt.name, shortUID(rt.uid, 5)))
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", rt.netns}, args...)...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return err
	}
	exited := make(chan struct{})
	c.mu.Lock()
	rt.cmd, rt.exited, rt.started = cmd, exited, true
	c.mu.Unlock()
	go func() {
		err := cmd.Wait()
		lf.Close()
		c.mu.Lock()
		rt.exitErr = err
		term := rt.terminating
		c.mu.Unlock()
		close(exited)
		c.event("process-exited", rt, map[string]any{"pid": cmd.Process.Pid, "status": exitStatus(err), "expected": term})
		if !term {
			c.queue.AddAfter(rt.key, time.Second)
		}
	}()
	c.event("process-started", rt, map[string]any{"pid": cmd.Process.Pid, "cmd": strings.Join(args, " "), "log": logPath})
	c.writeStateFile(rt, cmd.Process.Pid)
	return nil
}

func exitStatus(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

func (c *controller) writeStateFile(rt *podRT, pid int) {
	s := fmt.Sprintf("POD_NAMESPACE=%s\nPOD_NAME=%s\nPOD_UID=%s\nPOD_NODE=%s\nPOD_IP=%s\nPOD_NETNS=%s\nPOD_VETH=%s\nPOD_PID=%d\nPOD_KIND=%s\n",
		rt.ns, rt.name, rt.uid, rt.node, rt.ip, rt.netns, rt.veth, pid, rt.kind)
	_ = os.WriteFile(c.stateFile(rt), []byte(s), 0o644)
}

func (c *controller) removeStateFile(rt *podRT) {
	b, err := os.ReadFile(c.stateFile(rt))
	if err == nil && strings.Contains(string(b), "POD_UID="+rt.uid+"\n") {
		_ = os.Remove(c.stateFile(rt))
	}
	_ = os.RemoveAll(c.podDir(rt))
}

// corefileFor reads the Corefile from the pod's first ConfigMap volume
// (kubeadm's CoreDNS Deployment mounts ConfigMap "coredns", key Corefile).
func (c *controller) corefileFor(ctx context.Context, pod *corev1.Pod) (string, string, error) {
	cmName, key := "coredns", "Corefile"
	for _, v := range pod.Spec.Volumes {
		if v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
			for _, it := range v.ConfigMap.Items {
				if it.Path == "Corefile" {
					key = it.Key
				}
			}
			break
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cm, err := c.client.CoreV1().ConfigMaps(pod.Namespace).Get(cctx, cmName, metav1.GetOptions{})
	if err != nil {
		return "", "", fmt.Errorf("configmap %s/%s: %v", pod.Namespace, cmName, err)
	}
	s, ok := cm.Data[key]
	if !ok {
		return "", "", fmt.Errorf("configmap %s/%s has no key %q", pod.Namespace, cmName, key)
	}
	return s, pod.Namespace + "/" + cmName, nil
}

var reSleep = regexp.MustCompile(`(?:^|[\s;&|])sleep\s+([0-9]+)`)

// preStopSeconds returns the longest preStop sleep among the containers:
// exec `sleep N` (also via sh -c) or the native sleep action.
func preStopSeconds(pod *corev1.Pod) int64 {
	var best int64
	for _, ct := range pod.Spec.Containers {
		if ct.Lifecycle == nil || ct.Lifecycle.PreStop == nil {
			continue
		}
		ps := ct.Lifecycle.PreStop
		var n int64
		switch {
		case ps.Sleep != nil:
			n = ps.Sleep.Seconds
		case ps.Exec != nil:
			if m := reSleep.FindStringSubmatch(strings.Join(ps.Exec.Command, " ")); m != nil {
				n, _ = strconv.ParseInt(m[1], 10, 64)
			}
		}
		if n > best {
			best = n
		}
	}
	return best
}

// preStopExec returns the first container's preStop exec command when it is
// more than a `sleep N` (which preStopSeconds emulates without a process).
func preStopExec(pod *corev1.Pod) []string {
	if pod == nil {
		return nil
	}
	for _, ct := range pod.Spec.Containers {
		if ct.Lifecycle == nil || ct.Lifecycle.PreStop == nil || ct.Lifecycle.PreStop.Exec == nil {
			continue
		}
		cmd := ct.Lifecycle.PreStop.Exec.Command
		if len(cmd) == 0 || reSleepOnly.MatchString(strings.Join(cmd, " ")) {
			continue
		}
		return cmd
	}
	return nil
}

var reSleepOnly = regexp.MustCompile(`^(?:/bin/sh -c )?sleep\s+[0-9]+$`)

// hookEnv is the environment of a hook: the container's env with the downward
// API fields a lab pod has (status.podIP, metadata.name/namespace/uid,
// spec.nodeName) resolved, and KUBECONFIG standing in for the pod's
// ServiceAccount credentials.
func (c *controller) hookEnv(rt *podRT, pod *corev1.Pod) []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"KUBECONFIG=" + filepath.Join(c.cfg.stateDir, "admin.kubeconfig"),
	}
	field := map[string]string{
		"status.podIP":       rt.ip,
		"metadata.name":      rt.name,
		"metadata.namespace": rt.ns,
		"metadata.uid":       rt.uid,
		"spec.nodeName":      rt.node,
	}
	for _, ct := range pod.Spec.Containers {
		for _, e := range ct.Env {
			switch {
			case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
				if v, ok := field[e.ValueFrom.FieldRef.FieldPath]; ok {
					env = append(env, e.Name+"="+v)
				}
			case e.ValueFrom == nil:
				env = append(env, e.Name+"="+e.Value)
			}
		}
		break
	}
	return env
}

// runPreStop runs the hook in the pod's network namespace with its output in
// the pod's log, and kills it at the deadline.
func (c *controller) runPreStop(rt *podRT, pod *corev1.Pod, hook []string, deadline time.Time) {
	started := time.Now()
	c.event("prestop-exec", rt, map[string]any{"cmd": strings.Join(hook, " ")})
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", rt.netns}, hook...)...)
	cmd.Env = c.hookEnv(rt, pod)
	logPath := filepath.Join(c.cfg.stateDir, "logs", "pods", fmt.Sprintf("%s_%s_%s.prestop.log", rt.ns, rt.name, shortUID(rt.uid, 5)))
	if lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
		defer lf.Close()
		cmd.Stdout, cmd.Stderr = lf, lf
	}
	err := cmd.Run()
	c.event("prestop-exited", rt, map[string]any{"status": exitStatus(err), "took_ms": time.Since(started).Milliseconds(), "log": logPath})
}

// waitReady emulates the first successful readiness probe: httpGet or
// tcpSocket from the pod spec; without a probe, the first TCP containerPort
// accepting connections (or just a started process).
func (c *controller) waitReady(pod *corev1.Pod, rt *podRT) error {
	var probe func() error
	desc := "process started"
	for _, ct := range pod.Spec.Containers {
		rp := ct.ReadinessProbe
		if rp == nil {
			continue
		}
		switch {
		case rp.HTTPGet != nil:
			port := resolvePort(rp.HTTPGet.Port, ct)
			path := rp.HTTPGet.Path
			if path == "" {
				path = "/"
			}
			url := fmt.Sprintf("http://%s/%s", net.JoinHostPort(rt.ip, strconv.Itoa(port)), strings.TrimPrefix(path, "/"))
			desc = "httpGet " + url
			hc := &http.Client{Timeout: time.Second}
			probe = func() error {
				resp, err := hc.Get(url)
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode < 200 || resp.StatusCode >= 400 {
					return fmt.Errorf("status %d", resp.StatusCode)
				}
				return nil
			}
		case rp.TCPSocket != nil:
			addr := net.JoinHostPort(rt.ip, strconv.Itoa(resolvePort(rp.TCPSocket.Port, ct)))
			desc = "tcpSocket " + addr
			probe = func() error { return dial(addr) }
		}
		break
	}
	if probe == nil {
		for _, ct := range pod.Spec.Containers {
			for _, p := range ct.Ports {
				if probe == nil && (p.Protocol == "" || p.Protocol == corev1.ProtocolTCP) {
					addr := net.JoinHostPort(rt.ip, strconv.Itoa(int(p.ContainerPort)))
					desc = "tcp connect " + addr + " (no readinessProbe)"
					probe = func() error { return dial(addr) }
				}
			}
		}
	}
	if probe == nil {
		return nil
	}
	var last error
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if c.isTerminating(rt) {
			return fmt.Errorf("terminating")
		}
		if isClosed(rt.exited) {
			return fmt.Errorf("process exited before ready: %v", rt.exitErr)
		}
		if last = probe(); last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not ready after 60s (%s): %v", desc, last)
}

func dial(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}

func resolvePort(p intstr.IntOrString, ct corev1.Container) int {
	if p.Type == intstr.Int {
		return p.IntValue()
	}
	for _, cp := range ct.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort)
		}
	}
	n, _ := strconv.Atoi(p.StrVal)
	return n
}

// terminate emulates the kubelet's graceful termination: preStop, SIGTERM,
// grace period, SIGKILL; then removes the sandbox (namespace, route) and
// finally deletes the Pod object (grace 0), as the kubelet does once the
// containers are gone. pod is nil for a force-deleted pod.
func (c *controller) terminate(rt *podRT, pod *corev1.Pod) {
	rt.mu.Lock() // waits for a start in progress
	defer rt.mu.Unlock()
	ctx := context.Background()
	t0 := time.Now()
	grace := int64(30)
	var preStop int64
	if pod != nil {
		if pod.DeletionGracePeriodSeconds != nil {
			grace = *pod.DeletionGracePeriodSeconds
		} else if pod.Spec.TerminationGracePeriodSeconds != nil {
			grace = *pod.Spec.TerminationGracePeriodSeconds
		}
		preStop = preStopSeconds(pod)
		if preStop > grace {
			preStop = grace
		}
	} else {
		grace = 2
	}
	var delTS string
	if pod != nil && pod.DeletionTimestamp != nil {
		delTS = pod.DeletionTimestamp.UTC().Format(time.RFC3339)
	}
	c.event("terminating", rt, map[string]any{"grace_s": grace, "prestop_s": preStop, "force": pod == nil, "deletionTimestamp": delTS})
	deadline := t0.Add(time.Duration(grace) * time.Second)
	if hook := preStopExec(pod); hook != nil && rt.started && !isClosed(rt.exited) {
		// An exec hook that is not a plain sleep runs for real, in the pod's network
		// namespace, until it exits or the grace period ends (the kubelet's bound).
		c.runPreStop(rt, pod, hook, deadline)
	} else if preStop > 0 && rt.started && !isClosed(rt.exited) {
		c.event("prestop-sleep", rt, map[string]any{"seconds": preStop})
		time.Sleep(time.Duration(preStop) * time.Second)
	}
	// The kubelet gives at least 2 s after SIGTERM.
	if min := time.Now().Add(2 * time.Second); deadline.Before(min) {
		deadline = min
	}
	c.stopProcess(rt, time.Until(deadline))
	if err := teardownPodNetwork(ctx, c.nodeNetns(rt.node), rt.netns, rt.veth, rt.ip); err != nil {
		c.event("netns-delete-failed", rt, map[string]any{"error": err.Error()})
	} else {
		c.event("netns-deleted", rt, map[string]any{"route_removed": rt.ip + "/32"})
	}
	c.removeStateFile(rt)
	c.mu.Lock()
	delete(c.rts, rt.uid)
	rt.done = true
	c.mu.Unlock()
	if pod != nil {
		// Retry while the API server is away (e.g. the apiserver-outage
		// scenario); a later reconcile would also finish the deletion.
		for i := 0; i < 300; i++ {
			err := c.deletePodObject(ctx, pod)
			if err == nil {
				break
			}
			if i == 0 || i%30 == 29 {
				c.event("pod-delete-failed", rt, map[string]any{"error": err.Error(), "attempt": i + 1})
			}
			time.Sleep(time.Second)
		}
	}
	c.event("terminated", rt, map[string]any{"took_ms": time.Since(t0).Milliseconds()})
	c.queue.Add(rt.key)
}

// stopCompleted tears down a pod kwok marked Succeeded/Failed (Job pods).
func (c *controller) stopCompleted(rt *podRT) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	c.stopProcess(rt, 2*time.Second)
	_ = teardownPodNetwork(context.Background(), c.nodeNetns(rt.node), rt.netns, rt.veth, rt.ip)
	c.removeStateFile(rt)
	c.mu.Lock()
	delete(c.rts, rt.uid)
	c.mu.Unlock()
	c.event("completed-pod-stopped", rt, nil)
}

func (c *controller) restart(rt *podRT, pod *corev1.Pod) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if c.isTerminating(rt) || !isClosed(rt.exited) {
		return
	}
	rt.restarts++
	back := time.Duration(1<<min(rt.restarts, 5)) * time.Second
	c.event("process-restart", rt, map[string]any{"restarts": rt.restarts, "backoff_s": back.Seconds()})
	time.Sleep(back)
	if c.isTerminating(rt) {
		return
	}
	if err := c.startProcess(context.Background(), pod, rt); err != nil {
		c.event("process-restart-failed", rt, map[string]any{"error": err.Error()})
	}
}

// stopProcess sends SIGTERM and waits up to grace, then SIGKILL.
func (c *controller) stopProcess(rt *podRT, grace time.Duration) {
	c.mu.Lock()
	cmd, exited := rt.cmd, rt.exited
	c.mu.Unlock()
	if cmd == nil || cmd.Process == nil || isClosed(exited) {
		return
	}
	pid := cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	c.event("sigterm", rt, map[string]any{"pid": pid, "grace_left_s": grace.Seconds()})
	select {
	case <-exited:
		return
	case <-time.After(grace):
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	c.event("sigkill", rt, map[string]any{"pid": pid})
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
	}
}

func (c *controller) deletePodObject(ctx context.Context, pod *corev1.Pod) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	zero := int64(0)
	uid := pod.UID
	err := c.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero,
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	switch {
	case err == nil:
		c.event("pod-object-deleted", nil, map[string]any{"pod": pod.Namespace + "/" + pod.Name, "uid": string(uid)})
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Already gone (or a newer incarnation under the same name).
	default:
		return err
	}
	return nil
}

func (c *controller) annotateHostNetwork(ctx context.Context, pod *corev1.Pod) error {
	if pod.Annotations[ipAnnotation] != "" {
		return nil
	}
	node, err := c.nodes.Get(pod.Spec.NodeName)
	if err != nil {
		return err
	}
	var ip string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ip = a.Address
		}
	}
	if ip == "" {
		return fmt.Errorf("node %s has no InternalIP", node.Name)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{ipAnnotation: ip}}})
	_, err = c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err == nil {
		c.event("hostnetwork-ip-published", nil, map[string]any{"pod": pod.Namespace + "/" + pod.Name, "ip": ip, "note": "no process is run for hostNetwork pods"})
	}
	return err
}

// event writes one JSON line: ts, event, pod fields, extras.
func (c *controller) event(ev string, rt *podRT, extra map[string]any) {
	m := map[string]any{"ts": time.Now().UTC().Format(time.RFC3339Nano), "event": ev}
	if rt != nil {
		m["pod"] = rt.key
		m["uid"] = rt.uid
		m["ip"] = rt.ip
		m["node"] = rt.node
		m["netns"] = rt.netns
	}
	for k, v := range extra {
		m[k] = v
	}
	// Stable order: ts and event first, then the rest sorted.
	keys := make([]string, 0, len(m))
	for k := range m {
		if k != "ts" && k != "event" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("{")
	write := func(k string, v any, first bool) {
		if !first {
			b.WriteString(",")
		}
		kb, _ := json.Marshal(k)
		vb, _ := json.Marshal(v)
		b.Write(kb)
		b.WriteString(":")
		b.Write(vb)
	}
	write("ts", m["ts"], true)
	write("event", m["event"], false)
	for _, k := range keys {
		write(k, m[k], false)
	}
	b.WriteString("}\n")
	c.logMu.Lock()
	_, _ = io.WriteString(c.logW, b.String())
	c.logMu.Unlock()
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
