package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// serveMain listens on every given port on all addresses of the current
// network namespace (the pod's) until SIGTERM/SIGINT. Without --drain it then
// exits at once, like an application without graceful shutdown. With
// --drain D it shuts down like a service with a drain phase: it closes its
// listeners (new connections to the pod IP are refused while the IP is still
// routed), finishes the requests in progress, stops reading further requests
// from open connections, and exits D later without closing them: the kernel
// then resets every connection holding an unread request and sends FIN on
// the idle ones.
func serveMain(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	pod := fs.String("pod", "", "namespace/name of the pod, written into every answer")
	ip := fs.String("ip", "", "pod IP, written into every answer")
	tcp := fs.String("tcp", "", "comma-separated TCP ports")
	udp := fs.String("udp", "", "comma-separated UDP ports")
	keepalive := fs.Bool("keepalive", false, "answer HTTP/1.1 requests on kept-alive connections (idle timeout 60 s)")
	drain := fs.Duration("drain", 0, "after SIGTERM: close the listeners, stop reading requests, exit this much later")
	_ = fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	if *drain < 0 || *drain > 10*time.Minute {
		return fmt.Errorf("serve: --drain must be 0..10m")
	}

	s := &server{ident: fmt.Sprintf("ghostip-lab pod=%s ip=%s", *pod, *ip), keepalive: *keepalive,
		conns: map[net.Conn]bool{}, draining: make(chan struct{})}
	tcpPorts, err := parsePorts(*tcp)
	if err != nil {
		return err
	}
	udpPorts, err := parsePorts(*udp)
	if err != nil {
		return err
	}
	var lns []net.Listener
	for _, p := range tcpPorts {
		ln, err := net.Listen("tcp", fmt.Sprintf(":%d", p))
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "%s serve: listening tcp :%d\n", stamp(), p)
		lns = append(lns, ln)
		go s.acceptLoop(ln)
	}
	for _, p := range udpPorts {
		pc, err := net.ListenPacket("udp", fmt.Sprintf(":%d", p))
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "%s serve: listening udp :%d\n", stamp(), p)
		go echoLoop(pc)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	got := <-sig
	if *drain == 0 {
		fmt.Fprintf(os.Stderr, "%s serve: got %v, exiting\n", stamp(), got)
		return nil
	}
	for _, ln := range lns {
		_ = ln.Close()
	}
	open := s.startDrain()
	fmt.Fprintf(os.Stderr, "%s serve: got %v, listeners closed, draining %d connections for %v\n", stamp(), got, open, *drain)
	time.Sleep(*drain)
	fmt.Fprintf(os.Stderr, "%s serve: drain over, exiting with %d connections open\n", stamp(), s.open())
	return nil
}

func stamp() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// server is the TCP side of `serve`.
type server struct {
	ident     string
	keepalive bool
	mu        sync.Mutex
	conns     map[net.Conn]bool // open connections; true while a request is being answered
	draining  chan struct{}
}

func (s *server) isDraining() bool { return isClosed(s.draining) }

// startDrain stops reading: it wakes every connection waiting for a request
// (it then parks without closing); answers in progress complete first.
func (s *server) startDrain() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.draining)
	for c, busy := range s.conns {
		if !busy {
			_ = c.SetReadDeadline(time.Now())
		}
	}
	return len(s.conns)
}

func (s *server) open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// setBusy marks a connection as answering a request (busy) or waiting for
// one; it returns false when the server is draining and the connection must
// not read again.
func (s *server) setBusy(c net.Conn, busy bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !busy && s.isDraining() {
		return false
	}
	s.conns[c] = busy
	return true
}

func (s *server) forget(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	_ = c.Close()
}

func (s *server) acceptLoop(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.isDraining() {
				return
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if s.keepalive {
			go s.handleKeepAlive(c)
		} else {
			go handleConn(c, s.ident)
		}
	}
}

// handleKeepAlive answers HTTP/1.1 requests on one connection until the
// client closes it, asks to (Connection: close, HTTP/1.0), or stays idle 60 s;
// a client that sends no HTTP request gets the one-line answer, as without
// --keepalive. While draining the connection is left open and unread.
func (s *server) handleKeepAlive(c net.Conn) {
	r := bufio.NewReader(c)
	for first := true; ; first = false {
		if !s.setBusy(c, false) {
			<-make(chan struct{}) // draining: never read again; the exit closes it
		}
		wait := 60 * time.Second
		if first {
			wait = 300 * time.Millisecond
		}
		_ = c.SetReadDeadline(time.Now().Add(wait))
		if s.isDraining() { // startDrain may have come before this deadline
			<-make(chan struct{})
		}
		line, err := r.ReadString('\n')
		// The drain's deadline wakes this read, but a request arriving in the
		// same instant can still be returned by it: a line read once the drain
		// has begun is left unanswered as well.
		if s.isDraining() {
			<-make(chan struct{})
		}
		if !isHTTPRequest(line) {
			if first {
				_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
				_, _ = c.Write([]byte(s.ident + "\n"))
			}
			s.forget(c)
			return
		}
		if !s.setBusy(c, true) {
			<-make(chan struct{})
		}
		closeAfter, err := readHeaders(r, line)
		if err != nil {
			s.forget(c)
			return
		}
		body := s.ident + "\n"
		conn := "keep-alive"
		if closeAfter {
			conn = "close"
		}
		_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: %s\r\n\r\n%s",
			len(body), conn, body); err != nil || closeAfter {
			s.forget(c)
			return
		}
	}
}

var httpMethods = []string{"GET ", "HEAD ", "POST ", "PUT ", "OPTIONS "}

func isHTTPRequest(line string) bool {
	for _, m := range httpMethods {
		if strings.HasPrefix(line, m) {
			return true
		}
	}
	return false
}

// readHeaders consumes the header block (at most 100 lines) and a body of
// up to 64 KiB; it says whether the connection closes after the answer.
func readHeaders(r *bufio.Reader, requestLine string) (bool, error) {
	closeAfter := strings.Contains(requestLine, "HTTP/1.0")
	length := 0
	for i := 0; ; i++ {
		if i == 100 {
			return true, fmt.Errorf("too many header lines")
		}
		h, err := r.ReadString('\n')
		if err != nil {
			return true, err
		}
		h = strings.TrimRight(h, "\r\n")
		if h == "" {
			break
		}
		k, v, _ := strings.Cut(h, ":")
		v = strings.TrimSpace(v)
		switch strings.ToLower(k) {
		case "connection":
			closeAfter = strings.EqualFold(v, "close")
		case "content-length":
			if n, err := strconv.Atoi(v); err == nil && n >= 0 && n <= 64<<10 {
				length = n
			}
		}
	}
	_, err := io.CopyN(io.Discard, r, int64(length))
	return closeAfter, err
}

func parsePorts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := strconv.Atoi(f)
		if err != nil || p <= 0 || p > 65535 {
			return nil, fmt.Errorf("bad port %q", f)
		}
		out = append(out, p)
	}
	return out, nil
}

// handleConn answers an HTTP request with a tiny HTTP response, and anything
// else (including a client that sends nothing) with one line.
func handleConn(c net.Conn, ident string) {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	r := bufio.NewReader(c)
	line, _ := r.ReadString('\n')
	_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	body := ident + "\n"
	if isHTTPRequest(line) {
		fmt.Fprintf(c, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
		return
	}
	_, _ = c.Write([]byte(body))
}

func echoLoop(pc net.PacketConn) {
	buf := make([]byte, 65535)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		_, _ = pc.WriteTo(buf[:n], addr)
	}
}
