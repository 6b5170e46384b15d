package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/backend/fake"
	"sbx.dev/sbx/internal/sandbox"
)

func TestPtyParams(t *testing.T) {
	for _, c := range []struct {
		query, want string // want: a fragment of the error; "" for none
	}{
		{"", ""},
		{"argv=python3&rows=50&cols=200", ""},
		{"cmd=top&env=A=1&env=B=2&cwd=/tmp&timeout=30", ""},
		{"process=p1&rows=10", ""},
		{"rows=0", "rows: 0 is outside [1, 1000]"},
		{"cols=1001", "cols: 1001 is outside [1, 1000]"},
		{"rows=x", `rows: "x" is not an integer`},
		{"rows=1&rows=2", "rows: given 2 times"},
		{"cmd=a&argv=b", "give cmd (run by a shell) or argv (run as is), not both"},
		{"process=p1&cmd=top", "process: attaches to a running terminal"},
		{"env=NOEQUALS", `env: "NOEQUALS" is not K=V`},
		{"timeout=0", "timeout: 0 is outside"},
	} {
		r := httptest.NewRequest("GET", "/v1/sandboxes/x/pty?"+c.query, nil)
		_, err := ptyParamsOf(r)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v", c.query, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: error %v, want one saying %q", c.query, err, c.want)
		}
	}
	r := httptest.NewRequest("GET", "/v1/sandboxes/x/pty", nil)
	p, _ := ptyParamsOf(r)
	if !slices.Equal(p.exec.Argv, []string{"/bin/sh", "-c", ptyLoginShell}) || p.exec.Pty == nil || *p.exec.Pty != p.size || p.size.Rows != 24 || p.size.Cols != 80 {
		t.Errorf("defaults = %+v, want the login shell at 24×80", p)
	}
}

func TestPtyProtocolKey(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Sec-WebSocket-Protocol", "sbx.pty.v1, bearer.sbx_abc")
	if got := protocolBearer(r); got != "Bearer sbx_abc" {
		t.Errorf("protocolBearer = %q", got)
	}
	r.Header.Set("Sec-WebSocket-Protocol", "bearer.")
	if got := protocolBearer(r); got != "" {
		t.Errorf("an empty bearer. = %q, want none", got)
	}
}

// ptyDial opens the terminal route of sandbox id with query q.
func (e *apiEnv) ptyDial(id, q string, opts *websocket.DialOptions) (*websocket.Conn, *http.Response, error) {
	e.t.Helper()
	if opts == nil {
		opts = &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + e.token}}}
	}
	ctx, cancel := context.WithTimeout(e.t.Context(), time.Minute)
	defer cancel()
	return websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.srv.URL, "http")+"/v1/sandboxes/"+id+"/pty?"+q, opts)
}

// readPty reads one message of c.
func readPty(t *testing.T, c *websocket.Conn) (websocket.MessageType, []byte, openapi.PtyMessage) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	typ, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("reading the terminal: %v", err)
	}
	var m openapi.PtyMessage
	if typ == websocket.MessageText {
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("control message %q: %v", b, err)
		}
	}
	return typ, b, m
}

func TestPtyRoute(t *testing.T) {
	e := newAPI(t, Options{})
	e.d.Script("greet", fake.Run{Output: []fake.Output{{Data: []byte("hi\r\n")}}, ExitCode: 3})
	id := e.sandbox(`{}`)

	t.Run("started, output, exit", func(t *testing.T) {
		c, _, err := e.ptyDial(id, "argv=greet", &websocket.DialOptions{
			Subprotocols: []string{openapi.PtySubprotocol, openapi.PtyBearerPrefix + e.token}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		if c.Subprotocol() != openapi.PtySubprotocol {
			t.Errorf("subprotocol %q, want %s only", c.Subprotocol(), openapi.PtySubprotocol)
		}
		if _, b, m := readPty(t, c); m.Type != openapi.PtyStarted || m.Process == "" || m.PID == 0 {
			t.Fatalf("first message %q, want started", b)
		}
		if typ, b, _ := readPty(t, c); typ != websocket.MessageBinary || string(b) != "hi\r\n" {
			t.Errorf("output %v %q", typ, b)
		}
		if _, b, m := readPty(t, c); m.Type != openapi.PtyExit || m.ExitCode == nil || *m.ExitCode != 3 || m.Reason != "exited" {
			t.Errorf("last message %q, want exit 3", b)
		}
		if _, _, err := c.Read(t.Context()); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
			t.Errorf("after the exit: %v, want a normal close", err)
		}
	})

	t.Run("killed when the socket closes", func(t *testing.T) {
		c, _, err := e.ptyDial(id, "argv=sleep", nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _, m := readPty(t, c)
		c.Close(websocket.StatusNormalClosure, "")
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
			p, err := e.m.Process(t.Context(), sandbox.ID(id), m.Process)
			if err == nil && !p.Running && p.Result.Signal == 9 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the terminal's process %+v (%v) was not killed with its socket", p, err)
			}
		}
	})

	t.Run("refused before the upgrade", func(t *testing.T) {
		_, resp, err := e.ptyDial(id, "rows=0", nil)
		if err == nil || resp == nil || resp.StatusCode != 400 {
			t.Fatalf("rows=0: %v %v, want 400", resp, err)
		}
		_, resp, _ = e.ptyDial("aaaaaaaaaaaaaaaaaaaaaaaaaa", "", nil)
		if resp == nil || resp.StatusCode != 404 {
			t.Errorf("an unknown sandbox: %v, want 404", resp)
		}
		_, resp, _ = e.ptyDial(id, "", &websocket.DialOptions{Subprotocols: []string{openapi.PtyBearerPrefix + e.token}})
		if resp == nil || resp.StatusCode != 400 {
			t.Errorf("a key without %s: %v, want 400", openapi.PtySubprotocol, resp)
		}
		_, resp, _ = e.ptyDial(id, "", &websocket.DialOptions{})
		if resp == nil || resp.StatusCode != 401 {
			t.Errorf("no key: %v, want 401", resp)
		}
	})

	t.Run("a bad control message is answered, the terminal goes on", func(t *testing.T) {
		c, _, err := e.ptyDial(id, "argv=sleep", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		_, _, started := readPty(t, c)
		for _, msg := range []string{`{"type":"resize","rows":0,"cols":80}`, `{"type":"dance"}`, `not json`} {
			if err := c.Write(t.Context(), websocket.MessageText, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			if _, b, m := readPty(t, c); m.Type != openapi.PtyError || m.Error == nil || m.Error.SandboxID != id {
				t.Errorf("%s: answer %q, want an error naming the sandbox", msg, b)
			}
		}
		c.Write(t.Context(), websocket.MessageText, []byte(`{"type":"signal","signal":"KILL"}`))
		if _, b, m := readPty(t, c); m.Type != openapi.PtyExit || *m.ExitCode != 137 || string(m.Signal) != "9" {
			t.Errorf("after SIGKILL: %q, want exit 137 signal 9", b)
		}
		if p, err := e.m.Process(t.Context(), sandbox.ID(id), started.Process); err != nil || p.Running {
			t.Errorf("the process after SIGKILL: %+v %v", p, err)
		}
	})

	t.Run("shutdown kills terminals", func(t *testing.T) {
		c, _, err := e.ptyDial(id, "argv=sleep", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		_, _, m := readPty(t, c)
		closed := make(chan error, 1)
		go func() { // a client reads all along: it answers the close
			_, _, err := c.Read(context.Background())
			closed <- err
		}()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if err := CloseTerminals(ctx, e.s); err != nil {
			t.Fatal(err)
		}
		if p, err := e.m.Process(t.Context(), sandbox.ID(id), m.Process); err != nil || p.Running {
			t.Errorf("after CloseTerminals the process is %+v (%v), want killed", p, err)
		}
		if err := <-closed; websocket.CloseStatus(err) != websocket.StatusGoingAway {
			t.Errorf("the socket ended with %v, want going away", err)
		}
		if _, resp, _ := e.ptyDial(id, "argv=sleep", nil); resp == nil || resp.StatusCode != 503 {
			t.Errorf("a terminal after shutdown: %v, want 503", resp)
		}
	})
}
