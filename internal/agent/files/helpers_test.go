package files

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// newTestFS returns an FS rooted at a fresh directory holding files (wire
// path → content; a name ending in / is a directory).
func newTestFS(t testing.TB, files map[string]string) (*FS, string) {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		host := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(host, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(host, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := New(root, "/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, root
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
