package main

import (
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"
)

// serveA answers every query on a loopback UDP socket with one A record (10.96.0.1) until
// the test ends; it returns the socket's address.
func serveA(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for i := 0; i < 64; i++ {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := buf[:n]
			if n < 12 {
				continue
			}
			// Header: same ID, QR + RD + RA, one question, one answer.
			resp := append([]byte{}, q[:2]...)
			resp = append(resp, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0)
			// The question as asked: its name (labels up to the zero byte), type and class.
			end := 12
			for end < n && q[end] != 0 {
				end += int(q[end]) + 1
			}
			if end+5 > n {
				continue
			}
			resp = append(resp, q[12:end+5]...)
			// The answer: a pointer to the name at offset 12, A, IN, TTL 5, 4 bytes.
			resp = append(resp, 0xc0, 12, 0, 1, 0, 1)
			resp = binary.BigEndian.AppendUint32(resp, 5)
			resp = append(resp, 0, 4, 10, 96, 0, 1)
			_, _ = pc.WriteTo(resp, from)
		}
	}()
	return pc.LocalAddr().String()
}

func TestLookupAnswered(t *testing.T) {
	addr := serveA(t)
	if err := lookupMain([]string{"--server", addr, "--name", "kubernetes.default.svc.cluster.local", "--timeout", "2s"}); err != nil {
		t.Fatalf("lookup against a server that answers: %v", err)
	}
}

func TestLookupFailsWithinItsDeadline(t *testing.T) {
	// A UDP socket that never answers: the lookup gives up at its deadline.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	start := time.Now()
	err = lookupMain([]string{"--server", pc.LocalAddr().String(), "--name", "x.cluster.local", "--timeout", "300ms"})
	if err == nil {
		t.Fatal("lookup without an answer succeeded")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("lookup took %s past its 300ms deadline", took)
	}
}

func TestLookupNeedsServerAndName(t *testing.T) {
	for _, args := range [][]string{{"--name", "x"}, {"--server", "127.0.0.1:53"}, {"--server", "nope", "--name", "x"}} {
		if err := lookupMain(args); err == nil || !strings.Contains(err.Error(), "lookup") {
			t.Errorf("%v: want an error, got %v", args, err)
		}
	}
}
