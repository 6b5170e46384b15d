// This file implements per-key and global limits (SECURITY.md AP-11, RS-14,
// RL-06): live sandboxes per API key and in all, and token buckets for each
// key's create and exec rates. A create reserves its place under one mutex
// before any side effect, so a burst cannot over-admit and a refused create
// leaves nothing behind; the place is freed when the create fails or the
// sandbox's record is deleted.

package manager

import (
	"fmt"
	"math"
	"sync"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

// Limits bound what each API key, and all keys together, may hold and do. A zero
// field means unlimited. The admin key is limited like any other.
type Limits struct {
	// MaxSandboxes bounds the live sandboxes of all keys together: every
	// sandbox with a record (creating, running, being deleted, failed), and
	// creates waiting in the queue. Warm-pool sandboxes count once handed out.
	MaxSandboxes int
	// MaxSandboxesPerKey bounds each key's live sandboxes, counted the same way.
	MaxSandboxesPerKey int
	// CreateRate is each key's sustained creates per second; CreateBurst is how
	// many it may make at once (0: the rate rounded up, at least 1).
	CreateRate  float64
	CreateBurst int
	// ExecRate and ExecBurst are the same for each key's exec calls.
	ExecRate  float64
	ExecBurst int
}

// countRetryAfter is the Retry-After of a refusal by count: a delete may free
// a place at any moment.
const countRetryAfter = time.Second

// bucket is a token bucket: it holds up to burst tokens and gains rate a second.
type bucket struct {
	tokens float64
	at     time.Time
}

// take refills b for the time since its last use and takes one token. When
// there is none it takes nothing and returns how long until one is there.
func (b *bucket) take(now time.Time, rate float64, burst int) (time.Duration, bool) {
	if b.at.IsZero() {
		b.tokens = float64(burst)
	} else if dt := now.Sub(b.at).Seconds(); dt > 0 {
		b.tokens = math.Min(float64(burst), b.tokens+dt*rate)
	}
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	return time.Duration((1 - b.tokens) / rate * float64(time.Second)), false
}

// burstOf is burst, or the rate rounded up (at least 1) when burst is 0.
func burstOf(rate float64, burst int) int {
	if burst > 0 {
		return burst
	}
	return max(1, int(math.Ceil(rate)))
}

// limiter counts live sandboxes and holds the rate buckets. It is safe for
// concurrent use.
type limiter struct {
	lim Limits

	mu sync.Mutex
	// Everything below is guarded by mu.
	total   int                   // places taken: reserved or owned
	perKey  map[string]int        // places taken per key
	owner   map[sandbox.ID]string // counted sandboxes and their key
	creates map[string]*bucket
	execs   map[string]*bucket
}

func newLimiter(lim Limits) *limiter {
	return &limiter{lim: lim, perKey: map[string]int{}, owner: map[sandbox.ID]string{},
		creates: map[string]*bucket{}, execs: map[string]*bucket{}}
}

// reservation is one create's place, taken before any side effect. It is bound
// to the sandbox's id once the id is known, and then freed by the record's
// deletion (release) or by the create's failure (cancel), whichever is first.
type reservation struct {
	key  string
	id   sandbox.ID // set by bind
	done bool       // cancelled; guarded by limiter.mu
}

// keyLabel names key in messages.
func keyLabel(key string) string {
	if key == "" {
		return "key (none)"
	}
	return "key " + key
}

// reserve takes a place for one create by key, checking the global and per-key
// counts and then key's create rate, atomically: a refused create consumes
// nothing. Its errors wrap sandbox.ErrLimit in a *RetryError.
func (l *limiter) reserve(key string, now time.Time) (*reservation, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.lim.MaxSandboxes; n > 0 && l.total >= n {
		return nil, &RetryError{After: countRetryAfter, Err: fmt.Errorf(
			"%w: the daemon has %d live sandboxes, the limit is %d (max_sandboxes)", sandbox.ErrLimit, l.total, n)}
	}
	if n := l.lim.MaxSandboxesPerKey; n > 0 && l.perKey[key] >= n {
		return nil, &RetryError{After: countRetryAfter, Err: fmt.Errorf(
			"%w: %s has %d live sandboxes, the limit is %d (max_sandboxes_per_key)", sandbox.ErrLimit, keyLabel(key), l.perKey[key], n)}
	}
	if rate := l.lim.CreateRate; rate > 0 {
		if err := takeToken(l.creates, key, now, rate, l.lim.CreateBurst, "create"); err != nil {
			return nil, err
		}
	}
	l.total++
	l.perKey[key]++
	return &reservation{key: key}, nil
}

// takeToken takes a token from key's bucket in buckets; l.mu is held.
func takeToken(buckets map[string]*bucket, key string, now time.Time, rate float64, burst int, what string) error {
	b := buckets[key]
	if b == nil {
		b = &bucket{}
		buckets[key] = b
	}
	burst = burstOf(rate, burst)
	wait, ok := b.take(now, rate, burst)
	if ok {
		return nil
	}
	return &RetryError{After: max(wait, time.Millisecond), Err: fmt.Errorf(
		"%w: %s is over its %s rate of %g/s (burst %d, %s_rate_per_key); retry in %s",
		sandbox.ErrLimit, keyLabel(key), what, rate, burst, what, wait.Round(time.Millisecond))}
}

// bind ties r to sandbox id, replacing an earlier binding (a warm hand-out that
// failed before a cold start).
func (l *limiter) bind(r *reservation, id sandbox.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.done {
		return
	}
	if r.id != "" {
		delete(l.owner, r.id)
	}
	r.id = id
	l.owner[id] = r.key
}

// cancel frees r's place after a failed create, unless the record's deletion
// freed it already. It is idempotent.
func (l *limiter) cancel(r *reservation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.done {
		return
	}
	r.done = true
	if r.id != "" {
		if _, counted := l.owner[r.id]; !counted {
			return // released by a delete that won the race
		}
		delete(l.owner, r.id)
	}
	l.free(r.key)
}

// release frees the place of sandbox id once its record is deleted; it does
// nothing for a sandbox no place was counted for (a warm one). It is idempotent.
func (l *limiter) release(id sandbox.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key, ok := l.owner[id]
	if !ok {
		return
	}
	delete(l.owner, id)
	l.free(key)
}

// free gives back one place of key; l.mu is held.
func (l *limiter) free(key string) {
	l.total = max(0, l.total-1)
	if l.perKey[key] <= 1 {
		delete(l.perKey, key)
	} else {
		l.perKey[key]--
	}
}

// allowExec takes a token from key's exec bucket. Its error wraps
// sandbox.ErrLimit in a *RetryError.
func (l *limiter) allowExec(key string, now time.Time) error {
	if l.lim.ExecRate <= 0 {
		return nil // unlimited: no lock on the exec path
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return takeToken(l.execs, key, now, l.lim.ExecRate, l.lim.ExecBurst, "exec")
}

// rebuild replaces the counts with owners, each sandbox id and its key, as
// Recover finds them in the store. Reservations in flight are not expected:
// Recover runs before the manager serves.
func (l *limiter) rebuild(owners map[sandbox.ID]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.owner = make(map[sandbox.ID]string, len(owners))
	l.perKey = map[string]int{}
	l.total = 0
	for id, key := range owners {
		l.owner[id] = key
		l.perKey[key]++
		l.total++
	}
}

// counts returns the places taken by key and in all.
func (l *limiter) counts(key string) (perKey, total int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.perKey[key], l.total
}
