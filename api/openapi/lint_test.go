package openapi_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLint runs a real OpenAPI linter (Redocly's, pinned in test/node) over
// openapi.json: no errors; its warnings are logged.
func TestLint(t *testing.T) {
	redocly, err := filepath.Abs("../../test/node/node_modules/.bin/redocly")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(redocly); err != nil {
		if testing.Short() {
			t.Skip("the OpenAPI linter is not installed (make deps installs it)")
		}
		t.Fatalf("the OpenAPI linter is not installed: make deps (or npm ci in test/node) installs it: %v", err)
	}
	cmd := exec.Command(redocly, "lint", "--format=stylish", "openapi.json")
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true")
	out, err := cmd.CombinedOutput()
	var problems []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, " error ") || strings.Contains(l, " warning ") {
			problems = append(problems, strings.TrimSpace(l))
		}
	}
	if err != nil {
		t.Fatalf("redocly lint openapi.json failed (%v):\n%s", err, out)
	}
	for _, p := range problems {
		if strings.Contains(p, " error ") {
			t.Errorf("lint: %s", p)
		} else {
			t.Logf("lint: %s", p)
		}
	}
}
