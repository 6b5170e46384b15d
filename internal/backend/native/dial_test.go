package native

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

// greeter is a sandbox's program in the DialPort tests: it listens on
// 127.0.0.1:<argv[1]> in the sandbox's network and greets every connection.
const greeter = `
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(4096)
while True:
    c, _ = s.accept()
    try:
        c.sendall(b"sandbox\n")
    except OSError:
        pass
    c.close()
`

// hostGreeter listens on the host's loopback and greets each connection
// with "host": a dial that lands here did not enter the sandbox.
func hostGreeter(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("host\n"))
			c.Close()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// startGreeter starts a sandbox whose program greets on port and waits,
// boundedly, until DialPort reaches it.
func startGreeter(t testing.TB, d *Driver, port int) sandbox.ID {
	t.Helper()
	id := sandbox.NewID()
	if _, err := d.Start(t.Context(), spec(id)); err != nil {
		t.Fatalf("Start = %v", err)
	}
	t.Cleanup(func() {
		if err := d.Destroy(context.Background(), id); err != nil {
			t.Errorf("Destroy = %v", err)
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := d.DialPort(t.Context(), id, port)
		if err == nil {
			c.Close()
			return id
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			t.Fatalf("DialPort(%d) while the greeter starts = %v", port, err)
		}
	}
}

func readLine(t testing.TB, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the greeting: %v", err)
	}
	return line
}

func TestDialPort(t *testing.T) {
	port := hostGreeter(t)
	d, _ := openTest(t, "/usr/bin/python3", "-c", greeter, strconv.Itoa(port))
	id := startGreeter(t, d, port)

	// The port number is the host's greeter's too: the answer says which
	// network the connection reached.
	c, err := d.DialPort(t.Context(), id, port)
	if err != nil {
		t.Fatalf("DialPort(%s, %d) = %v", id, port, err)
	}
	if got := readLine(t, c); got != "sandbox\n" {
		t.Errorf("DialPort(%s, %d) reached %q, want the sandbox's greeter", id, port, got)
	}
	c.Close()
	// Control: the same port on the host's loopback is the host's greeter.
	hc, err := net.Dial("tcp4", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	if got := readLine(t, hc); got != "host\n" {
		t.Errorf("control: the host's port %d answered %q", port, got)
	}
	hc.Close()

	closed := port + 1
	if closed > 65535 {
		closed = port - 1
	}
	for _, tc := range []struct {
		name string
		id   sandbox.ID
		port int
		want error
	}{
		{"nothing listening", id, closed, syscall.ECONNREFUSED},
		{"port 0", id, 0, sandbox.ErrInvalid},
		{"port 65536", id, 65536, sandbox.ErrInvalid},
		{"unknown sandbox", sandbox.NewID(), port, sandbox.ErrNotFound},
		{"malformed id", "../x", port, sandbox.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := d.DialPort(t.Context(), tc.id, tc.port)
			if err == nil {
				c.Close()
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("DialPort(%s, %d) = %v, want %v", tc.id, tc.port, err, tc.want)
			}
		})
	}

	if err := d.Destroy(t.Context(), id); err != nil {
		t.Fatalf("Destroy = %v", err)
	}
	if c, err := d.DialPort(t.Context(), id, port); !errors.Is(err, sandbox.ErrNotFound) {
		if err == nil {
			c.Close()
		}
		t.Errorf("DialPort after Destroy = %v, want not found", err)
	}
}

// A connect that gets no answer ends with ctx: the sandbox's listener has a
// full backlog and is never accepted from.
func TestDialPortHonoursContext(t *testing.T) {
	const stuck = `
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(0)
time.sleep(1000)
`
	d, _ := openTest(t, "/usr/bin/python3", "-c", stuck, "8001")
	id := sandbox.NewID()
	if _, err := d.Start(t.Context(), spec(id)); err != nil {
		t.Fatalf("Start = %v", err)
	}
	defer d.Destroy(context.Background(), id)
	// Fill the backlog: connections nobody accepts, until one hangs.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for deadline := time.Now().Add(30 * time.Second); ; {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		c, err := d.DialPort(ctx, id, 8001)
		cancel()
		if err == nil {
			held = append(held, c)
			if len(held) > 64 {
				t.Fatalf("64 connections made to a listener with backlog 0 that never accepts")
			}
			continue
		}
		// The dial ended with its context: as the context's error, or as
		// net's own timeout when the deadline fired inside connect.
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
			return
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			t.Fatalf("DialPort = %v, want it to end with its context", err)
		}
		time.Sleep(20 * time.Millisecond) // not listening yet
	}
}

// BenchmarkDialPort measures a dial into a sandbox's network namespace: a
// thread made and thrown away, setns, connect on loopback.
func BenchmarkDialPort(b *testing.B) {
	d, _ := openTest(b, "/usr/bin/python3", "-c", greeter, "8000")
	id := startGreeter(b, d, 8000)
	ctx := b.Context()
	for b.Loop() {
		c, err := d.DialPort(ctx, id, 8000)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
