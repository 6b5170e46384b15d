package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// ptyWait bounds every wait of these tests: an upper bound only, never a
// timing assertion.
const ptyWait = 60 * time.Second

// ptyMsg is a control message of the terminal route, as the wire has it.
type ptyMsg struct {
	Type     string          `json:"type"`
	Process  string          `json:"process,omitempty"`
	PID      int             `json:"pid,omitempty"`
	ExitCode *int            `json:"exit_code,omitempty"`
	Reason   string          `json:"reason,omitempty"`
	Signal   json.RawMessage `json:"signal,omitempty"`
	Rows     int             `json:"rows,omitempty"`
	Cols     int             `json:"cols,omitempty"`
	Error    *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// ptyClient is one terminal socket: it collects the output and the control
// messages as they come.
type ptyClient struct {
	t       *testing.T
	c       *websocket.Conn
	started ptyMsg

	mu     sync.Mutex
	out    bytes.Buffer
	exit   *ptyMsg
	errs   []ptyMsg
	closed error // how reading ended
	done   chan struct{}
}

// ptyURL is the WebSocket URL of sandbox id's terminal route with query q.
func ptyURL(d *daemon, id string, q url.Values) string {
	return "ws" + strings.TrimPrefix(d.url, "http") + "/v1/sandboxes/" + id + "/pty?" + q.Encode()
}

// dialPty opens a terminal with the Authorization header.
func dialPty(t *testing.T, d *daemon, id string, q url.Values) *ptyClient {
	t.Helper()
	return dialPtyOpts(t, d, id, q, &websocket.DialOptions{
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + d.key}},
		Subprotocols: []string{"sbx.pty.v1"},
	})
}

func dialPtyOpts(t *testing.T, d *daemon, id string, q url.Values, opts *websocket.DialOptions) *ptyClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), ptyWait)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, ptyURL(d, id, q), opts)
	if err != nil {
		st := 0
		if resp != nil {
			st = resp.StatusCode
		}
		t.Fatalf("dialing the terminal of %s (%v): %v (status %d)", id, q, err, st)
	}
	p := &ptyClient{t: t, c: c, done: make(chan struct{})}
	// The first message is started, before any output.
	typ, b, err := c.Read(ctx)
	if err != nil || typ != websocket.MessageText || json.Unmarshal(b, &p.started) != nil || p.started.Type != "started" {
		t.Fatalf("first message = %v %q, %v; want a started message", typ, b, err)
	}
	if p.started.Process == "" || p.started.PID <= 0 {
		t.Fatalf("started message %q names no process", b)
	}
	go p.read()
	t.Cleanup(func() { c.CloseNow() })
	return p
}

func (p *ptyClient) read() {
	defer close(p.done)
	for {
		typ, b, err := p.c.Read(context.Background())
		p.mu.Lock()
		if err != nil {
			p.closed = err
			p.mu.Unlock()
			return
		}
		if typ == websocket.MessageBinary {
			p.out.Write(b)
		} else {
			var m ptyMsg
			if json.Unmarshal(b, &m) != nil {
				m = ptyMsg{Type: "unparsable " + string(b)}
			}
			switch m.Type {
			case "exit":
				p.exit = &m
			default:
				p.errs = append(p.errs, m)
			}
		}
		p.mu.Unlock()
	}
}

// output is everything the terminal printed so far.
func (p *ptyClient) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// waitFor waits until the output after byte from matches re; it returns the
// end of the match, for the next wait to start from.
func (p *ptyClient) waitFor(from int, re string) int {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(ptyWait)
	for {
		out := p.output()
		if from > len(out) {
			from = len(out)
		}
		if loc := rx.FindStringIndex(out[from:]); loc != nil {
			return from + loc[1]
		}
		select {
		case <-p.done:
			p.t.Fatalf("the terminal closed (%v) before its output matched %q; output:\n%q", p.closed, re, out[from:])
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("no output matching %q within %s; output:\n%q", re, ptyWait, out[from:])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *ptyClient) send(s string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.t.Context(), ptyWait)
	defer cancel()
	if err := p.c.Write(ctx, websocket.MessageBinary, []byte(s)); err != nil {
		p.t.Fatalf("sending %q: %v", s, err)
	}
}

func (p *ptyClient) control(m ptyMsg) {
	p.t.Helper()
	b, _ := json.Marshal(m)
	ctx, cancel := context.WithTimeout(p.t.Context(), ptyWait)
	defer cancel()
	if err := p.c.Write(ctx, websocket.MessageText, b); err != nil {
		p.t.Fatalf("sending %s: %v", b, err)
	}
}

// waitExit waits for the exit message and the normal close after it.
func (p *ptyClient) waitExit() ptyMsg {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(ptyWait):
		p.t.Fatalf("the terminal did not end within %s; output:\n%q", ptyWait, p.output())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exit == nil || p.exit.ExitCode == nil {
		p.t.Fatalf("the terminal closed (%v) without an exit message (errors %+v); output:\n%q", p.closed, p.errs, p.out.String())
	}
	if st := websocket.CloseStatus(p.closed); st != websocket.StatusNormalClosure {
		p.t.Errorf("the terminal closed with %v, want a normal close after the exit", p.closed)
	}
	return *p.exit
}

func (p *ptyClient) wantExit(code int) {
	p.t.Helper()
	if m := p.waitExit(); *m.ExitCode != code {
		p.t.Errorf("exit = %d (reason %s), want %d; output:\n%q", *m.ExitCode, m.Reason, code, p.output())
	}
}

func argvQuery(argv ...string) url.Values { return url.Values{"argv": argv} }

// processRunning reports whether the agent still runs process pid of sandbox id.
func processRunning(t *testing.T, d *daemon, id, pid string) bool {
	t.Helper()
	st, b := d.api("GET", "/v1/sandboxes/"+id+"/processes/"+pid, nil)
	if st != 200 {
		t.Fatalf("GET process %s = %d %s", pid, st, b)
	}
	var p struct {
		State string `json:"state"`
	}
	json.Unmarshal(b, &p)
	return p.State == "running"
}

// auditOf counts the audit records of sandbox id about process pid, by
// action and by action/outcome.
func auditOf(t *testing.T, d *daemon, id, pid string) map[string]int {
	t.Helper()
	st, b := d.api("GET", "/v1/audit?sandbox_id="+id+"&limit=1000", nil)
	var audit struct {
		Records []struct {
			Action  string `json:"action"`
			Target  string `json:"target"`
			Outcome string `json:"outcome"`
		} `json:"records"`
	}
	if st != 200 || json.Unmarshal(b, &audit) != nil {
		t.Fatalf("GET /v1/audit = %d %s", st, b)
	}
	seen := map[string]int{}
	for _, r := range audit.Records {
		if r.Target == pid {
			seen[r.Action]++
			seen[r.Action+"/"+r.Outcome]++
		}
	}
	return seen
}

func TestPtyPrograms(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(map[string]any{"timeout": 600})

	t.Run("python", func(t *testing.T) {
		p := dialPty(t, d, id, argvQuery("python3"))
		at := p.waitFor(0, `>>> $`)
		p.send("print(6*7)\n")
		at = p.waitFor(at, `\n42\r?\n`)
		p.waitFor(at, `>>> $`)
		p.send("exit()\n")
		p.wantExit(0)
	})

	t.Run("cmd and ^C", func(t *testing.T) {
		// A shell command; ^C is a byte to the terminal, whose line
		// discipline interrupts the foreground program, not the session.
		p := dialPty(t, d, id, url.Values{"cmd": {"python3"}})
		at := p.waitFor(0, `>>> $`)
		p.send("\x03")
		at = p.waitFor(at, `KeyboardInterrupt`)
		p.send("print(6*7)\n")
		p.waitFor(at, `\n42\r?\n`)
		p.send("exit()\n")
		p.wantExit(0)
	})

	t.Run("bash", func(t *testing.T) {
		p := dialPty(t, d, id, url.Values{"cmd": {"bash -i"}, "rows": {"24"}, "cols": {"80"}})
		p.send("echo $((2+3))\n")
		at := p.waitFor(0, `[\r\n]5\r\n`)
		p.send("tty\n")
		at = p.waitFor(at, `[\r\n]/dev/pts/[0-9]+\r\n`)
		p.control(ptyMsg{Type: "resize", Rows: 37, Cols: 121})
		p.send("stty size\n")
		p.waitFor(at, `[\r\n]37 121\r\n`)
		p.send("exit\n")
		p.wantExit(0)
	})

	t.Run("top", func(t *testing.T) {
		p := dialPty(t, d, id, argvQuery("top", "-b", "-n", "1"))
		p.wantExit(0)
		if out := p.output(); !strings.Contains(out, "PID") || !strings.Contains(out, "top") {
			t.Errorf("top printed no process table:\n%q", out)
		}
	})

	t.Run("password", func(t *testing.T) {
		const secret = "s3cr3t"
		p := dialPty(t, d, id, argvQuery("python3", "-c", `import getpass; p=getpass.getpass("pw: "); print("got", len(p))`))
		at := p.waitFor(0, `pw: $`)
		p.send(secret + "\n")
		p.waitFor(at, `got 6`)
		p.wantExit(0)
		if out := p.output(); strings.Contains(out, secret) {
			t.Errorf("the password was echoed:\n%q", out)
		}
	})

	t.Run("signal", func(t *testing.T) {
		p := dialPty(t, d, id, argvQuery("sleep", "600"))
		p.control(ptyMsg{Type: "signal", Signal: json.RawMessage("15")})
		m := p.waitExit()
		if *m.ExitCode != 143 || m.Reason != "signaled" {
			t.Errorf("exit after SIGTERM = %d %s, want 143 signaled", *m.ExitCode, m.Reason)
		}
	})

	t.Run("bulk output", func(t *testing.T) {
		// Every byte arrives, at the socket's pace: the agent's follower is complete.
		const n = 4 << 20
		p := dialPty(t, d, id, argvQuery("sh", "-c", fmt.Sprintf(`head -c %d /dev/zero | tr '\0' a; echo; echo END`, n)))
		p.wantExit(0)
		if got := strings.Count(p.output(), "a"); got != n || !strings.Contains(p.output(), "END") {
			t.Errorf("%d of %d bytes arrived (END seen: %t)", got, n, strings.Contains(p.output(), "END"))
		}
	})

	t.Run("default shell", func(t *testing.T) {
		p := dialPty(t, d, id, nil)
		p.send("echo shell=$0\n")
		p.waitFor(0, `[\r\n]shell=-?(/bin/)?bash\r\n`)
		p.send("exit 7\n")
		p.wantExit(7)
	})
}

// A terminal attached with ?process= outlives its socket; one the route
// started does not.
func TestPtyLifetime(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(map[string]any{"timeout": 600})

	t.Run("attached", func(t *testing.T) {
		st, b := d.api("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{
			"argv": []string{"sh", "-c", "echo attach-me; exec cat"}, "background": true,
			"pty": map[string]int{"rows": 24, "cols": 80}, "timeout": 600})
		if st != 202 {
			t.Fatalf("starting a terminal process = %d %s", st, b)
		}
		var started struct {
			ProcessID string `json:"process_id"`
		}
		json.Unmarshal(b, &started)
		p := dialPty(t, d, id, url.Values{"process": {started.ProcessID}, "rows": {"30"}, "cols": {"100"}})
		if p.started.Process != started.ProcessID {
			t.Errorf("started names process %s, want %s", p.started.Process, started.ProcessID)
		}
		at := p.waitFor(0, `attach-me`) // replayed
		p.send("ping\n")
		p.waitFor(at, `ping\r?\n`)
		p.c.Close(websocket.StatusNormalClosure, "")
		<-p.done
		if !processRunning(t, d, id, started.ProcessID) {
			t.Fatalf("the attached process ended with its socket")
		}
		// Attached again: the same terminal, still answering.
		p2 := dialPty(t, d, id, url.Values{"process": {started.ProcessID}})
		p2.send("again\n")
		p2.waitFor(0, `again\r?\n`)
		if st, b := d.api("POST", "/v1/sandboxes/"+id+"/processes/"+started.ProcessID+"/signal", map[string]any{"signal": "SIGKILL"}); st != 200 {
			t.Fatalf("killing it = %d %s", st, b)
		}
		if m := p2.waitExit(); *m.ExitCode != 137 {
			t.Errorf("exit after SIGKILL = %d %s, want 137", *m.ExitCode, m.Reason)
		}
		// Attaching, leaving and resizing are audited; keystrokes are not. The
		// first socket's end is recorded when the daemon has let it go: waited for.
		want := map[string]int{"pty_attach": 2, "pty_detach/ok": 2, "resize/ok": 1}
		for deadline := time.Now().Add(ptyWait); ; time.Sleep(50 * time.Millisecond) {
			seen := auditOf(t, d, id, started.ProcessID)
			if seen["write_stdin"] != 0 {
				t.Fatalf("keystrokes were audited: %v", seen)
			}
			if seen["pty_attach"] == want["pty_attach"] && seen["pty_detach/ok"] == want["pty_detach/ok"] && seen["resize/ok"] == want["resize/ok"] {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("audit records of the attached terminal: %v, want %v", seen, want)
			}
		}
	})

	t.Run("started", func(t *testing.T) {
		p := dialPty(t, d, id, argvQuery("sleep", "4242"))
		if !processRunning(t, d, id, p.started.Process) {
			t.Fatalf("the terminal's process is not running")
		}
		p.c.Close(websocket.StatusNormalClosure, "")
		<-p.done
		for deadline := time.Now().Add(ptyWait); processRunning(t, d, id, p.started.Process); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the terminal's process still runs %s after its socket closed", ptyWait)
			}
		}
		// And at the far end: no such process in the sandbox.
		if r := d.sh(id, "ps -eo args | grep -c '^sleep 4242' || true"); strings.TrimSpace(r.Stdout) != "0" {
			t.Errorf("ps in the sandbox still finds the terminal's sleep: %q", r.Stdout)
		}
	})
}

func TestPtyRefusals(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(map[string]any{"timeout": 600})
	// Every refused dial asks for this command: it must never run.
	const marker = "/tmp/pty-refused"
	refused := argvQuery("touch", marker)
	ran := func() bool {
		st, b := d.api("GET", "/v1/sandboxes/"+id+"/processes", nil)
		if st != 200 {
			t.Fatalf("GET processes = %d %s", st, b)
		}
		if r := d.sh(id, "test -e "+marker+" && echo ran || echo none"); strings.TrimSpace(r.Stdout) != "none" {
			return true
		}
		return bytes.Contains(b, []byte(`"touch"`))
	}
	// dialErr dials and returns the refusal's status and body.
	dialErr := func(q url.Values, opts *websocket.DialOptions) (int, errorBody) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), ptyWait)
		defer cancel()
		c, resp, err := websocket.Dial(ctx, ptyURL(d, id, q), opts)
		if err == nil {
			c.CloseNow()
			t.Fatalf("dial %v succeeded, want a refusal", q)
		}
		if resp == nil {
			t.Fatalf("dial %v: no answer: %v", q, err)
		}
		var body bytes.Buffer
		body.ReadFrom(resp.Body)
		return resp.StatusCode, decodeError(t, body.Bytes())
	}
	t.Run("unauthenticated", func(t *testing.T) {
		for name, opts := range map[string]*websocket.DialOptions{
			"no key":           {Subprotocols: []string{"sbx.pty.v1"}},
			"wrong header key": {HTTPHeader: http.Header{"Authorization": {"Bearer sbx_wrong"}}},
			"wrong protocol":   {Subprotocols: []string{"sbx.pty.v1", "bearer.sbx_wrong"}},
		} {
			st, e := dialErr(refused, opts)
			if st != 401 || e.Error.Code != "unauthenticated" {
				t.Errorf("%s: %d %+v, want 401 unauthenticated", name, st, e)
			}
		}
	})

	t.Run("key in the URL is not read", func(t *testing.T) {
		q := url.Values{"argv": refused["argv"], "access_token": {d.key}, "key": {d.key}, "token": {d.key}}
		st, _ := dialErr(q, &websocket.DialOptions{})
		if st != 401 {
			t.Errorf("a key in the query = %d, want 401", st)
		}
	})

	t.Run("bad size", func(t *testing.T) {
		auth := &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + d.key}}}
		for _, q := range []url.Values{{"argv": refused["argv"], "rows": {"0"}}, {"argv": refused["argv"], "cols": {"1001"}}} {
			st, e := dialErr(q, auth)
			if st != 400 || !strings.Contains(e.Error.Message, "[1, 1000]") || e.Error.SandboxID != id {
				t.Errorf("%v = %d %+v, want 400 naming the range [1, 1000] and the sandbox", q, st, e)
			}
		}
		st, e := dialErr(url.Values{"process": {"nope"}}, auth)
		if st != 404 || e.Error.SandboxID != id {
			t.Errorf("an unknown process = %d %+v, want 404 naming the sandbox", st, e)
		}
	})

	t.Run("not a WebSocket", func(t *testing.T) {
		st, b := d.api("GET", "/v1/sandboxes/"+id+"/pty?"+refused.Encode(), nil)
		if e := decodeError(t, b); st != 400 || !strings.Contains(e.Error.Message, "WebSocket") {
			t.Errorf("a plain GET = %d %s, want 400 saying it is a WebSocket route", st, b)
		}
	})

	if ran() {
		t.Errorf("a refused upgrade started its command")
	}

	t.Run("browser", func(t *testing.T) {
		// A browser's way: the key as a subprotocol, never a header.
		p := dialPtyOpts(t, d, id, argvQuery("sh", "-c", "exit 4"), &websocket.DialOptions{
			Subprotocols: []string{"sbx.pty.v1", "bearer." + d.key}})
		if got := p.c.Subprotocol(); got != "sbx.pty.v1" {
			t.Errorf("the daemon answered subprotocol %q, want sbx.pty.v1 only", got)
		}
		p.wantExit(4)
	})
}

// sbx exec -t with stdin a pipe: no raw mode, no resize, the remote exit code.
func TestPtyCLI(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(map[string]any{"timeout": 600})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, sbxBin, "exec", "-t", id, "--", "bash")
	cmd.Env = append(os.Environ(), "SBX_URL="+d.url, "SBX_API_KEY="+d.key)
	cmd.Stdin = strings.NewReader("echo hi\nexit 3\n")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := cmd.ProcessState.ExitCode()
	if code != 3 {
		t.Errorf("sbx exec -t … bash = %d (%v), want 3; stderr %q", code, err, errOut.String())
	}
	if !regexp.MustCompile(`[\r\n]hi\r\n`).MatchString(out.String()) { // bash's own echo is "echo hi"
		t.Errorf("stdout has no line hi:\n%q", out.String())
	}

	// --tty, and a command that reads stdin to its end (^D after the pipe's EOF).
	o, e, c := d.cliIn(strings.NewReader("one\ntwo\n"), "exec", "--tty", id, "--", "sh", "-c", "wc -l; exit 5")
	if c != 5 || !regexp.MustCompile(`[\r\n]\s*2\r\n`).MatchString(o) {
		t.Errorf("sbx exec --tty … wc -l = %d %q (stderr %q), want 5 and a line 2", c, o, e)
	}
}
