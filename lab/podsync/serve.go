package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// serveMain listens on every given port on all addresses of the current
// network namespace (the pod's) until SIGTERM/SIGINT, then exits at once,
// like an application without graceful shutdown.
func serveMain(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	pod := fs.String("pod", "", "namespace/name of the pod, written into every answer")
	ip := fs.String("ip", "", "pod IP, written into every answer")
	tcp := fs.String("tcp", "", "comma-separated TCP ports")
	udp := fs.String("udp", "", "comma-separated UDP ports")
	_ = fs.Parse(args)

	ident := fmt.Sprintf("ghostip-lab pod=%s ip=%s", *pod, *ip)
	tcpPorts, err := parsePorts(*tcp)
	if err != nil {
		return err
	}
	udpPorts, err := parsePorts(*udp)
	if err != nil {
		return err
	}
	for _, p := range tcpPorts {
		ln, err := net.Listen("tcp", fmt.Sprintf(":%d", p))
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "%s serve: listening tcp :%d\n", time.Now().UTC().Format(time.RFC3339Nano), p)
		go acceptLoop(ln, ident)
	}
	for _, p := range udpPorts {
		pc, err := net.ListenPacket("udp", fmt.Sprintf(":%d", p))
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "%s serve: listening udp :%d\n", time.Now().UTC().Format(time.RFC3339Nano), p)
		go echoLoop(pc)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	s := <-sig
	fmt.Fprintf(os.Stderr, "%s serve: got %v, exiting\n", time.Now().UTC().Format(time.RFC3339Nano), s)
	return nil
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

func acceptLoop(ln net.Listener, ident string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		go handleConn(c, ident)
	}
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
	for _, m := range []string{"GET ", "HEAD ", "POST ", "PUT ", "OPTIONS "} {
		if strings.HasPrefix(line, m) {
			fmt.Fprintf(c, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
			return
		}
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
