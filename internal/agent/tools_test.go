package agent_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/api/agent/boot"
	"sbx.dev/sbx/internal/agentclient"
	"sbx.dev/sbx/internal/sandbox"
)

// startBackground starts req in the background and returns its process id.
func startBackground(t *testing.T, a *testAgent, req sandbox.ExecRequest) string {
	t.Helper()
	req.Background = true
	if req.Timeout == 0 {
		req.Timeout = time.Minute
	}
	var id string
	if _, err := a.cl.Exec(t.Context(), req, false, func(ev sandbox.ExecEvent) error {
		if ev.Started != nil {
			id = ev.Started.ID
		}
		return nil
	}); err != nil || id == "" {
		t.Fatalf("Exec(%+v) = %v, id %q", req, err, id)
	}
	return id
}

// readUntil reads process id's log from since until the data read holds
// want (or the process ended), and returns all it read, the cursor and the
// last chunk. With want empty it reads nothing.
func readUntil(t *testing.T, a *testAgent, id string, since int64, want string) ([]byte, int64, sandbox.OutputChunk) {
	t.Helper()
	var got []byte
	for want != "" {
		c, err := a.cl.ReadOutput(t.Context(), id, since, 10*time.Second, 20*time.Millisecond, 0)
		if err != nil {
			t.Fatalf("ReadOutput(%s, %d) = %v", id, since, err)
		}
		if c.Start != since {
			t.Fatalf("ReadOutput(%s, %d) starts at %d, want the cursor given (nothing was dropped)", id, since, c.Start)
		}
		got, since = append(got, c.Data...), c.Cursor
		if bytes.Contains(got, []byte(want)) || !c.Alive {
			return got, since, c
		}
	}
	return nil, since, sandbox.OutputChunk{}
}

// An interactive session in a terminal, read by cursor: what is typed is
// echoed, the program answers, each read resumes exactly where the last
// ended, and the last one brings the result.
func TestReadOutputPTY(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{})
	ctx := t.Context()
	id := startBackground(t, a, sandbox.ExecRequest{Argv: []string{"cat"}, Pty: &sandbox.PtySize{Rows: 24, Cols: 80}, OutputLogBytes: 1 << 16})

	// Nothing yet: a read without wait answers at once, empty, at cursor 0.
	c, err := a.cl.ReadOutput(ctx, id, 0, 0, 0, 0)
	if err != nil || len(c.Data) != 0 || c.Cursor != 0 || !c.Alive || c.Result != nil {
		t.Fatalf("ReadOutput before any output = %+v, %v", c, err)
	}
	if err := a.cl.WriteStdin(ctx, id, []byte("hello\n"), false); err != nil {
		t.Fatal(err)
	}
	got, cursor, _ := readUntil(t, a, id, 0, "hello\r\nhello\r\n")
	if string(got) != "hello\r\nhello\r\n" || cursor != int64(len(got)) {
		t.Fatalf("echo and answer = %q (cursor %d), want the line echoed by the terminal, then cat's copy", got, cursor)
	}

	// A read waiting for output returns once some comes.
	done := make(chan sandbox.OutputChunk, 1)
	go func() {
		c, err := a.cl.ReadOutput(ctx, id, cursor, time.Minute, 0, 0)
		if err != nil {
			t.Errorf("waiting ReadOutput = %v", err)
		}
		done <- c
	}()
	if err := a.cl.WriteStdin(ctx, id, []byte("world\n"), false); err != nil {
		t.Fatal(err)
	}
	c = <-done
	if c.Start != cursor || len(c.Data) == 0 || !bytes.HasPrefix([]byte("world\r\nworld\r\n"), c.Data) {
		t.Fatalf("waiting ReadOutput = %+v, want output from cursor %d on", c, cursor)
	}
	rest, cursor, _ := readUntil(t, a, id, c.Cursor, "world\r\nworld\r\n"[len(c.Data):])
	if all := string(c.Data) + string(rest); all != "world\r\nworld\r\n" {
		t.Fatalf("second exchange = %q", all)
	}

	// Reading again from an old cursor gives the same bytes.
	c, err = a.cl.ReadOutput(ctx, id, 7, 0, 0, 5)
	if err != nil || string(c.Data) != "hello" || c.Start != 7 || c.Cursor != 12 || c.End != cursor {
		t.Errorf("ReadOutput(7, 5 bytes) = %+v, %v; want \"hello\" from 7 to 12, end %d", c, err, cursor)
	}

	_, err = a.cl.ReadOutput(ctx, id, cursor+100, 0, 0, 0)
	want := fmt.Sprintf("process %s: cursor %d is past the end of the output (%d)", id, cursor+100, cursor)
	if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Errorf("ReadOutput past the end = %v, want invalid argument: %s", err, want)
	}

	if _, err := a.cl.ReadOutput(ctx, id, -1, 0, 0, 0); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "cursor -1 is negative") {
		t.Errorf("ReadOutput(-1) = %v, want invalid argument", err)
	}

	// ^D at the start of a line ends cat; the last read says so, with the result.
	if err := a.cl.WriteStdin(ctx, id, []byte{4}, false); err != nil {
		t.Fatal(err)
	}
	for alive := true; alive; {
		c, err = a.cl.ReadOutput(ctx, id, cursor, 10*time.Second, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		cursor, alive = c.Cursor, c.Alive
	}
	if c.Result == nil || c.Result.ExitCode != 0 || c.Result.Reason != sandbox.ReasonExited || c.Result.ProcessID != id {
		t.Errorf("last read's result = %+v, want cat's exit 0", c.Result)
	}
	// After the exit a read answers at once, with the result again.
	c, err = a.cl.ReadOutput(ctx, id, cursor, time.Minute, time.Minute, 0)
	if err != nil || c.Alive || c.Result == nil || len(c.Data) != 0 {
		t.Errorf("ReadOutput after the exit = %+v, %v", c, err)
	}
}

// A log smaller than the output keeps its end: a read from an offset it no
// longer holds starts later, and says where.
func TestReadOutputOverflow(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{})
	id := startBackground(t, a, sandbox.ExecRequest{Argv: []string{"seq", "1", "3000"}, OutputLogBytes: 1000})
	var c sandbox.OutputChunk
	for since := int64(0); ; since = c.Cursor {
		var err error
		if c, err = a.cl.ReadOutput(t.Context(), id, since, 10*time.Second, 0, 0); err != nil {
			t.Fatal(err)
		}
		if !c.Alive {
			break
		}
	}
	total := int64(len(seqOutput(3000)))
	if c.End != total || c.Result == nil {
		t.Fatalf("last read = end %d, result %+v; want end %d and the result", c.End, c.Result, total)
	}
	c, err := a.cl.ReadOutput(t.Context(), id, 100, 0, 0, 0)
	if err != nil || c.Start != total-1000 || c.Cursor != total || len(c.Data) != 1000 {
		t.Fatalf("ReadOutput(100) = start %d cursor %d, %d bytes, %v; want the last 1000 bytes from %d", c.Start, c.Cursor, len(c.Data), err, total-1000)
	}
	if want := seqOutput(3000)[total-1000:]; string(c.Data) != want {
		t.Errorf("log = %q…, want the end of the output", c.Data[:40])
	}
	// since 0: from the oldest byte held.
	if c0, err := a.cl.ReadOutput(t.Context(), id, 0, 0, 0, 0); err != nil || c0.Start != total-1000 {
		t.Errorf("ReadOutput(0) = start %d, %v; want %d", c0.Start, err, total-1000)
	}
}

// Without a terminal the log holds stdout and stderr both, each chunk as
// the agent read it (the order of two pipes' chunks is the order the agent
// read them in, which need not be the order they were written in).
func TestReadOutputBothStreams(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{})
	id := startBackground(t, a, sandbox.ExecRequest{Shell: "echo out; echo err >&2", OutputLogBytes: 100})
	st, err := a.cl.Wait(t.Context(), id, time.Minute)
	if err != nil || st.Result == nil {
		t.Fatalf("Wait = %+v, %v", st, err)
	}
	c, err := a.cl.ReadOutput(t.Context(), id, 0, 0, 0, 0)
	if err != nil || c.Alive || c.End != 8 || (string(c.Data) != "out\nerr\n" && string(c.Data) != "err\nout\n") {
		t.Errorf("ReadOutput = %+v, %v; want both lines", c, err)
	}
}

func seqOutput(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

func TestReadOutputErrors(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{})
	if _, err := a.cl.ReadOutput(t.Context(), "pnope", 0, 0, 0, 0); !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), "pnope") {
		t.Errorf("ReadOutput(unknown id) = %v, want not found naming it", err)
	}
	id := startBackground(t, a, sandbox.ExecRequest{Argv: []string{"true"}})
	_, err := a.cl.ReadOutput(t.Context(), id, 0, 0, 0, 0)
	if !errors.Is(err, sandbox.ErrWrongState) || !strings.Contains(err.Error(), "process "+id+": not started with an output log") {
		t.Errorf("ReadOutput(no log) = %v, want failed precondition saying so", err)
	}
	if _, err := a.cl.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"true"}, OutputLogBytes: 1 << 40, Timeout: time.Minute}, false, nil); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("Exec(output log of 1 TiB) = %v, want invalid argument", err)
	}
}

// Resize reaches the program's terminal.
func TestResize(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{})
	ctx := t.Context()
	id := startBackground(t, a, sandbox.ExecRequest{Shell: "stty -echo; echo ready; read x; stty size", Pty: &sandbox.PtySize{Rows: 24, Cols: 80}, OutputLogBytes: 4096})
	_, cursor, _ := readUntil(t, a, id, 0, "ready")
	if err := a.cl.Resize(ctx, id, 30, 100); err != nil {
		t.Fatal(err)
	}
	a.cl.WriteStdin(ctx, id, []byte("\n"), false)
	if got, _, _ := readUntil(t, a, id, cursor, "30 100"); !bytes.Contains(got, []byte("30 100")) {
		t.Errorf("stty size after Resize(30, 100) = %q", got)
	}
	plain := startBackground(t, a, sandbox.ExecRequest{Argv: []string{"sleep", "60"}})
	if err := a.cl.Resize(ctx, plain, 30, 100); !errors.Is(err, sandbox.ErrWrongState) || !strings.Contains(err.Error(), plain+" has no terminal") {
		t.Errorf("Resize(no PTY) = %v, want failed precondition", err)
	}
	a.cl.Signal(ctx, plain, 9)
	if err := a.cl.Resize(ctx, id, 0, 100); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("Resize(0 rows) = %v, want invalid argument", err)
	}
}

// Changed lists what a command wrote, not what it left alone.
func TestChanged(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{})
	ctx := t.Context()
	a.cl.WriteFile(ctx, "/old.txt", []byte("old"), 0, false)
	a.cl.WriteFile(ctx, "/src/keep.go", []byte("old"), 0, false)
	a.cl.WriteFile(ctx, "/src/edit.go", []byte("old"), 0, false)
	time.Sleep(50 * time.Millisecond) // the setup's timestamps fall before since, coarse clock or not
	since := time.Now().Add(-20 * time.Millisecond)
	res, err := a.cl.Exec(ctx, sandbox.ExecRequest{Shell: "echo new > new.txt && mkdir -p src/pkg && echo x > src/pkg/a.go && echo more >> src/edit.go", Timeout: time.Minute}, false, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	paths, truncated, err := a.cl.Changed(ctx, "", since, 0)
	if want := []string{"/new.txt", "/src/edit.go", "/src/pkg/a.go"}; err != nil || truncated || !slices.Equal(paths, want) {
		t.Errorf("Changed = %q, %v, %v; want %q", paths, truncated, err, want)
	}
	if _, _, err := a.cl.Changed(ctx, "/nope", since, 0); !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), "/nope") {
		t.Errorf("Changed(/nope) = %v, want not found naming it", err)
	}
}

func TestReadLinesAndEditFile(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{})
	ctx := t.Context()
	a.cl.WriteFile(ctx, "/m.py", []byte("def f():\n    x = 1\n    return x\n\ndef g():\n    x = 1\n    return x\n"), 0o640, false)
	l, err := a.cl.ReadLines(ctx, "/m.py", 4, 2, 0)
	if err != nil || !slices.Equal(l.Lines, []string{"def g():", "    x = 1"}) || l.FirstLine != 5 || l.EOF || l.TotalLines != -1 {
		t.Errorf("ReadLines(4, 2) = %+v, %v", l, err)
	}
	l, err = a.cl.ReadLines(ctx, "/m.py", 5, 0, 4)
	if err != nil || !slices.Equal(l.Lines, []string{"    ", "    "}) || l.CutLines != 2 || !l.EOF || l.TotalLines != 7 {
		t.Errorf("ReadLines(5, 4 chars) = %+v, %v", l, err)
	}
	a.cl.WriteFile(ctx, "/bin.dat", []byte("a\x00b"), 0, false)
	if _, err := a.cl.ReadLines(ctx, "/bin.dat", 0, 0, 0); !errors.Is(err, sandbox.ErrWrongState) || !strings.Contains(err.Error(), "'/bin.dat' is a binary file") {
		t.Errorf("ReadLines(binary) = %v, want failed precondition", err)
	}
	if _, err := a.cl.ReadLines(ctx, "/", 0, 0, 0); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "'/' is a directory") {
		t.Errorf("ReadLines(dir) = %v, want invalid argument", err)
	}

	_, err = a.cl.EditFile(ctx, "/m.py", "x = 1\n    return x", "y = 2\n    return y", false)
	if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "old_string occurs 2 times in /m.py (lines 2, 6)") {
		t.Errorf("EditFile(ambiguous) = %v", err)
	}
	r, err := a.cl.EditFile(ctx, "/m.py", "def g():\n  x = 1\n", "def g():\n  x = 2\n  y = 3\n", false)
	if err != nil || r.Strategy != "indentation" || r.Replacements != 1 || r.Exact || r.Score != 1 || r.StartLine != 5 || r.EndLine != 7 {
		t.Errorf("EditFile(indented differently) = %+v, %v", r, err)
	}
	r, err = a.cl.EditFile(ctx, "/m.py", "def f():\n    x = 1\n    retrun x\n", "def f():\n    return 1\n", false)
	if err != nil || r.Strategy != "fuzzy" || r.Score < 0.85 || r.StartLine != 1 || r.EndLine != 2 {
		t.Errorf("EditFile(typo) = %+v, %v", r, err)
	}
	got, _ := os.ReadFile(filepath.Join(a.root, "m.py"))
	if want := "def f():\n    return 1\n\ndef g():\n    x = 2\n    y = 3\n    return x\n"; string(got) != want {
		t.Errorf("file = %q, want %q", got, want)
	}
	if fi, err := os.Stat(filepath.Join(a.root, "m.py")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode after edits = %v, %v; want 0640 kept", fi.Mode(), err)
	}
	if _, err := a.cl.EditFile(ctx, "/m.py", "class Nothing:\n    pass", "x", false); !errors.Is(err, sandbox.ErrInvalid) ||
		!strings.Contains(err.Error(), "old_string not found in /m.py; closest match at lines") {
		t.Errorf("EditFile(absent) = %v", err)
	}
	r, err = a.cl.EditFile(ctx, "/m.py", "x", "z", true)
	if err != nil || r.Replacements != 2 || !r.Exact {
		t.Errorf("EditFile(replace all) = %+v, %v", r, err)
	}
}

func TestGrepModesAndGlob(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{})
	ctx := t.Context()
	a.cl.WriteFile(ctx, "/src/a.py", []byte("TODO one\nTODO two\n"), 0, false)
	a.cl.WriteFile(ctx, "/src/b.ts", []byte("TODO ts\n"), 0, false)
	a.cl.WriteFile(ctx, "/lib/c.py", []byte("nothing\n"), 0, false)
	ms, truncated, err := a.cl.Grep(ctx, agentclient.GrepRequest{Pattern: "TODO", Mode: "count"})
	if err != nil || truncated || len(ms) != 2 || ms[0] != (sandbox.GrepMatch{Path: "/src/a.py", Count: 2}) || ms[1].Count != 1 {
		t.Errorf("Grep(count) = %+v, %v, %v", ms, truncated, err)
	}
	ms, _, err = a.cl.Grep(ctx, agentclient.GrepRequest{Pattern: "TODO", Mode: "files", Glob: "**/*.py"})
	if err != nil || len(ms) != 1 || ms[0] != (sandbox.GrepMatch{Path: "/src/a.py"}) {
		t.Errorf("Grep(files, **/*.py) = %+v, %v", ms, err)
	}
	if _, _, err := a.cl.Grep(ctx, agentclient.GrepRequest{Pattern: "TODO", Mode: "lines"}); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), `mode "lines"`) {
		t.Errorf("Grep(mode lines) = %v, want invalid argument naming it", err)
	}
}
