package ringlog

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"
)

// The ring holds the last size bytes at their absolute offsets, however the
// writes fall against its end.
func TestRing(t *testing.T) {
	var all []byte
	l := New(10)
	now := time.Now()
	for i, w := range []string{"abc", "defgh", "ij", "klmno", "", "pqrstuvwxyz0123", "4", "56789"} {
		l.Write([]byte(w), now)
		all = append(all, w...)
		if l.End() != int64(len(all)) {
			t.Fatalf("write %d: end %d, want %d", i, l.End(), len(all))
		}
		start := max(0, int64(len(all))-10)
		if l.Start() != start {
			t.Fatalf("write %d: start %d, want %d", i, l.Start(), start)
		}
		for from := start; from <= l.End(); from++ {
			for _, n := range []int64{1, 3, 10, 100} {
				want := all[from:min(int64(len(all)), from+n)]
				if got := l.Read(from, n); !bytes.Equal(got, want) {
					t.Fatalf("write %d: Read(%d, %d) = %q, want %q", i, from, n, got, want)
				}
			}
		}
	}
	if l.Held() != 10 {
		t.Errorf("the ring holds %d bytes, want its size, 10", l.Held())
	}
}

// A log grows with what is written, not to its size at once.
func TestGrows(t *testing.T) {
	l := New(64 << 20)
	l.Write([]byte("hello"), time.Now())
	if cap(l.buf) > 1024 {
		t.Errorf("a 64 MiB log holding 5 bytes has %d allocated", cap(l.buf))
	}
	if got := l.Read(0, 100); string(got) != "hello" {
		t.Errorf("Read = %q", got)
	}
}

// Next waits with the owner's lock released, is woken by a write, lingers
// while more comes, and ends at the close with Alive false.
func TestNext(t *testing.T) {
	var mu sync.Mutex
	l := New(1 << 10)
	go func() {
		time.Sleep(20 * time.Millisecond)
		mu.Lock() // Next must have released it to be woken
		l.Write([]byte("a"), time.Now())
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		l.Write([]byte("b"), time.Now())
		l.Close()
		mu.Unlock()
	}()
	mu.Lock()
	c, err := l.Next(context.Background(), &mu, 0, 100, time.Second, time.Now().Add(10*time.Second), nil)
	for err == nil && c.Alive {
		c2, err2 := l.Next(context.Background(), &mu, c.Start+int64(len(c.Data)), 100, time.Second, time.Now().Add(10*time.Second), nil)
		c.Data, c.Alive, err = append(c.Data, c2.Data...), c2.Alive, err2
	}
	mu.Unlock()
	if err != nil || string(c.Data) != "ab" || c.Alive {
		t.Errorf("Next = %q alive %v, %v; want ab and the end", c.Data, c.Alive, err)
	}
	// Nothing comes: the deadline ends the wait, without error.
	m := New(10)
	mu.Lock()
	c, err = m.Next(context.Background(), &mu, 0, 10, 0, time.Now().Add(20*time.Millisecond), nil)
	mu.Unlock()
	if err != nil || len(c.Data) != 0 || !c.Alive {
		t.Errorf("Next on a quiet log = %+v, %v", c, err)
	}
	// ctx ending while it waits is the error, wrapped.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	mu.Lock()
	_, err = m.Next(ctx, &mu, 0, 10, 0, time.Now().Add(time.Second), func(e error) error { return &wrapped{e} })
	mu.Unlock()
	if _, ok := err.(*wrapped); !ok {
		t.Errorf("Next with an ended ctx = %v, want the wrapped ctx error", err)
	}
}

type wrapped struct{ error }
