package wire

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func TestValues(t *testing.T) {
	w := &Writer{}
	w.Uint(math.MaxUint64)
	w.Int(math.MinInt64)
	w.Bool(true)
	w.Bytes([]byte{0, 1, 2})
	w.String("héllo")
	w.Strings([]string{"", "a"})
	w.Ints([]int{-1, 0, 1 << 40})
	w.Map(map[string]string{"b": "2", "a": "1"})
	w.Bytes(nil)
	w.Strings(nil)
	r := NewReader(w.B)
	if v := r.Uint(); v != math.MaxUint64 {
		t.Errorf("Uint = %d", v)
	}
	if v := r.Int(); v != math.MinInt64 {
		t.Errorf("Int = %d", v)
	}
	if !r.Bool() {
		t.Errorf("Bool = false")
	}
	if v := r.Bytes(); !slices.Equal(v, []byte{0, 1, 2}) {
		t.Errorf("Bytes = %v", v)
	}
	if v := r.String(); v != "héllo" {
		t.Errorf("String = %q", v)
	}
	if v := r.Strings(); !slices.Equal(v, []string{"", "a"}) {
		t.Errorf("Strings = %q", v)
	}
	if v := r.Ints(); !slices.Equal(v, []int{-1, 0, 1 << 40}) {
		t.Errorf("Ints = %v", v)
	}
	if v := r.Map(); len(v) != 2 || v["a"] != "1" || v["b"] != "2" {
		t.Errorf("Map = %v", v)
	}
	if r.Bytes() != nil || r.Strings() != nil {
		t.Errorf("empty lists did not read as nil")
	}
	if err := r.Err(); err != nil {
		t.Errorf("Err = %v", err)
	}
	// Maps are written in key order: the same map, the same bytes.
	a, b := &Writer{}, &Writer{}
	a.Map(map[string]string{"x": "1", "y": "2", "z": "3"})
	b.Map(map[string]string{"z": "3", "y": "2", "x": "1"})
	if !slices.Equal(a.B, b.B) {
		t.Errorf("one map, two encodings")
	}
}

// A corrupt record fails with an error, never a panic or an allocation
// beyond its size; so does one with bytes left over.
func TestCorrupt(t *testing.T) {
	huge := (&Writer{})
	huge.Uint(1 << 60)
	for name, c := range map[string]struct {
		b    []byte
		read func(*Reader)
		want string
	}{
		"a length past the end":   {huge.B, func(r *Reader) { r.Strings() }, "ends early"},
		"a byte slice too long":   {huge.B, func(r *Reader) { r.Bytes() }, "ends early"},
		"a map too long":          {huge.B, func(r *Reader) { r.Map() }, "ends early"},
		"a count too long":        {huge.B, func(r *Reader) { r.Count(3) }, "ends early"},
		"nothing for a uint":      {nil, func(r *Reader) { r.Uint() }, "ends early"},
		"an unfinished varint":    {[]byte{0x80}, func(r *Reader) { r.Int() }, "ends early"},
		"a boolean of 2":          {[]byte{2}, func(r *Reader) { r.Bool() }, "a boolean of 2"},
		"bytes after the record":  {[]byte{1, 1}, func(r *Reader) { r.Bool() }, "1 bytes after"},
		"reads after the failure": {[]byte{0x80}, func(r *Reader) { r.Int(); _ = r.String(); r.Bool() }, "ends early"},
	} {
		r := NewReader(c.b)
		c.read(r)
		if err := r.Err(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Err = %v, want %q", name, err, c.want)
		}
	}
}
