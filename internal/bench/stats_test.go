package bench

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	got := summarize(s)
	want := Summary{N: 100, P50MS: 50, P90MS: 90, P99MS: 99, MinMS: 1, MaxMS: 100}
	if got != want {
		t.Errorf("summarize(1..100 ms) = %+v, want %+v", got, want)
	}
	if got := summarize(nil); got != (Summary{}) {
		t.Errorf("summarize(nil) = %+v, want zero", got)
	}
}
