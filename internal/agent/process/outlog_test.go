package process

import (
	"bytes"
	"testing"
	"time"
)

// The ring holds the last size bytes at their absolute offsets, however the
// writes fall against its end.
func TestOutputLogRing(t *testing.T) {
	var all []byte
	l := newOutputLog(10)
	now := time.Now()
	for i, w := range []string{"abc", "defgh", "ij", "klmno", "", "pqrstuvwxyz0123", "4", "56789"} {
		l.write([]byte(w), now)
		all = append(all, w...)
		if l.end != int64(len(all)) {
			t.Fatalf("write %d: end %d, want %d", i, l.end, len(all))
		}
		start := max(0, int64(len(all))-10)
		if l.start() != start {
			t.Fatalf("write %d: start %d, want %d", i, l.start(), start)
		}
		for from := start; from <= l.end; from++ {
			for _, n := range []int64{1, 3, 10, 100} {
				want := all[from:min(int64(len(all)), from+n)]
				if got := l.read(from, n); !bytes.Equal(got, want) {
					t.Fatalf("write %d: read(%d, %d) = %q, want %q", i, from, n, got, want)
				}
			}
		}
	}
	if len(l.buf) != 10 {
		t.Errorf("the ring holds %d bytes, want its size, 10", len(l.buf))
	}
}

// A log grows with what is written, not to its size at once.
func TestOutputLogGrows(t *testing.T) {
	l := newOutputLog(MaxOutputLog)
	l.write([]byte("hello"), time.Now())
	if cap(l.buf) > 1024 {
		t.Errorf("a 64 MiB log holding 5 bytes has %d allocated", cap(l.buf))
	}
	if got := l.read(0, 100); string(got) != "hello" {
		t.Errorf("read = %q", got)
	}
}
