// This file holds the floors: for each latency and throughput target, the
// least any sandbox of sbx's design (a daemon serving the API, an agent
// process in the sandbox's own namespaces) pays on this machine, summed from
// parts measured in the same run. A target whose floor misses it cannot be
// met by cutting sbx's own work; one whose floor meets it says how much of
// the figure is sbx's own work left to cut.

package bench

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"text/tabwriter"
	"time"
)

// AgentCaller is an API that can make a call reaching a sandbox's agent
// that does no work there.
type AgentCaller interface {
	// AgentCall makes one such call through the daemon (a stat of the
	// sandbox's root).
	AgentCall(ctx context.Context, id string) error
}

// FloorPart is one measured part of a floor.
type FloorPart struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
}

// Floor is the least a target's figure can be in sbx's design, on this
// machine, now: the sum of its parts (or, for a rate, the rate of its one
// part), beside the target's peer.
type Floor struct {
	// Target is the figure of the target it bounds (Target.Figure).
	Target    string      `json:"target"`
	Parts     []FloorPart `json:"parts"`
	Value     float64     `json:"value"`
	Unit      string      `json:"unit"`
	Peer      string      `json:"peer"`
	PeerValue float64     `json:"peer_value"`
	Ratio     float64     `json:"ratio"`
	Want      string      `json:"want"`
	// Reachable is whether the floor itself meets the target: if not, no
	// cut of sbx's own work can.
	Reachable bool `json:"reachable"`
	// Left is the figure's own distance above its floor, in Unit (what
	// sbx's own work costs beyond the design's least).
	Left float64 `json:"left"`
}

// FloorParts are the floors' parts not measured elsewhere in the report.
type FloorParts struct {
	// AgentCall is an API call through the daemon to a sandbox's agent that
	// does next to no work there (a stat of its root): the transport of
	// every exec.
	AgentCall *Summary `json:"agent_call,omitempty"`
	// NamespacesOneShot is util-linux unshare running `true` in fresh
	// namespaces (those of the throughput peer), one at a time.
	NamespacesOneShot *Summary `json:"namespaces_one_shot,omitempty"`
	// AgentStart is the sandbox's program (sbx-agent) started and ended by
	// this process: exec, the Go runtime and package initialisers, main.
	AgentStart *Summary `json:"agent_start,omitempty"`
	// NamespacesAgentThroughput is unshare running the sandbox's program in
	// fresh namespaces, per second with Concurrency workers: each sandbox
	// needs its namespaces and one start of its agent at least.
	NamespacesAgentThroughput float64 `json:"namespaces_agent_runs_per_second,omitempty"`
	// Unavailable says why a part was not measured.
	Unavailable []string `json:"unavailable,omitempty"`
}

// measureFloors samples the floors' own parts into rep.FloorParts; id is a
// live sandbox for the agent call.
func measureFloors(ctx context.Context, api API, id string, opts Options, rep *Report) error {
	fp := &FloorParts{}
	rep.FloorParts = fp
	if ac, ok := api.(AgentCaller); ok && id != "" {
		opts.progress("floor: %d warm-up + %d calls through the daemon to the agent", opts.Warmup, opts.Runs)
		s, err := sample(opts, timed(func() error { return ac.AgentCall(ctx, id) }))
		if err != nil {
			return err
		}
		fp.AgentCall = &s
	} else {
		fp.Unavailable = append(fp.Unavailable, "agent call: this API cannot make one")
	}
	return nil
}

// measureHostFloors samples the floors' parts that need no daemon: the bare
// namespaces one at a time, the agent's start, and both together with
// Concurrency workers.
func measureHostFloors(ctx context.Context, opts Options, rep *Report) {
	fp := rep.FloorParts
	if fp == nil {
		fp = &FloorParts{}
		rep.FloorParts = fp
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		fp.Unavailable = append(fp.Unavailable, "namespaces: unshare not installed (Debian package util-linux)")
	} else {
		opts.progress("floor: %d warm-up + %d one-shot runs of unshare … true", opts.Warmup, opts.Runs)
		if s, err := sample(opts, func() (time.Duration, error) { return runUnshare(ctx, unshare, trueArgv...) }); err != nil {
			fp.Unavailable = append(fp.Unavailable, err.Error())
		} else {
			fp.NamespacesOneShot = &s
		}
	}
	if opts.AgentBinary == "" {
		fp.Unavailable = append(fp.Unavailable, "agent start: no sandbox program to start (a private native daemon seals one)")
		return
	}
	opts.progress("floor: %d warm-up + %d starts of the sandbox's program", opts.Warmup, opts.Runs)
	s, err := sample(opts, func() (time.Duration, error) { return agentStart(ctx, opts.AgentBinary, nil) })
	if err != nil {
		fp.Unavailable = append(fp.Unavailable, err.Error())
		return
	}
	fp.AgentStart = &s
	if unshare == "" {
		return
	}
	opts.progress("floor: %d runs of unshare … sbx-agent with %d workers", opts.Cycles, opts.Concurrency)
	rate, err := parallel(ctx, opts.Concurrency, opts.Cycles, func() error {
		_, err := agentStart(ctx, unshare, unshareArgs(opts.AgentBinary))
		return err
	})
	if err != nil {
		fp.Unavailable = append(fp.Unavailable, err.Error())
		return
	}
	fp.NamespacesAgentThroughput = rate
}

// agentStartExit is how the sandbox's program ends when started with no
// stage to run: it says so and exits 2.
const agentStartExit = 2

// agentStart runs path with args, which must end as the sandbox's program
// ends when it has no stage to run, and returns how long it took.
func agentStart(ctx context.Context, path string, args []string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == agentStartExit {
		return d, nil
	}
	if err == nil {
		err = fmt.Errorf("exited 0")
	}
	return 0, fmt.Errorf("starting the sandbox's program %s: %v (want exit status %d): %s", path, err, agentStartExit, strings.TrimSpace(stderr.String()))
}

// floors fills r.Floors from the parts measured, each against its ratio
// target (r.Targets: the figure, its peer and bound); a target some part of
// whose floor was not measured gets none.
func (r *Report) floors() {
	r.Floors = nil
	fp := r.FloorParts
	if fp == nil {
		return
	}
	targets := map[string]Target{}
	for _, t := range r.Targets {
		targets[t.Figure] = t
	}
	p50 := func(s *Summary) float64 {
		if s == nil {
			return 0
		}
		return s.P50MS
	}
	// floor sums parts (a latency's) or takes its one part (a rate's).
	floor := func(figure string, parts ...FloorPart) {
		t, ok := targets[figure]
		if !ok || !t.b.ratio || t.PeerValue <= 0 {
			return
		}
		f := Floor{Target: figure, Parts: parts, Unit: t.Unit, Peer: t.Peer, PeerValue: t.PeerValue, Want: t.Want}
		for _, p := range parts {
			if p.Value <= 0 {
				return
			}
			f.Value += p.Value
		}
		f.Ratio = f.Value / t.PeerValue
		f.Reachable = t.b.meets(f.Ratio)
		if t.b.atMost {
			f.Left = max(t.Value-f.Value, 0)
		} else {
			f.Left = max(f.Value-t.Value, 0)
		}
		r.Floors = append(r.Floors, f)
	}
	call := FloorPart{"API call through the daemon to the agent", p50(fp.AgentCall)}
	spawn := FloorPart{"host spawn of true", r.HostSpawn.P50MS}
	create := FloorPart{"API round trip (the create)", p50(r.RoundTrip)}
	floor("exec in a live sandbox p50", spawn, call)
	floor("create → first exec p50, pool full", create, spawn, call)
	floor("create → first exec p50, pool off",
		FloorPart{"unshare … true, one shot", p50(fp.NamespacesOneShot)},
		FloorPart{"start of the sandbox's program (sbx-agent)", p50(fp.AgentStart)}, create, call)
	floor(fmt.Sprintf("create+exec+destroy, %d workers", r.Concurrency),
		FloorPart{"unshare … sbx-agent", fp.NamespacesAgentThroughput})
}

// writeFloors prints the floors after the targets.
func (r Report) writeFloors(w io.Writer) {
	if len(r.Floors) == 0 {
		return
	}
	fmt.Fprintln(w, "\nfloor of sbx's design (daemon + agent), parts measured in this run")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "target\tfloor\tparts\tratio\twant\treachable\tsbx beyond it\n")
	for _, f := range r.Floors {
		parts := make([]string, len(f.Parts))
		for i, p := range f.Parts {
			parts[i] = fmt.Sprintf("%s %.2f", p.Name, p.Value)
		}
		yes := "no"
		if f.Reachable {
			yes = "yes"
		}
		fmt.Fprintf(tw, "%s\t%.2f %s\t%s\t%.2fx\t%s\t%s\t%.2f %s\n", f.Target, f.Value, f.Unit, strings.Join(parts, " + "), f.Ratio, f.Want, yes, f.Left, f.Unit)
	}
	tw.Flush()
	if fp := r.FloorParts; fp != nil {
		for _, u := range fp.Unavailable {
			fmt.Fprintf(w, "floor: %s\n", u)
		}
	}
}
