package tools

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"sbx.dev/sbx/internal/sandbox"
)

// An unknown parameter is refused by name, with the ones the tool takes.
func TestSeed004StrictArguments(t *testing.T) {
	tool := fileTools004()[1] // file_write
	var in fileWriteIn
	err := decodeArgs(tool.Name, tool.Input, json.RawMessage(`{"file": "a", "content": "x", "mode": 420}`), &in)
	if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), `unknown parameter "mode"`) ||
		!strings.Contains(err.Error(), "append, content, file") {
		t.Errorf("err = %v", err)
	}
	err = decodeArgs(tool.Name, tool.Input, json.RawMessage(`{"file": "a"}`), &in)
	if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "content: is required") {
		t.Errorf("err = %v", err)
	}
}

func TestListEntriesSkipsGitInsides(t *testing.T) {
	fis := []sandbox.FileInfo{
		{Name: ".git", Path: "/w/r/.git", Type: "dir"},
		{Name: "HEAD", Path: "/w/r/.git/HEAD", Type: "file"},
		{Name: "a.go", Path: "/w/r/a.go", Type: "file", Size: 3},
		{Name: "x", Path: "/w/r/sub/.git/x", Type: "file"},
	}
	out := listEntries("/w/r", fis, true)
	var paths []string
	for _, e := range out.Entries {
		paths = append(paths, e.Path)
	}
	if !reflect.DeepEqual(paths, []string{"/w/r/.git", "/w/r/a.go"}) || out.Total != 2 || out.Truncated {
		t.Errorf("recursive: %v total %d", paths, out.Total)
	}
	if out := listEntries("/w/r/.git", fis[1:2], false); len(out.Entries) != 1 {
		t.Errorf("a listing of .git itself: %+v", out)
	}
}
