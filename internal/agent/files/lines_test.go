package files

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestReadLines(t *testing.T) {
	f, _ := newTestFS(t, map[string]string{
		"five":    "one\ntwo\r\nthree\nfour\nfive",
		"nl":      "a\nb\n",
		"empty":   "",
		"long":    "short\n" + strings.Repeat("é", 30) + "\n",
		"bad":     "ok\xff\xfeok\n",
		"bin":     "text\x00more\n",
		"dir/x":   "",
		"latenul": strings.Repeat("a\n", 5000) + "\x00\n",
	})
	cases := []struct {
		path          string
		offset, limit int64
		chars         int
		want          Lines
	}{
		{"/five", 0, 0, 0, Lines{Lines: []string{"one", "two", "three", "four", "five"}, FirstLine: 1, EOF: true, TotalLines: 5}},
		{"/five", 1, 2, 0, Lines{Lines: []string{"two", "three"}, FirstLine: 2, TotalLines: -1}},
		{"/five", 3, 2, 0, Lines{Lines: []string{"four", "five"}, FirstLine: 4, EOF: true, TotalLines: 5}},
		{"/five", 9, 2, 0, Lines{FirstLine: 10, EOF: true, TotalLines: 5}},
		{"/nl", 0, 2, 0, Lines{Lines: []string{"a", "b"}, FirstLine: 1, EOF: true, TotalLines: 2}},
		{"/nl", 2, 2, 0, Lines{FirstLine: 3, EOF: true, TotalLines: 2}},
		{"/empty", 0, 0, 0, Lines{FirstLine: 1, EOF: true, TotalLines: 0}},
		{"/long", 0, 0, 10, Lines{Lines: []string{"short", strings.Repeat("é", 10)}, FirstLine: 1, EOF: true, CutLines: 1, TotalLines: 2}},
		{"/bad", 0, 0, 0, Lines{Lines: []string{"ok\uFFFDok"}, FirstLine: 1, EOF: true, TotalLines: 1}},
		{"/latenul", 4999, 1, 0, Lines{Lines: []string{"a"}, FirstLine: 5000, TotalLines: -1}},
	}
	for _, tc := range cases {
		got, err := f.ReadLines(tc.path, tc.offset, tc.limit, tc.chars)
		if err != nil {
			t.Errorf("ReadLines(%s, %d, %d, %d) = %v", tc.path, tc.offset, tc.limit, tc.chars, err)
			continue
		}
		if !slices.Equal(got.Lines, tc.want.Lines) || got.FirstLine != tc.want.FirstLine || got.EOF != tc.want.EOF ||
			got.CutLines != tc.want.CutLines || got.TotalLines != tc.want.TotalLines {
			t.Errorf("ReadLines(%s, %d, %d, %d) = %+v, want %+v", tc.path, tc.offset, tc.limit, tc.chars, got, tc.want)
		}
	}
	for _, bad := range []struct {
		path  string
		off   int64
		kind  Kind
		inMsg string
	}{
		{"/bin", 0, Precondition, "path '/bin' is a binary file"},
		{"/dir", 0, Invalid, "path '/dir' is a directory"},
		{"/nope", 0, NotFound, "path '/nope' does not exist"},
		{"/five", -1, Invalid, "offset -1 is negative"},
	} {
		if _, err := f.ReadLines(bad.path, bad.off, 0, 0); KindOf(err) != bad.kind || !strings.Contains(err.Error(), bad.inMsg) {
			t.Errorf("ReadLines(%s, %d) = %v, want kind %d with %q", bad.path, bad.off, err, bad.kind, bad.inMsg)
		}
	}
}

// A page far into a large file is read as a stream, and a line longer than
// the reader's buffer is skipped or cut without being held whole.
func TestReadLinesLarge(t *testing.T) {
	f, root := newTestFS(t, nil)
	fl, err := os.Create(filepath.Join(root, "big"))
	if err != nil {
		t.Fatal(err)
	}
	huge := strings.Repeat("z", 300<<10)
	fl.WriteString(huge + "\n")
	for i := range 200000 {
		fl.WriteString("line " + itoa(int64(i)) + "\n")
	}
	fl.WriteString(huge + "\n")
	fl.Close()
	got, err := f.ReadLines("/big", 150001, 2, 0)
	if err != nil || !slices.Equal(got.Lines, []string{"line 150000", "line 150001"}) || got.EOF || got.TotalLines != -1 {
		t.Errorf("ReadLines(150001, 2) = %+v, %v", got, err)
	}
	got, err = f.ReadLines("/big", 200000, 5, 100)
	if err != nil || len(got.Lines) != 2 || got.Lines[1] != huge[:100] || got.CutLines != 1 || !got.EOF || got.TotalLines != 200002 {
		t.Errorf("ReadLines(200000, 5, 100 chars) = %d lines, cut %d, eof %v, total %d, %v", len(got.Lines), got.CutLines, got.EOF, got.TotalLines, err)
	}
}
