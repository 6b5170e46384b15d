package tarsafe

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestComponents(t *testing.T) {
	cases := []struct {
		name     string
		want     string // components joined by "|"
		tooLarge bool
		refused  string // substring of the error; "" when accepted
	}{
		{"a/b/c", "a|b|c", false, ""},
		{"./a//b/", "a|b", false, ""},
		{"./", "", false, ""},
		{"", "", false, "empty name"},
		{"/etc/passwd", "", false, "absolute"},
		{"a/../../x", "", false, "'..'"},
		{`a\..\x`, "", false, `'\'`},
		{"a\x00b", "", false, "NUL"},
		{strings.Repeat("d/", MaxDepth) + "f", "", true, "max_depth"},
		{strings.Repeat("n", MaxComponent+1), "", true, "max_name_bytes"},
		{strings.Repeat("a/", MaxName/2+1), "", true, "max_name_bytes"},
	}
	for _, tc := range cases {
		comps, err := Components("entry", tc.name)
		if tc.refused == "" {
			if err != nil || strings.Join(comps, "|") != tc.want {
				t.Errorf("Components(%q) = %q, %v; want %q", tc.name, comps, err, tc.want)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.TooLarge != tc.tooLarge || !strings.Contains(e.Msg, tc.refused) {
			t.Errorf("Components(%.40q) = %q, %v; want a refusal (too large %v) saying %q", tc.name, comps, err, tc.tooLarge, tc.refused)
		}
	}
}

func TestSkipped(t *testing.T) {
	for typ, want := range map[byte]bool{tar.TypeReg: false, tar.TypeDir: false, tar.TypeSymlink: false, tar.TypeLink: false,
		tar.TypeChar: true, tar.TypeBlock: true, tar.TypeFifo: true, 'Z': true} {
		if _, reason, skip := Skipped(&tar.Header{Typeflag: typ}); skip != want || (skip && reason == "") {
			t.Errorf("Skipped(type %q) = %v %q, want skipped %v with a reason", typ, skip, reason, want)
		}
	}
}

// The reader sees through gzip by its magic bytes and stops one byte past its
// cap, with an error that names the cap.
func TestReaderCap(t *testing.T) {
	data := bytes.Repeat([]byte("x"), 10_000)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(data)
	zw.Close()
	for name, in := range map[string][]byte{"plain": data, "gzip": gz.Bytes()} {
		r, err := NewReader(bytes.NewReader(in), int64(len(data)), "max_bytes")
		if err != nil {
			t.Fatal(err)
		}
		if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s at the cap: %d bytes, %v; want all %d", name, len(got), err, len(data))
		}
		r, _ = NewReader(bytes.NewReader(in), int64(len(data))-1, "disk_mb")
		_, err = io.ReadAll(r)
		var e *Error
		if !errors.As(err, &e) || !e.TooLarge || !strings.Contains(e.Msg, "disk_mb") {
			t.Errorf("%s past the cap: %v, want a too-large error naming disk_mb", name, err)
		}
		if r.Count() != int64(len(data)) {
			t.Errorf("%s: read %d bytes before stopping, want cap+1 = %d", name, r.Count(), len(data))
		}
	}
	if err := ReadError(io.ErrUnexpectedEOF); !strings.Contains(err.Error(), "reading the archive") {
		t.Errorf("ReadError = %v", err)
	}
}
