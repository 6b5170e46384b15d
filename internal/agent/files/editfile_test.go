package files

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"sbx.dev/sbx/internal/textedit"
)

func TestEditFile(t *testing.T) {
	f, root := newTestFS(t, map[string]string{"src/a.go": "package a\n\nfunc A() int {\n\treturn 1\n}\n", "bin": "x\x00y"})
	host := filepath.Join(root, "src/a.go")
	if err := os.Chmod(host, 0o751); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(host, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("src/a.go", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	res, err := f.EditFile("/link", "    return 1", "    return 2", false)
	if err != nil || res.Strategy != textedit.EditIndentation || res.StartLine != 4 || res.EndLine != 4 {
		t.Fatalf("EditFile = %+v, %v; want an indentation match at line 4", res, err)
	}
	b, _ := os.ReadFile(host)
	if string(b) != "package a\n\nfunc A() int {\n\treturn 2\n}\n" {
		t.Errorf("file = %q", b)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(host, &st); err != nil || st.Mode&0o7777 != 0o751 || st.Uid != 1234 || st.Gid != 5678 {
		t.Errorf("file mode %o, owner %d:%d, %v; want 751, 1234:5678", st.Mode&0o7777, st.Uid, st.Gid, err)
	}
	if fi, err := os.Lstat(filepath.Join(root, "link")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link is no longer a symlink: %v, %v", fi, err)
	}
	before, _ := os.ReadFile(host)
	for _, bad := range []struct {
		path, old string
		kind      Kind
		inMsg     string
	}{
		{"/src/a.go", "nowhere to be found at all", Invalid, "old_string not found in /src/a.go; closest match at lines"},
		{"/src/a.go", "", Invalid, "old_string is empty"},
		{"/bin", "x", Precondition, "path '/bin' is a binary file"},
		{"/src", "x", Invalid, "path '/src' is a directory"},
		{"/none", "x", NotFound, "path '/none' does not exist"},
	} {
		if _, err := f.EditFile(bad.path, bad.old, "q", false); KindOf(err) != bad.kind || !strings.Contains(err.Error(), bad.inMsg) {
			t.Errorf("EditFile(%s, %q) = %v, want kind %d with %q", bad.path, bad.old, err, bad.kind, bad.inMsg)
		}
	}
	if after, _ := os.ReadFile(host); string(after) != string(before) {
		t.Errorf("a failed edit changed the file: %q", after)
	}
	ents, _ := os.ReadDir(filepath.Join(root, "src"))
	if len(ents) != 1 {
		t.Errorf("src holds %v, want a.go alone (no temporary file left)", ents)
	}
}
