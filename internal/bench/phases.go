// This file holds the pool-off create's breakdown by step: the daemon's own
// timing of each create ("create phases", the manager's, and "start phases",
// the native driver's with the steps the sandbox's init and agent mark),
// which a daemon logging at debug writes, read from its log in the same
// run. It says where the pool-off figure's distance above its floor goes.

package bench

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Phase is one step of a pool-off create, its median over the creates
// logged.
type Phase struct {
	Name  string  `json:"name"`
	P50MS float64 `json:"p50_ms"`
	N     int     `json:"n"`
}

// PhaseLog is an io.Writer for a daemon's log (slog's text form) that keeps
// the durations of its "create phases" and "start phases" lines, skipping
// the first Skip of each (the warm-ups). Safe for concurrent use.
type PhaseLog struct {
	Skip int

	mu    sync.Mutex
	part  []byte // the start of a line not ended yet
	seen  map[string]int
	order []string
	vals  map[string][]float64
}

// phaseMessages are the log lines read, and the prefix their steps get.
var phaseMessages = []struct{ msg, prefix string }{
	{`msg="create phases"`, "create."},
	{`msg="start phases"`, "start."},
}

func (l *PhaseLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.part = append(l.part, b...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			break
		}
		l.line(string(l.part[:i]))
		l.part = l.part[i+1:]
	}
	if len(l.part) > 64<<10 { // no line is this long: not a log
		l.part = l.part[:0]
	}
	return len(b), nil
}

// line keeps the steps of one log line, if it is a phases line.
func (l *PhaseLog) line(s string) {
	for _, m := range phaseMessages {
		if !strings.Contains(s, m.msg) {
			continue
		}
		if l.seen == nil {
			l.seen, l.vals = map[string]int{}, map[string][]float64{}
		}
		if l.seen[m.msg]++; l.seen[m.msg] <= l.Skip {
			return
		}
		for _, f := range strings.Fields(s) {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				continue
			}
			d, err := time.ParseDuration(v)
			if err != nil || k == "time" {
				continue
			}
			name := m.prefix + k
			if _, ok := l.vals[name]; !ok {
				l.order = append(l.order, name)
			}
			l.vals[name] = append(l.vals[name], float64(d)/float64(time.Millisecond))
		}
		return
	}
}

// Medians returns each step's median, in the order the log first named them.
func (l *PhaseLog) Medians() []Phase {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Phase, 0, len(l.order))
	for _, name := range l.order {
		v := l.vals[name]
		out = append(out, Phase{Name: name, P50MS: median(v), N: len(v)})
	}
	return out
}

// writePhases prints the pool-off create's steps after the floors.
func (r Report) writePhases(w io.Writer) {
	if len(r.ColdStartPhases) == 0 {
		return
	}
	fmt.Fprintf(w, "\npool-off create, step by step (medians of %d creates of a daemon logging at debug; start.jail.* are the sandbox's own marks)\n", r.ColdStartPhases[0].N)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "step\tp50\n")
	for _, p := range r.ColdStartPhases {
		fmt.Fprintf(tw, "%s\t%.3f ms\n", p.Name, p.P50MS)
	}
	tw.Flush()
}
