// Package bench measures sbx against its peers in one run: cold start (create →
// first exec done), exec in a live sandbox, create+exec+destroy throughput, and the
// memory of idle sandboxes, beside the same workload under bubblewrap. It drives a
// daemon through the public API only.
package bench

import (
	"math"
	"slices"
	"time"
)

// Dist summarises a sample of durations.
type Dist struct {
	N             int     `json:"n"`
	P50, P90, P99 float64 `json:"-"`
	Min, Max      float64 `json:"-"`
}

// Summary is the JSON shape of a Dist, in milliseconds.
type Summary struct {
	N     int     `json:"n"`
	P50MS float64 `json:"p50_ms"`
	P90MS float64 `json:"p90_ms"`
	P99MS float64 `json:"p99_ms"`
	MinMS float64 `json:"min_ms"`
	MaxMS float64 `json:"max_ms"`
}

func summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	ms := make([]float64, len(samples))
	for i, d := range samples {
		ms[i] = float64(d) / float64(time.Millisecond)
	}
	slices.Sort(ms)
	return Summary{
		N:     len(ms),
		P50MS: quantile(ms, 0.50),
		P90MS: quantile(ms, 0.90),
		P99MS: quantile(ms, 0.99),
		MinMS: ms[0],
		MaxMS: ms[len(ms)-1],
	}
}

// quantile of sorted xs, nearest-rank.
func quantile(xs []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}
