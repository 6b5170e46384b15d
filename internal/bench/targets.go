// This file holds the bench's targets: each a ratio to the figure's peer
// measured in the same run (so it holds on any machine), or a bound on memory.

package bench

import "fmt"

// Target is one target of the report, judged against this run's figures.
type Target struct {
	Figure string  `json:"figure"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	// Peer and PeerValue are the figure's peer in the same run; absent for an
	// absolute bound.
	Peer      string  `json:"peer,omitempty"`
	PeerValue float64 `json:"peer_value,omitempty"`
	// Ratio is Value / PeerValue (0 for an absolute bound).
	Ratio float64 `json:"ratio,omitempty"`
	// Want is the target as printed: "≤ 1.5x", "≥ 0.5x", "≤ 50 MB".
	Want string `json:"want"`
	// Met is false also when the figure or its peer was not measured
	// (Unmeasured then says why).
	Met        bool   `json:"met"`
	Unmeasured string `json:"unmeasured,omitempty"`

	b bound // what Want says
}

// target kinds: a ratio to a peer at most or at least limit, or a value at most limit.
type bound struct {
	atMost bool
	limit  float64
	ratio  bool
}

func (b bound) want(unit string) string {
	op := "≥"
	if b.atMost {
		op = "≤"
	}
	if b.ratio {
		return fmt.Sprintf("%s %gx", op, b.limit)
	}
	return fmt.Sprintf("%s %g %s", op, b.limit, unit)
}

func judge(figure string, value float64, unit, peer string, peerValue float64, b bound) Target {
	t := Target{Figure: figure, Value: value, Unit: unit, Want: b.want(unit), b: b}
	if b.ratio {
		t.Peer, t.PeerValue = peer, peerValue
	}
	switch {
	case value <= 0:
		t.Unmeasured = figure + " was not measured"
		return t
	case b.ratio && peerValue <= 0:
		t.Unmeasured = peer + " was not measured"
		return t
	}
	x := value
	if b.ratio {
		t.Ratio = value / peerValue
		x = t.Ratio
	}
	t.Met = b.meets(x)
	return t
}

// meets reports whether x (a ratio, for a ratio bound) is within b.
func (b bound) meets(x float64) bool {
	if b.atMost {
		return x <= b.limit
	}
	return x >= b.limit
}

// Judge fills r.Targets from the figures measured: the targets of a sandbox
// that costs close to the bare kernel work (ratios to bubblewrap and to a
// plain host spawn), and the memory bounds.
func (r *Report) Judge() {
	const bwrap, spawn = "bwrap one-shot true", "host spawn of true"
	var b50, b90 float64
	if r.BwrapOneShot != nil {
		b50, b90 = r.BwrapOneShot.P50MS, r.BwrapOneShot.P90MS
	}
	r.Targets = []Target{
		judge("create → first exec p50, pool full", r.ColdStart.P50MS, "ms", bwrap, b50, bound{atMost: true, limit: 0.6, ratio: true}),
	}
	if c := r.ColdStartNoPool; c != nil {
		r.Targets = append(r.Targets, judge("create → first exec p50, pool off", c.P50MS, "ms", bwrap, b50, bound{atMost: true, limit: 1.5, ratio: true}))
	}
	if c := r.ColdStartBackToBack; c != nil {
		r.Targets = append(r.Targets, judge("create → first exec p90, back to back", c.P90MS, "ms", bwrap+" p90", b90, bound{atMost: true, limit: 2, ratio: true}))
	}
	r.Targets = append(r.Targets,
		judge("exec in a live sandbox p50", r.Exec.P50MS, "ms", spawn, r.HostSpawn.P50MS, bound{atMost: true, limit: 1.5, ratio: true}),
		judge(fmt.Sprintf("create+exec+destroy, %d workers", r.Concurrency), r.Throughput, "/s", bwrap, r.BwrapThroughput, bound{limit: 0.5, ratio: true}),
	)
	if e := r.E2B; e != nil {
		r.Targets = append(r.Targets, judge("E2B SDK create → first commands.run p50, pool full", e.SDK.P50MS, "ms", "", 0, bound{atMost: true, limit: E2BTargetMS}))
	}
	if r.Echo != nil {
		r.Targets = append(r.Targets, judge("terminal echo (write_stdin) p50", r.Echo.P50MS, "ms", "exec in a live sandbox", r.Exec.P50MS, bound{atMost: true, limit: 2, ratio: true}))
	}
	if r.StreamMB > 0 {
		r.Targets = append(r.Targets, judge(fmt.Sprintf("%d MiB through sbx exec", r.StreamMB), r.StreamMBps, "MB/s", "sbx cp ID:file -", r.CopyMBps, bound{limit: 0.5, ratio: true}))
	}
	if n := r.Network; n != nil {
		// Differences to the same figure without the network: a tiny floor
		// keeps a difference lost in the noise from reading as unmeasured.
		added := func(with, without float64) float64 { return max(with-without, 0.001) }
		r.Targets = append(r.Targets,
			judge("network setup added to a pool-off create, p50", added(n.CreateAllowlist.P50MS, n.CreateNone.P50MS), "ms", "", 0, bound{atMost: true, limit: 3}),
			judge("egress proxy throughput (HTTP)", n.ProxyMBps, "MB/s", "", 0, bound{limit: 1000}),
			judge("egress proxy added per connection, p50", added(n.ProxyConn.P50MS, n.DirectConn.P50MS), "ms", "", 0, bound{atMost: true, limit: 1}),
		)
		if n.RelayMBps > 0 {
			// The same stream over the same two links through a relay that
			// only splices: what any TCP proxy costs at least, on this
			// machine, now.
			r.Targets = append(r.Targets, judge("egress proxy throughput, against a bare relay", n.ProxyMBps, "MB/s", "a bare relay, same links", n.RelayMBps, bound{limit: 0.8, ratio: true}))
		}
	}
	if r.IdleSandboxes > 0 && r.MemoryUnavailable == "" {
		r.Targets = append(r.Targets,
			judge(fmt.Sprintf("daemon RSS, %d idle sandboxes", r.IdleSandboxes), r.DaemonRSSMB, "MB", "", 0, bound{atMost: true, limit: 50}),
			judge("agent PSS per idle sandbox", r.AgentPSSMB, "MB", "", 0, bound{atMost: true, limit: 3}),
		)
	}
	r.floors()
}

// TargetsMet counts the targets met and the targets judged.
func (r Report) TargetsMet() (met, all int) {
	for _, t := range r.Targets {
		if t.Met {
			met++
		}
	}
	return met, len(r.Targets)
}
