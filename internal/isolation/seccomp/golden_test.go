package seccomp

import (
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/default.golden")

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// The default profile's program, instruction by instruction: a change to the
// profile or the compiler shows here, to be reviewed.
func TestGoldenDefault(t *testing.T) {
	prog := compileDefault(t)
	var b strings.Builder
	b.WriteString("# " + prog.ID() + "\n")
	for _, in := range prog.Instructions() {
		b.WriteString(in.Disassemble().(interface{ String() string }).String() + "\n")
	}
	const path = "testdata/default.golden"
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run Golden -update)", err)
	}
	if b.String() != string(want) {
		t.Errorf("the default profile's program changed; review it and run go test -run Golden -update:\n%s", b.String())
	}
}
