package process

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/internal/timerslack"
)

// An unlisted process runs as any other, but no caller sees it: it is not
// in the table's list while it runs nor after it exited. A listed one, the
// control, is.
func TestUnlistedProcess(t *testing.T) {
	tab := NewTable(Config{})
	t.Cleanup(tab.Close)
	dir := t.TempDir()
	env := []string{"PATH=" + os.Getenv("PATH")}
	start := func(unlisted bool) *Proc {
		t.Helper()
		p := runToEnd(t, tab, Spec{Argv: []string{"/bin/sh", "-c", "read x < /dev/null; echo ran"}, Env: env, Dir: dir, Timeout: time.Minute, Unlisted: unlisted})
		if r := p.Result(); r.ExitCode != 0 || strings.TrimSpace(string(r.Stdout)) != "ran" {
			t.Fatalf("result %+v, want exit 0 and \"ran\"", r)
		}
		return p
	}
	hidden := start(true)
	if _, ok := tab.Get(hidden.ID); ok {
		t.Errorf("the unlisted process %s is in the table", hidden.ID)
	}
	if l := tab.List(); len(l) != 0 {
		t.Errorf("List = %d processes after an unlisted one, want none", len(l))
	}
	shown := start(false)
	if _, ok := tab.Get(shown.ID); !ok {
		t.Errorf("the listed process %s is not in the table", shown.ID)
	}
	if l := tab.List(); len(l) != 1 || l[0] != shown {
		t.Errorf("List = %v, want the listed process alone", l)
	}
	// One that cannot start is not listed either.
	p, err := tab.Start(Spec{Argv: []string{"/no/such/program"}, Env: env, Dir: dir, Unlisted: true})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if _, ok := tab.Get(p.ID); ok || p.Result().ExitCode != 127 {
		t.Errorf("a missing unlisted program: listed %v, exit %d (want unlisted, 127)", ok, p.Result().ExitCode)
	}
}

// The processes the table starts have the kernel's default timer slack,
// whatever the agent's own (timerslack.Coarse, inherited from the spawner):
// forked directly and from the spawn thread. The control: a program the
// test process starts itself inherits the coarse one.
func TestWorkloadTimerSlack(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("coarsening the test's other threads needs CAP_SYS_NICE")
	}
	timerslack.Coarsen()
	env := []string{"PATH=" + os.Getenv("PATH")}
	read := func(cfg Config) string {
		t.Helper()
		tab := NewTable(cfg)
		defer tab.Close()
		p, err := tab.Start(Spec{Argv: []string{"cat", "/proc/self/timerslack_ns"}, Env: env, Dir: t.TempDir(), Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		<-p.Done()
		return strings.TrimSpace(string(p.Result().Stdout))
	}
	// The tables of earlier tests left the package's reaper running, which
	// may reap this child before its Wait does: its output is whole anyway.
	out, err := exec.Command("cat", "/proc/self/timerslack_ns").Output()
	if err != nil && !errors.Is(err, syscall.ECHILD) {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != strconv.Itoa(timerslack.Coarse) {
		t.Fatalf("a child of the coarsened test process: slack %s, want %d", got, timerslack.Coarse)
	}
	want := strconv.Itoa(timerslack.Default)
	if got := read(Config{}); got != want {
		t.Errorf("forked directly: slack %q, want %s", got, want)
	}
	if got := read(Config{Confine: func() error { return nil }}); got != want {
		t.Errorf("forked from the spawn thread: slack %q, want %s", got, want)
	}
}

// Bulk output reaches every follower whole, though its buffers are shared
// among them and reused once each has released them: one follower releases
// each event at once, the other keeps all of its own unreleased to the end,
// and both read back exactly what the process wrote.
func TestSharedOutputChunks(t *testing.T) {
	tab := NewTable(Config{})
	t.Cleanup(tab.Close)
	dir := t.TempDir()
	want := make([]byte, 6<<20)
	for i := range want {
		want[i] = byte(i*7 + i>>11)
	}
	if err := os.WriteFile(dir+"/data", want, 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := tab.Start(Spec{Argv: []string{"/bin/sh", "-c", "read x; cat data"}, Env: []string{"PATH=" + os.Getenv("PATH")},
		Dir: dir, Stdin: true, Timeout: time.Minute, NoSpill: true})
	if err != nil {
		t.Fatal(err)
	}
	fast, slow := p.Subscribe(false), p.Subscribe(false)
	if err := p.WriteStdin(t.Context(), []byte("go\n"), true); err != nil {
		t.Fatal(err)
	}
	var kept []Event
	read := func(s *Sub, keep bool) []byte {
		var got []byte
		take := func() {
			for _, ev := range s.Drain() {
				got = append(got, ev.Data...)
				if keep {
					kept = append(kept, ev)
				} else {
					ev.Release()
				}
			}
		}
		for {
			select {
			case <-s.Ready():
				take()
			case <-p.Done(): // every byte was queued before the result
				take()
				return got
			case <-time.After(time.Minute):
				t.Error("no output for a minute")
				return got
			}
		}
	}
	done := make(chan []byte)
	go func() { done <- read(fast, false) }()
	gotSlow := read(slow, true)
	gotFast := <-done
	var held []byte
	shared := 0
	for _, ev := range kept {
		held = append(held, ev.Data...)
		if ev.chunk != nil {
			shared++
		}
	}
	for name, got := range map[string][]byte{"releasing follower": gotFast, "keeping follower": gotSlow, "kept events, read again at the end": held} {
		if !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, want the %d the process wrote (first difference at %d)", name, len(got), len(want), firstDiff(got, want))
		}
	}
	if shared == 0 {
		t.Errorf("no event's buffer was shared: the test did not reach bulk reads")
	}
	for _, ev := range kept {
		ev.Release()
	}
	p.Unsubscribe(fast)
	p.Unsubscribe(slow)
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A short process leaves the agent little garbage: its streams' read
// buffers are reused, not made afresh (two of 32 KiB each). In a one-P
// agent, each collection stalls the exec it lands on.
func TestProcessGarbage(t *testing.T) {
	tab := NewTable(Config{})
	t.Cleanup(tab.Close)
	dir := t.TempDir()
	env := []string{"PATH=" + os.Getenv("PATH")}
	run := func() {
		t.Helper()
		if r := runToEnd(t, tab, Spec{Argv: []string{"true"}, Env: env, Dir: dir, Unlisted: true}).Result(); r.ExitCode != 0 {
			t.Fatalf("true exited %d", r.ExitCode)
		}
	}
	for range 5 {
		run()
	}
	const n = 40
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		run()
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / n
	t.Logf("%d bytes allocated per process", per)
	if per > 32<<10 {
		t.Errorf("%d bytes allocated per process, want at most %d", per, 32<<10)
	}
}

// runToEnd starts s in tab and waits, at most a minute, for its end.
func runToEnd(t *testing.T, tab *Table, s Spec) *Proc {
	t.Helper()
	p, err := tab.Start(s)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(time.Minute):
		t.Fatal("the process did not end")
	}
	return p
}
