package service

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	pb "sbx.dev/sbx/api/agent/sbxagent"
	"sbx.dev/sbx/api/agent/sbxagent/sbxagentconnect"
	"sbx.dev/sbx/internal/agent/files"
	"sbx.dev/sbx/internal/agent/process"
)

// writeLog records the server's writes to its connections.
type writeLog struct {
	mu     sync.Mutex
	writes [][]byte
}

func (l *writeLog) take() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.writes
	l.writes = nil
	return w
}

type loggedConn struct {
	net.Conn
	log *writeLog
}

func (c loggedConn) Write(b []byte) (int, error) {
	c.log.mu.Lock()
	c.log.writes = append(c.log.writes, bytes.Clone(b))
	c.log.mu.Unlock()
	return c.Conn.Write(b)
}

type loggedListener struct {
	net.Listener
	log *writeLog
}

func (l loggedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return loggedConn{c, l.log}, nil
}

// holdServer serves the agent's handler over HTTP/1.1, as to the daemon,
// logging what it writes.
func holdServer(t *testing.T) (sbxagentconnect.AgentClient, *writeLog) {
	t.Helper()
	table := process.NewTable(process.Config{})
	t.Cleanup(table.Close)
	tree, err := files.New("/", "/")
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}}, table, tree)
	srv := httptest.NewUnstartedServer(s.Handler())
	log := &writeLog{}
	srv.Listener = loggedListener{srv.Listener, log}
	srv.Start()
	t.Cleanup(srv.Close)
	return sbxagentconnect.NewAgentClient(srv.Client(), srv.URL), log
}

// messages parses the chunked body of the Connect stream in w (one write):
// its messages and whether it ends the stream and the body.
func messages(t *testing.T, w []byte) (events []*pb.ExecEvent, endStream, endBody bool) {
	t.Helper()
	chunked := true
	if i := bytes.Index(w, []byte("\r\n\r\n")); bytes.HasPrefix(w, []byte("HTTP/1.1 ")) && i >= 0 {
		// A response written whole at the handler's end has a length, no chunks.
		chunked = bytes.Contains(w[:i], []byte("Transfer-Encoding: chunked"))
		w = w[i+4:]
	}
	var body []byte
	if !chunked {
		body, w, endBody = w, nil, true
	}
	for len(w) > 0 {
		line, rest, ok := bytes.Cut(w, []byte("\r\n"))
		n, err := strconv.ParseUint(string(line), 16, 32)
		if !ok || err != nil || uint64(len(rest)) < n+2 {
			t.Fatalf("not a chunk: %q", w)
		}
		if n == 0 {
			endBody = true
			break
		}
		body, w = append(body, rest[:n]...), rest[n+2:]
	}
	for len(body) >= 5 {
		flags, n := body[0], binary.BigEndian.Uint32(body[1:5])
		msg := body[5 : 5+n]
		body = body[5+n:]
		if flags&2 != 0 {
			endStream = true
			continue
		}
		ev := &pb.ExecEvent{}
		if err := proto.Unmarshal(msg, ev); err != nil {
			t.Fatalf("unmarshalling %q: %v", msg, err)
		}
		events = append(events, ev)
	}
	return events, endStream, endBody
}

// A process's result, the stream's end and the body's end leave the agent
// in one write, not three.
func TestExecEndsInOneWrite(t *testing.T) {
	cl, log := holdServer(t)
	st, err := cl.Exec(t.Context(), connect.NewRequest(&pb.ExecRequest{Argv: []string{"sh", "-c", "echo hi"}, Stream: true}))
	if err != nil {
		t.Fatal(err)
	}
	for st.Receive() {
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	st.Close()
	writes := log.take()
	if len(writes) == 0 {
		t.Fatal("no writes")
	}
	events, endStream, endBody := messages(t, writes[len(writes)-1])
	if len(events) != 1 || events[0].GetResult() == nil || !endStream || !endBody {
		t.Errorf("the last write holds %d events (%v), the stream's end %v, the body's end %v; want the result and both ends", len(events), events, endStream, endBody)
	}
}

// A caller that takes no output gets a short process's started event with
// its result, in the response's one write.
func TestCollectedExecInOneWrite(t *testing.T) {
	defer func(d time.Duration) { startedHold = d }(startedHold)
	startedHold = time.Hour
	cl, log := holdServer(t)
	st, err := cl.Exec(t.Context(), connect.NewRequest(&pb.ExecRequest{Argv: []string{"true"}}))
	if err != nil {
		t.Fatal(err)
	}
	for st.Receive() {
	}
	st.Close()
	writes := log.take()
	if len(writes) != 1 {
		t.Fatalf("%d writes, want 1: %q", len(writes), writes)
	}
	events, endStream, endBody := messages(t, writes[0])
	if len(events) != 2 || events[0].GetStarted() == nil || events[1].GetResult() == nil || !endStream || !endBody {
		t.Errorf("the write holds %v, the stream's end %v, the body's end %v; want started, the result and both ends", events, endStream, endBody)
	}
}

// Held no longer than startedHold: a process that goes on is reported
// started while it runs (its stdin is closed only once the caller has
// heard so; without the release this call would never end).
func TestCollectedExecReleasesStarted(t *testing.T) {
	defer func(d time.Duration) { startedHold = d }(startedHold)
	startedHold = time.Millisecond
	cl, _ := holdServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, err := cl.Exec(ctx, connect.NewRequest(&pb.ExecRequest{Argv: []string{"sh", "-c", "read x"}, KeepStdinOpen: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !st.Receive() || st.Msg().GetStarted() == nil {
		t.Fatalf("first event %v (%v), want started", st.Msg(), st.Err())
	}
	if _, err := cl.WriteStdin(ctx, connect.NewRequest(&pb.WriteStdinRequest{Id: st.Msg().GetStarted().GetId(), Data: []byte("x\n"), Eof: true})); err != nil {
		t.Fatal(err)
	}
	if !st.Receive() || st.Msg().GetResult().GetExitCode() != 0 {
		t.Fatalf("next event %v (%v), want the result, exit 0", st.Msg(), st.Err())
	}
	if st.Receive() {
		t.Errorf("an event after the result: %v", st.Msg())
	}
}

// The held writer stays a Flusher for Connect, and what it held leaves
// when released.
func TestHeldWriter(t *testing.T) {
	rec := httptest.NewRecorder()
	hw := &heldWriter{ResponseWriter: rec, held: true}
	var _ http.Flusher = hw
	hw.Write([]byte("x"))
	hw.Flush()
	if rec.Flushed {
		t.Error("flushed while held")
	}
	ctx := context.WithValue(context.Background(), heldKey{}, hw)
	release(ctx)
	if !rec.Flushed || hw.held {
		t.Errorf("after release: flushed %v, held %v", rec.Flushed, hw.held)
	}
}
