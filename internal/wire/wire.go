// Package wire is a compact, positional binary encoding for what the daemon
// hands the processes it starts from its own binary (a sandbox's plan, an
// agent's configuration) and what they answer (the ready report). Both ends
// are the same build, so a record is a tag naming its kind, then its fields
// in a fixed order, with no field names. It exists for the start of a sandbox: encoding/json builds
// its per-type decoders by reflection in every fresh process, 0.2-0.3 ms of
// a sandbox's start for three small records; this is a few microseconds.
//
// A Writer appends; a Reader consumes and keeps the first error, so a
// decoder reads every field and checks Err once. Lengths are bounded by
// what is left to read: a corrupt record fails, it never allocates beyond
// its own size.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Writer appends values to B.
type Writer struct {
	B []byte
}

// Record starts a record of kind tag: Open checks it comes first.
func Record(tag string) *Writer {
	w := &Writer{}
	w.String(tag)
	return w
}

// Uint appends v.
func (w *Writer) Uint(v uint64) { w.B = binary.AppendUvarint(w.B, v) }

// Int appends v.
func (w *Writer) Int(v int64) { w.B = binary.AppendVarint(w.B, v) }

// Bool appends v.
func (w *Writer) Bool(v bool) {
	if v {
		w.B = append(w.B, 1)
	} else {
		w.B = append(w.B, 0)
	}
}

// Bytes appends v's length, then v.
func (w *Writer) Bytes(v []byte) {
	w.Uint(uint64(len(v)))
	w.B = append(w.B, v...)
}

// String appends v's length, then v.
func (w *Writer) String(v string) {
	w.Uint(uint64(len(v)))
	w.B = append(w.B, v...)
}

// Strings appends v's length, then each string.
func (w *Writer) Strings(v []string) {
	w.Uint(uint64(len(v)))
	for _, s := range v {
		w.String(s)
	}
}

// Ints appends v's length, then each int.
func (w *Writer) Ints(v []int) {
	w.Uint(uint64(len(v)))
	for _, n := range v {
		w.Int(int64(n))
	}
}

// Map appends v's length, then its keys and values, keys in order.
func (w *Writer) Map(v map[string]string) {
	w.Uint(uint64(len(v)))
	for _, k := range slices.Sorted(maps.Keys(v)) {
		w.String(k)
		w.String(v[k])
	}
}

// Reader consumes values from the bytes it was made with.
type Reader struct {
	b   []byte
	err error
}

// NewReader reads b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Open reads b, a record Record(tag) started, or fails naming what it is
// not.
func Open(b []byte, tag string) (*Reader, error) {
	r := NewReader(b)
	if got := r.String(); got != tag {
		return nil, fmt.Errorf("not a %s record (%.20q)", tag, got)
	}
	return r, nil
}

// errShort is a record that ends before its last field.
var errShort = errors.New("record ends early")

func (r *Reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.b = nil
}

// Uint reads a value Writer.Uint wrote.
func (r *Reader) Uint() uint64 { return varint(r, binary.Uvarint) }

// Int reads a value Writer.Int wrote.
func (r *Reader) Int() int64 { return varint(r, binary.Varint) }

// varint reads one varint of r with read (binary.Uvarint or binary.Varint).
func varint[T uint64 | int64](r *Reader, read func([]byte) (T, int)) T {
	v, n := read(r.b)
	if n <= 0 {
		r.fail(errShort)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Bool reads a value Writer.Bool wrote.
func (r *Reader) Bool() bool {
	if len(r.b) == 0 {
		r.fail(errShort)
		return false
	}
	v := r.b[0]
	r.b = r.b[1:]
	if v > 1 {
		r.fail(fmt.Errorf("a boolean of %d", v))
	}
	return v == 1
}

// count reads a length of at most what is left, each item taking at least
// min bytes.
func (r *Reader) count(min int) int {
	n := r.Uint()
	if n > uint64(len(r.b)/min) {
		r.fail(errShort)
		return 0
	}
	return int(n)
}

// Bytes reads a value Writer.Bytes wrote; a zero length reads as nil.
func (r *Reader) Bytes() []byte {
	n := r.count(1)
	if n == 0 {
		return nil
	}
	v := slices.Clone(r.b[:n])
	r.b = r.b[n:]
	return v
}

// String reads a value Writer.String wrote.
func (r *Reader) String() string {
	n := r.count(1)
	v := string(r.b[:n])
	r.b = r.b[n:]
	return v
}

// Strings reads a value Writer.Strings wrote; a zero length reads as nil.
func (r *Reader) Strings() []string {
	n := r.count(1)
	if n == 0 {
		return nil
	}
	v := make([]string, n)
	for i := range v {
		v[i] = r.String()
	}
	return v
}

// Ints reads a value Writer.Ints wrote; a zero length reads as nil.
func (r *Reader) Ints() []int {
	n := r.count(1)
	if n == 0 {
		return nil
	}
	v := make([]int, n)
	for i := range v {
		v[i] = int(r.Int())
	}
	return v
}

// Map reads a value Writer.Map wrote; a zero length reads as nil.
func (r *Reader) Map() map[string]string {
	n := r.count(2)
	if n == 0 {
		return nil
	}
	v := make(map[string]string, n)
	for range n {
		k := r.String()
		v[k] = r.String()
	}
	return v
}

// Count reads a length written with Writer.Uint for a list of records, each
// at least min bytes long.
func (r *Reader) Count(min int) int { return r.count(max(min, 1)) }

// Err is the first error, or an error if bytes are left over: a record is
// read whole or not at all.
func (r *Reader) Err() error {
	if r.err == nil && len(r.b) > 0 {
		return fmt.Errorf("%d bytes after the record", len(r.b))
	}
	return r.err
}
