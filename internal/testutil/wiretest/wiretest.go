// Package wiretest checks a record's wire encoding (package wire) the way
// its tests need to: every field travels, and no cut record decodes.
package wiretest

import (
	"bytes"
	"math/rand"
	"reflect"
	"testing"
)

// RoundTrip fills values of T at random, every field non-zero (nested ones,
// list elements and map entries too), and checks that decode(encode(v)) is
// v (a field an encoder forgets comes back zero and fails); that encoding
// is deterministic; and that every proper prefix of an encoding fails to
// decode. The zero T must round-trip too, its empty lists and maps reading
// as nil.
func RoundTrip[T any](t *testing.T, encode func(T) ([]byte, error), decode func([]byte) (T, error)) {
	t.Helper()
	rng := rand.New(rand.NewSource(1))
	for i := range 20 {
		var v T
		if i > 0 {
			fill(reflect.ValueOf(&v).Elem(), rng)
		}
		b, err := encode(v)
		if err != nil {
			t.Fatalf("encode(%+v): %v", v, err)
		}
		back, err := decode(b)
		if err != nil {
			t.Fatalf("decode(encode(%+v)): %v", v, err)
		}
		if want, got := normalize(reflect.ValueOf(v)), normalize(reflect.ValueOf(back)); !reflect.DeepEqual(want, got) {
			t.Fatalf("decode(encode(v)) differs:\n got %+v\nwant %+v", got, want)
		}
		if again, _ := encode(back); !bytes.Equal(again, b) {
			t.Fatalf("encoding is not deterministic for %+v", v)
		}
		for n := range len(b) {
			if _, err := decode(b[:n]); err == nil {
				t.Fatalf("the first %d of %d bytes decoded", n, len(b))
			}
		}
	}
}

// fill sets every field of v to a random non-zero value.
func fill(v reflect.Value, rng *rand.Rand) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), rng)
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), rng)
	case reflect.Slice:
		n := 1 + rng.Intn(3)
		v.Set(reflect.MakeSlice(v.Type(), n, n))
		for i := range n {
			fill(v.Index(i), rng)
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for range 1 + rng.Intn(3) {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(k, rng)
			fill(e, rng)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.String:
		b := make([]rune, 1+rng.Intn(12))
		for i := range b {
			b[i] = rune(1 + rng.Intn(0x2fff))
		}
		v.SetString(string(b))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n := int64(1 + rng.Intn(1<<20))
		if rng.Intn(4) == 0 {
			n = -n << (rng.Intn(40))
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(1+rng.Intn(250)) << (rng.Intn(8) * 8 % (v.Type().Bits() - 7)))
	default:
		panic("wiretest: no filler for " + v.Type().String())
	}
}

// normalize returns a copy of v with empty slices and maps made nil.
func normalize(v reflect.Value) any {
	c := reflect.New(v.Type()).Elem()
	copyNorm(c, v)
	return c.Interface()
}

func copyNorm(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.Struct:
		for i := range src.NumField() {
			copyNorm(dst.Field(i), src.Field(i))
		}
	case reflect.Pointer:
		if !src.IsNil() {
			p := reflect.New(src.Type().Elem())
			copyNorm(p.Elem(), src.Elem())
			dst.Set(p)
		}
	case reflect.Slice:
		if src.Len() > 0 {
			s := reflect.MakeSlice(src.Type(), src.Len(), src.Len())
			for i := range src.Len() {
				copyNorm(s.Index(i), src.Index(i))
			}
			dst.Set(s)
		}
	case reflect.Map:
		if src.Len() > 0 {
			dst.Set(src)
		}
	default:
		dst.Set(src)
	}
}
