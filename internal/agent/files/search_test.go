package files

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestPathGlob(t *testing.T) {
	cases := []struct {
		pattern string
		yes, no []string
	}{
		{"**/*.py", []string{"a.py", "x/a.py", "x/y/z/a.py"}, []string{"a.pyc", "x/a.go", "a.py/b"}},
		{"src/*.ts", []string{"src/a.ts"}, []string{"a.ts", "src/x/a.ts", "lib/src/a.ts"}},
		{"src/**", []string{"src", "src/a", "src/x/y"}, []string{"lib/a"}},
		{"a/**/b/*.c", []string{"a/b/x.c", "a/1/2/b/x.c"}, []string{"a/x.c", "a/b/c/x.c"}},
		{"/x/./y/../z", []string{"x/z"}, []string{"x/y/z"}},
		{"**/**/*.md", []string{"r.md", "d/r.md"}, []string{"r.txt"}},
	}
	for _, tc := range cases {
		g, err := compilePathGlob(tc.pattern)
		if err != nil {
			t.Fatalf("compilePathGlob(%q) = %v", tc.pattern, err)
		}
		match := func(p string) bool {
			s := g.start()
			for name := range strings.SplitSeq(p, "/") {
				if s, _ = g.step(s, name); s == 0 {
					return false
				}
			}
			return g.matches(s)
		}
		for _, p := range tc.yes {
			if !match(p) {
				t.Errorf("%q does not match %q, want a match", tc.pattern, p)
			}
		}
		for _, p := range tc.no {
			if match(p) {
				t.Errorf("%q matches %q, want none", tc.pattern, p)
			}
		}
	}
	for _, bad := range []string{"", "a/[", "a\x00b"} {
		if _, err := compilePathGlob(bad); KindOf(err) != Invalid {
			t.Errorf("compilePathGlob(%q) = %v, want Invalid", bad, err)
		}
	}
}

// Results come in path order: "a-b" before "a/x", though name order puts
// directory a first.
func TestWalkPathOrder(t *testing.T) {
	f, _ := newTestFS(t, map[string]string{"a/x": "hit\n", "a-b": "hit\n", "a.c": "hit\n", "a0": "hit\n", "b/hit": "hit\n"})
	paths, truncated, err := f.Glob("**", "/", 0)
	if want := []string{"/", "/a", "/a-b", "/a.c", "/a/x", "/a0", "/b", "/b/hit"}; err != nil || truncated || !slices.Equal(paths, want) {
		t.Errorf("Glob(**) = %q, %v, %v; want %q", paths, truncated, err, want)
	}
	ms, truncated, err := f.Grep(GrepRequest{Pattern: "hit", Mode: GrepFiles})
	var got []string
	for _, m := range ms {
		got = append(got, m.Path)
	}
	if want := []string{"/a-b", "/a.c", "/a/x", "/a0", "/b/hit"}; err != nil || truncated || !slices.Equal(got, want) {
		t.Errorf("Grep(files) = %q, %v, %v; want %q", got, truncated, err, want)
	}
	// A limit cuts the sorted list, whatever order the walk found them in.
	ms, truncated, _ = f.Grep(GrepRequest{Pattern: "hit", Mode: GrepFiles, Limit: 3})
	if len(ms) != 3 || !truncated || ms[2].Path != "/a/x" {
		t.Errorf("Grep(files, limit 3) = %+v, %v; want the first 3, truncated", ms, truncated)
	}
}

func TestGrepModes(t *testing.T) {
	f, root := newTestFS(t, map[string]string{
		"src/a.py":       "import os\nx = 1 # TODO\n# TODO: more\n",
		"src/b.py":       "nothing here\n",
		"src/deep/c.py":  "todo later\r\nTODO now\r\n",
		"src/d.ts":       "// TODO ts\n",
		"lib/e.py":       "TODO lib\n",
		"bin/blob.py":    "TODO\x00binary",
		"src/long.py":    strings.Repeat("x", 3000) + " TODO\n",
		"src/lastline.c": "no newline TODO",
		// Over grepWholeFile: read as a stream, its long line matched on its first MiB.
		"big/large.txt": strings.Repeat("filler line\n", 30000) + "TODO deep\n" + strings.Repeat("y", 2<<20) + "TODO\nlast TODO",
	})
	if err := os.Symlink("../lib/e.py", filepath.Join(root, "src/link.py")); err != nil {
		t.Fatal(err)
	}
	grep := func(req GrepRequest) []string {
		t.Helper()
		ms, truncated, err := f.Grep(req)
		if err != nil || truncated {
			t.Fatalf("Grep(%+v) = %v, truncated %v", req, err, truncated)
		}
		var out []string
		for _, m := range ms {
			switch req.Mode {
			case GrepCount:
				out = append(out, m.Path+":"+itoa(m.Count))
			case GrepFiles:
				out = append(out, m.Path)
			default:
				out = append(out, m.Path+":"+itoa(m.Line)+":"+m.Text[:min(len(m.Text), 20)])
			}
		}
		return out
	}
	cases := []struct {
		req  GrepRequest
		want []string
	}{
		{GrepRequest{Pattern: "TODO", Path: "/src"}, []string{"/src/a.py:2:x = 1 # TODO", "/src/a.py:3:# TODO: more", "/src/d.ts:1:// TODO ts",
			"/src/deep/c.py:2:TODO now", "/src/lastline.c:1:no newline TODO", "/src/long.py:1:" + strings.Repeat("x", 20)}},
		{GrepRequest{Pattern: "TODO", Path: "/big"}, []string{"/big/large.txt:30001:TODO deep", "/big/large.txt:30003:last TODO"}},
		{GrepRequest{Pattern: "TODO", Path: "/big", Mode: GrepCount}, []string{"/big/large.txt:2"}},
		{GrepRequest{Pattern: "TODO", Mode: GrepFiles}, []string{"/big/large.txt", "/lib/e.py", "/src/a.py", "/src/d.ts", "/src/deep/c.py", "/src/lastline.c", "/src/long.py"}},
		{GrepRequest{Pattern: "todo", IgnoreCase: true, Mode: GrepCount, Path: "/src"}, []string{"/src/a.py:2", "/src/d.ts:1", "/src/deep/c.py:2", "/src/lastline.c:1", "/src/long.py:1"}},
		{GrepRequest{Pattern: "TODO", Mode: GrepFiles, Glob: "**/*.py"}, []string{"/lib/e.py", "/src/a.py", "/src/deep/c.py", "/src/long.py"}},
		{GrepRequest{Pattern: "TODO", Mode: GrepFiles, Glob: "src/*.py"}, []string{"/src/a.py", "/src/long.py"}},
		{GrepRequest{Pattern: "TODO", Mode: GrepFiles, Include: "*.ts"}, []string{"/src/d.ts"}},
		{GrepRequest{Pattern: "now$", Mode: GrepFiles}, []string{"/src/deep/c.py"}},
		{GrepRequest{Pattern: "T.DO l", Mode: GrepFiles}, []string{"/lib/e.py"}},
		{GrepRequest{Pattern: "a.py", Fixed: true, Mode: GrepFiles}, nil},
		{GrepRequest{Pattern: "TODO", Path: "/src/link.py", Mode: GrepCount}, []string{"/src/link.py:1"}},
	}
	for _, tc := range cases {
		if got := grep(tc.req); !slices.Equal(got, tc.want) {
			t.Errorf("Grep(%+v) = %q, want %q", tc.req, got, tc.want)
		}
	}
	ms, truncated, err := f.Grep(GrepRequest{Pattern: "TODO", Limit: 4})
	if err != nil || !truncated || len(ms) != 4 || ms[3].Path != "/src/a.py" {
		t.Errorf("Grep(limit 4) = %+v, %v, %v; want the first four, truncated", ms, truncated, err)
	}
	ms, truncated, err = f.Grep(GrepRequest{Pattern: "TODO", Path: "/src/a.py", Limit: 1})
	if err != nil || !truncated || len(ms) != 1 || ms[0].Line != 2 {
		t.Errorf("Grep(a file, limit 1) = %+v, %v, %v; want its first match, truncated", ms, truncated, err)
	}
	for _, req := range []GrepRequest{{Pattern: "x", Mode: "lines"}, {Pattern: "x", Glob: "a/["}, {Pattern: "("}, {Pattern: ""}} {
		if _, _, err := f.Grep(req); KindOf(err) != Invalid {
			t.Errorf("Grep(%+v) = %v, want Invalid", req, err)
		}
	}
}
