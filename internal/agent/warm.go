// This file implements the agent's warm-up: work a sandbox's first exec would
// otherwise do, done once the agent serves, while a warm sandbox waits in the
// pool.

package agent

import (
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/procmaps"
)

// warmIdle is how long the agent waits without a request before it warms up.
// Long enough that a sandbox made, used and deleted within moments (one per
// tool call, an evaluation's rollouts) is never warmed just before it goes:
// at 10 ms, create+exec+destroy cycles of 4 workers warmed many of theirs
// between the exec and the delete. A sandbox the pool keeps asks for its
// warm-up at once (Server.Warm).
const warmIdle = 200 * time.Millisecond

// activity tracks the requests the agent serves, for whenIdle.
type activity struct {
	inFlight atomic.Int64
	last     atomic.Int64 // time.Now().UnixNano() when a request last began or ended
}

// track wraps h so that its requests count as activity.
func (a *activity) track(h http.Handler) http.Handler {
	a.last.Store(time.Now().UnixNano())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.inFlight.Add(1)
		a.last.Store(time.Now().UnixNano())
		defer func() {
			a.last.Store(time.Now().UnixNano())
			a.inFlight.Add(-1)
		}()
		h.ServeHTTP(w, r)
	})
}

// whenIdle runs f once no request has been in flight for d.
func (a *activity) whenIdle(d time.Duration, f func()) {
	for {
		quiet := time.Duration(time.Now().UnixNano() - a.last.Load())
		if a.inFlight.Load() == 0 && quiet >= d {
			f()
			return
		}
		time.Sleep(max(d-quiet, time.Millisecond))
	}
}

// warmUp maps the program's code. (The exec path's messages need no
// warming: protocodec encodes them without protobuf's reflection.)
func warmUp() {
	populateText() // an old kernel's refusal changes nothing
}

// populateText maps every page of this program's executable segments in one
// madvise(MADV_POPULATE_READ) per segment, instead of one page fault per
// fault-around window on each code path's first use (the first exec takes
// many). Kernels before 5.14 refuse the advice; nothing else changes then.
// The pages are the binary's page cache, shared by every agent: RSS grows by
// the code not yet touched (~2 MB), PSS by that divided among the agents. It
// returns the kernel's refusal, if any.
func populateText() error {
	return procmaps.Advise(fileCode, unix.MADV_POPULATE_READ)
}

// fileCode reports whether a mapping is code from a file: executable, not
// anonymous, not [vdso] or [vsyscall].
func fileCode(m procmaps.Mapping) bool {
	return m.Perms == "r-xp" && m.Path != "" && !strings.HasPrefix(m.Path, "[")
}
