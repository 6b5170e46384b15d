package backend

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

func TestRegistry(t *testing.T) {
	var r Registry[*int]
	a, b := new(int), new(int)
	id := sandbox.ID("3xqbfdg2lq7zkcbvxcdsqzjv5a")
	if err := r.Claim(id, a); err != nil {
		t.Fatal(err)
	}
	if err := r.Claim(id, b); !errors.Is(err, sandbox.ErrExists) || sandbox.IDOf(err) != id {
		t.Errorf("second Claim = %v, want already exists naming %s", err, id)
	}
	r.Forget(id, b) // not what id holds: no effect
	if got, ok := r.Get(id); !ok || got != a {
		t.Errorf("Get after Forget of another = %v, %v", got, ok)
	}
	if got := r.Adopt(id, b, func(*int) bool { return true }); got != a {
		t.Errorf("Adopt keeping the held one returned %p, want %p", got, a)
	}
	if got := r.Adopt(id, b, func(*int) bool { return false }); got != b {
		t.Errorf("Adopt replacing returned %p, want %p", got, b)
	}
	r.Forget(id, b)
	if _, ok := r.Get(id); ok {
		t.Errorf("Get after Forget found the record")
	}
}

// A pinned process is held only while it is the one that started at the
// recorded time; its watch sees it exit.
// sleeper starts a process that lives for a minute (killed at the test's
// end) and returns it with its start time.
func sleeper(t *testing.T) (*exec.Cmd, uint64) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	start, err := ProcStart(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, start
}

func TestPinAndWatch(t *testing.T) {
	cmd, start := sleeper(t)
	if _, err := Pin(cmd.Process.Pid, start+1); err == nil {
		t.Fatalf("Pin with another start time succeeded: a reused pid would be taken for the process")
	}
	p, err := Pin(cmd.Process.Pid, start)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Watch()
	if p.Exited() {
		t.Fatalf("a running process counts as exited")
	}
	cmd.Process.Kill()
	cmd.Wait()
	select {
	case <-p.Done():
	case <-time.After(time.Minute):
		t.Fatal("the watch did not see the process exit")
	}
	if e := p.ExitStatus(); e.Code != -1 || e.Reason != sandbox.ReasonExited {
		t.Errorf("exit of a pinned process = %+v, want code -1 (unknown)", e)
	}
	var none Proc
	if !none.Exited() || none.Held() {
		t.Errorf("the zero Proc: exited %v, held %v; want exited, not held", none.Exited(), none.Held())
	}
}

// A signal arriving as the watch polls (the runtime's own preemption
// signal, among others) is not the process's exit: many watches of a
// process that lives on, with signals sent to this process all along, all
// still wait.
func TestWatchSurvivesSignals(t *testing.T) {
	cmd, start := sleeper(t)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGWINCH)
	defer signal.Stop(sigs)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				syscall.Kill(os.Getpid(), syscall.SIGWINCH)
			}
		}
	}()
	var watches []*Proc
	for range 3000 {
		p, err := Pin(cmd.Process.Pid, start)
		if err != nil {
			t.Fatal(err)
		}
		p.Watch()
		watches = append(watches, p)
	}
	time.Sleep(100 * time.Millisecond)
	exited := 0
	for _, p := range watches {
		if p.Exited() {
			exited++
		}
		p.Close()
	}
	if exited > 0 {
		t.Errorf("%d of %d watches of a running process said it exited", exited, len(watches))
	}
}
