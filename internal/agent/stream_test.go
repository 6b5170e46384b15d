package agent_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"sbx.dev/sbx/api/agent/boot"
	"sbx.dev/sbx/internal/sandbox"
)

// streamed is what a follower of an exec stream got.
type streamed struct {
	stdout, stderr []byte
	dropped        map[string]int64
	res            *sandbox.ExecResult
}

// execFollow runs req as a streamed exec whose follower reads nothing for
// pause after the start event, then everything as fast as it comes.
func execFollow(t *testing.T, a *testAgent, req sandbox.ExecRequest, pause time.Duration) streamed {
	t.Helper()
	got := streamed{dropped: map[string]int64{}}
	res, err := a.cl.Exec(t.Context(), req, true, func(ev sandbox.ExecEvent) error {
		switch {
		case ev.Started != nil:
			time.Sleep(pause)
		case ev.Dropped != nil:
			got.dropped[ev.Dropped.Stream] += ev.Dropped.Bytes
		}
		got.stdout = append(got.stdout, ev.Stdout...)
		got.stderr = append(got.stderr, ev.Stderr...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got.res = res
	return got
}

// TestStreamComplete: a follower that falls behind gets every byte, stderr
// after stdout included, because the process waits for it: far more output
// than every buffer on the way holds cannot be written while the follower
// sleeps, so the process's own duration covers the pause.
func TestStreamComplete(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{})
	const total = 40 << 20
	const pause = time.Second
	got := execFollow(t, a, sandbox.ExecRequest{Shell: fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a; echo done >&2", total), Timeout: time.Minute}, pause)
	if len(got.stdout) != total || bytes.Count(got.stdout, []byte("a")) != total {
		t.Errorf("stdout: %d bytes, want %d of 'a'", len(got.stdout), total)
	}
	if string(got.stderr) != "done\n" {
		t.Errorf("stderr = %q, want the line printed after the output", got.stderr)
	}
	if len(got.dropped) != 0 {
		t.Errorf("dropped events %v in a complete stream", got.dropped)
	}
	if got.res.ExitCode != 0 || got.res.StdoutBytes != total {
		t.Errorf("result: exit %d, stdout_bytes %d", got.res.ExitCode, got.res.StdoutBytes)
	}
	if got.res.Duration < pause {
		t.Errorf("the process ran %v, less than the follower's pause %v: it did not wait for its reader", got.res.Duration, pause)
	}
	if got.res.StdoutPath != "" {
		t.Errorf("stdout_path = %q: a completely followed stream is not saved to a file", got.res.StdoutPath)
	}
}

// TestStreamExitWhileHeld: the process exits while its last output still
// waits in the pipe for a follower that is slower than the drain grace after
// exit: the output is not cut at the exit.
func TestStreamExitWhileHeld(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{})
	const total = 6 << 20 // more than the follower's queue, less than queue and pipe together
	got := execFollow(t, a, sandbox.ExecRequest{Shell: fmt.Sprintf("head -c %d /dev/zero; echo done >&2", total)}, time.Second)
	if len(got.stdout) != total || string(got.stderr) != "done\n" {
		t.Errorf("got %d bytes of stdout (want %d) and stderr %q", len(got.stdout), total, got.stderr)
	}
}

// TestStreamBounded: a bounded live view never slows the process; what its
// follower missed is reported by dropped events, and delivered plus dropped
// is all the process wrote. The result still has head and tail.
func TestStreamBounded(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{})
	const total = 40 << 20
	got := execFollow(t, a, sandbox.ExecRequest{Shell: fmt.Sprintf("head -c %d /dev/zero; echo done >&2", total), StreamBounded: true}, 2*time.Second)
	if got.dropped["stdout"] == 0 {
		t.Fatalf("no dropped event for a follower that slept through %d bytes", total)
	}
	if n := int64(len(got.stdout)) + got.dropped["stdout"]; n != total {
		t.Errorf("delivered %d + dropped %d = %d, want %d", len(got.stdout), got.dropped["stdout"], n, total)
	}
	if got.res.StdoutBytes != total || !got.res.Truncated {
		t.Errorf("result: stdout_bytes %d, truncated %v", got.res.StdoutBytes, got.res.Truncated)
	}
	if string(got.stderr) != "done\n" && got.dropped["stderr"] != 5 {
		t.Errorf("stderr %q dropped %d: the line is delivered or counted", got.stderr, got.dropped["stderr"])
	}
}

// TestStreamHeldByDescendant: a background descendant that keeps the pipes
// open, writing all the time, does not hold the result, and is not killed by a
// closed pipe: it goes on writing into the void until it ends by itself.
func TestStreamHeldByDescendant(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{})
	finished := a.root + "/finished"
	shell := "(i=0; while [ $i -lt 100 ]; do echo late; sleep 0.05; i=$((i+1)); done; touch " + finished + ") & echo hi"
	got := execFollow(t, a, sandbox.ExecRequest{Shell: shell, Timeout: time.Minute}, 0)
	if !bytes.Contains(got.stdout, []byte("hi\n")) { // the descendant may print before it
		t.Errorf("stdout = %q, want hi in it", got.stdout)
	}
	if exists(finished) {
		t.Errorf("the result came after the descendant's end: it waited for the descendant")
	}
	// The descendant was not killed by EPIPE: it finishes its loop (~5 s).
	deadline := time.Now().Add(30 * time.Second)
	for !exists(finished) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !exists(finished) {
		t.Errorf("the descendant never finished: it died writing to the closed stream")
	}
}
