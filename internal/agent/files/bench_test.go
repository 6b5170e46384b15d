package files

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// benchTree writes a tree of 100 000 small text files under dir: 100
// packages of 10 directories of 100 files each, a third of them .go, a
// third .py, a third .txt; one file in 500 holds the word "needle".
func benchTree(b *testing.B, dir string) {
	b.Helper()
	for p := range 100 {
		for d := range 10 {
			sub := filepath.Join(dir, fmt.Sprintf("pkg%02d", p), fmt.Sprintf("dir%d", d))
			if err := os.MkdirAll(sub, 0o755); err != nil {
				b.Fatal(err)
			}
			for i := range 100 {
				n := (p*10+d)*100 + i
				ext := [...]string{".go", ".py", ".txt"}[n%3]
				body := fmt.Sprintf("// file %d\npackage p%d\n\nfunc f%d(x int) int {\n\treturn x + %d\n}\n", n, p, n, n)
				if n%500 == 0 {
					body += "// a needle in the haystack\n"
				}
				if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%03d%s", i, ext)), []byte(body), 0o644); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}

// BenchmarkSearch times Glob and Grep over a 100 000-file tree, through an
// FS rooted at the tree (os.Root, the local backend's) and one rooted at
// "/" (a jail's, every open through openat2).
func BenchmarkSearch(b *testing.B) {
	dir := b.TempDir()
	benchTree(b, dir)
	rooted, err := New(dir, "/")
	if err != nil {
		b.Fatal(err)
	}
	defer rooted.Close()
	slash, err := New("/", dir)
	if err != nil {
		b.Fatal(err)
	}
	defer slash.Close()
	for _, fs := range []struct {
		name string
		f    *FS
	}{{"root", rooted}, {"slash", slash}} {
		f := fs.f
		b.Run(fs.name+"/glob", func(b *testing.B) {
			for b.Loop() {
				paths, truncated, err := f.Glob("**/*.go", "", 100000)
				if err != nil || truncated || len(paths) != 33334 {
					b.Fatalf("Glob = %d paths, %v, %v", len(paths), truncated, err)
				}
			}
		})
		b.Run(fs.name+"/glob-limit", func(b *testing.B) {
			for b.Loop() {
				if paths, truncated, err := f.Glob("**/*.go", "", 1000); err != nil || !truncated || len(paths) != 1000 {
					b.Fatalf("Glob = %d paths, %v, %v", len(paths), truncated, err)
				}
			}
		})
		for _, mode := range []string{GrepContent, GrepFiles, GrepCount} {
			b.Run(fs.name+"/grep-"+mode, func(b *testing.B) {
				for b.Loop() {
					ms, truncated, err := f.Grep(GrepRequest{Pattern: "needle", Mode: mode})
					if err != nil || truncated || len(ms) != 200 {
						b.Fatalf("Grep = %d matches, %v, %v", len(ms), truncated, err)
					}
				}
			})
		}
		b.Run(fs.name+"/grep-regexp", func(b *testing.B) {
			for b.Loop() {
				ms, truncated, err := f.Grep(GrepRequest{Pattern: `(?i)NEEDLE\s+in`, Mode: GrepFiles, Glob: "**/*.go"})
				if err != nil || truncated || len(ms) != 67 {
					b.Fatalf("Grep = %d matches, %v, %v", len(ms), truncated, err)
				}
			}
		})
	}
}
