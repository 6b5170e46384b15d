// This file implements the per-source rate limit and a bounded set of things
// already reported.

package dns

import (
	"net/netip"
	"sync"
	"time"
)

const maxBuckets = 4096 // sources tracked before idle ones are swept

// limiter is a token bucket per source address.
type limiter struct {
	rate, burst float64
	now         func() time.Time

	mu      sync.Mutex
	buckets map[netip.Addr]*bucket // guarded by mu
}

type bucket struct {
	tokens   float64
	last     time.Time // when tokens was computed
	reported time.Time // when a refusal was last reported
}

func newLimiter(rate, burst float64) *limiter {
	return &limiter{rate: rate, burst: max(burst, 1), now: time.Now, buckets: map[netip.Addr]*bucket{}}
}

// allow takes a token of src's bucket. When there is none, report says whether
// to log the refusal: at most once a second per source.
func (l *limiter) allow(src netip.Addr) (ok, report bool) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[src]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			l.sweep(now)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[src] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, false
	}
	if now.Sub(b.reported) >= time.Second {
		b.reported = now
		return false, true
	}
	return false, false
}

// sweep forgets the sources whose buckets have refilled (forgetting them
// changes nothing), and all of them if that is not enough; l.mu is held.
func (l *limiter) sweep(now time.Time) {
	for src, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst {
			delete(l.buckets, src)
		}
	}
	if len(l.buckets) >= maxBuckets {
		clear(l.buckets)
	}
}

// seenSet remembers up to max keys; when full it starts over, so a key may be
// reported again, never unboundedly often.
type seenSet struct {
	max  int
	mu   sync.Mutex
	seen map[string]bool // guarded by mu
}

func newSeenSet(max int) *seenSet { return &seenSet{max: max, seen: map[string]bool{}} }

// add reports whether key is new.
func (s *seenSet) add(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[key] {
		return false
	}
	if len(s.seen) >= s.max {
		clear(s.seen)
	}
	s.seen[key] = true
	return true
}

// throttle says whether to report a (source, rule) now: at most once a second
// each, so a flood of refusals costs one event a second.
type throttle struct {
	now  func() time.Time // nil means time.Now
	mu   sync.Mutex
	last map[throttleKey]time.Time // guarded by mu
}

type throttleKey struct {
	src  netip.Addr
	rule string
}

func (t *throttle) allow(src netip.Addr, rule string) bool {
	now := time.Now()
	if t.now != nil {
		now = t.now()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last == nil || len(t.last) >= maxBuckets {
		t.last = map[throttleKey]time.Time{}
	}
	k := throttleKey{src, rule}
	if now.Sub(t.last[k]) < time.Second {
		return false
	}
	t.last[k] = now
	return true
}
