package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"

	"sbx.dev/sbx/api/openapi"
)

// ptyDaemon adds a stand-in of the terminal route to d: it echoes what it
// is sent, as a terminal does, until ^D, then exits as exit says.
type ptyDaemon struct {
	*daemon
	mu      sync.Mutex
	queries []url.Values
	exit    openapi.PtyMessage
}

func newPtyDaemon(t *testing.T) *ptyDaemon {
	pd := &ptyDaemon{daemon: newDaemon(t)}
	inner := pd.srv.Config.Handler
	pd.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "GET" && strings.HasSuffix(r.URL.Path, "/pty") && r.Header.Get("Authorization") == "Bearer key" {
			pd.serve(w, r)
			return
		}
		inner.ServeHTTP(w, r)
	})
	return pd
}

func (pd *ptyDaemon) serve(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/sandboxes/"), "/pty")
	if !known(id) {
		apiError(w, 404, "not_found", id, "exec "+id+": sandbox not found")
		return
	}
	pd.mu.Lock()
	pd.queries = append(pd.queries, r.URL.Query())
	exit := pd.exit
	pd.mu.Unlock()
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{openapi.PtySubprotocol}})
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx := r.Context()
	send := func(m openapi.PtyMessage) {
		b, _ := json.Marshal(m)
		c.Write(ctx, websocket.MessageText, b)
	}
	send(openapi.PtyMessage{Type: openapi.PtyStarted, Process: "p1", PID: 9})
	for {
		typ, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageBinary {
			continue
		}
		in, eot := bytes.CutSuffix(b, []byte{eot})
		c.Write(ctx, websocket.MessageBinary, bytes.ReplaceAll(in, []byte("\n"), []byte("\r\n")))
		if eot {
			send(exit)
			c.Close(websocket.StatusNormalClosure, "")
			return
		}
	}
}

func TestExecTTY(t *testing.T) {
	d := newPtyDaemon(t)
	code3 := 3
	d.exit = openapi.PtyMessage{Type: openapi.PtyExit, ExitCode: &code3, Reason: "exited"}
	out, errOut, code := d.sbx("echo hi\n", "exec", "-t", "--env", "A=1", "--cwd", "/w", id1, "--", "bash", "-l")
	if code != 3 || out != "echo hi\r\n" {
		t.Errorf("exec -t = %d %q (stderr %q), want 3 and the echo", code, out, errOut)
	}
	q := d.queries[0]
	if !slices.Equal(q["argv"], []string{"bash", "-l"}) || q.Get("env") != "A=1" || q.Get("cwd") != "/w" || q.Has("rows") || q.Has("timeout") {
		t.Errorf("the terminal asked for %v; want argv, env and cwd, and no size (stdin is no terminal)", q)
	}

	code124 := 124
	d.exit = openapi.PtyMessage{Type: openapi.PtyExit, ExitCode: &code124, Reason: "timeout"}
	if _, _, code := d.sbx("", "exec", "--tty", "--timeout", "9", id1, "--", "sleep", "99"); code != 124 {
		t.Errorf("exec --tty ending on its timeout = %d, want 124", code)
	}
	if q := d.queries[1]; q.Get("timeout") != "9" {
		t.Errorf("the timeout was not passed on: %v", q)
	}
	code137 := 137
	d.exit = openapi.PtyMessage{Type: openapi.PtyExit, ExitCode: &code137, Reason: "killed", Signal: json.RawMessage("9")}
	if _, _, code := d.sbx("", "exec", "-t", id1, "--", "sleep", "99"); code != 137 {
		t.Errorf("exec -t killed = %d, want 137", code)
	}

	if _, errOut, code := d.sbx("", "exec", "-t", id2[:25]+"x", "--", "sh"); code != 125 || !strings.Contains(errOut, "sandbox not found") {
		t.Errorf("exec -t on an unknown sandbox = %d %q, want 125 naming it", code, errOut)
	}
	if _, errOut, code := d.sbx("", "exec", "-t", "--json", id1, "--", "sh"); code != 125 || !strings.Contains(errOut, "-t and --json") {
		t.Errorf("exec -t --json = %d %q, want a misuse", code, errOut)
	}
}
