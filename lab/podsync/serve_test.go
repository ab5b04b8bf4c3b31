package main

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func startServer(t *testing.T, keepalive bool) (*server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &server{ident: "ghostip-lab pod=t/p ip=127.0.0.1", keepalive: keepalive,
		conns: map[net.Conn]bool{}, draining: make(chan struct{})}
	go s.acceptLoop(ln)
	return s, ln.Addr().String()
}

func dialServer(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// get sends one GET on c and reads the answer's status line, headers and body.
func get(t *testing.T, c net.Conn, r *bufio.Reader, extra string) (string, error) {
	t.Helper()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n"+extra+"\r\n"); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	var b strings.Builder
	for {
		l, err := r.ReadString('\n')
		b.WriteString(l)
		if err != nil {
			return b.String(), err
		}
		if l == "\r\n" {
			break
		}
	}
	body, err := r.ReadString('\n')
	return b.String() + body, err
}

func TestKeepAliveAnswersSeveralRequestsOnOneConnection(t *testing.T) {
	_, addr := startServer(t, true)
	c := dialServer(t, addr)
	r := bufio.NewReader(c)
	for i := 0; i < 3; i++ {
		a, err := get(t, c, r, "")
		if err != nil || !strings.HasPrefix(a, "HTTP/1.1 200 OK") || !strings.Contains(a, "Connection: keep-alive") ||
			!strings.HasSuffix(a, "ip=127.0.0.1\n") {
			t.Fatalf("request %d: %q %v", i, a, err)
		}
	}
	if a, err := get(t, c, r, "Connection: close\r\n"); err != nil || !strings.Contains(a, "Connection: close") {
		t.Fatalf("close: %q %v", a, err)
	}
	if _, err := r.ReadByte(); err != io.EOF {
		t.Fatalf("connection not closed after Connection: close: %v", err)
	}
}

func TestKeepAliveGreetsAClientThatSendsNothing(t *testing.T) {
	_, addr := startServer(t, true)
	c := dialServer(t, addr)
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "ghostip-lab pod=t/p ip=127.0.0.1\n" {
		t.Fatalf("%q %v", b, err)
	}
}

func TestDrainLeavesRequestsOnOpenConnectionsUnread(t *testing.T) {
	s, addr := startServer(t, true)
	c := dialServer(t, addr)
	r := bufio.NewReader(c)
	if _, err := get(t, c, r, ""); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the handler waits for the next request
	if n := s.startDrain(); n != 1 {
		t.Fatalf("open connections at drain: %d", n)
	}
	a, err := get(t, c, r, "")
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() || a != "" {
		t.Fatalf("a request during the drain was answered: %q %v", a, err)
	}
	if s.open() != 1 {
		t.Fatalf("the connection was closed during the drain")
	}
}
