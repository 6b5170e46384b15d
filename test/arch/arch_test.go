package arch

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const mod = "sbx.dev/sbx/"

type pkg struct {
	ImportPath   string
	Dir          string
	GoFiles      []string
	Deps         []string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps=false", "-json", mod+"...")
	cmd.Dir = repoRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("decoding go list: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	// go list -json without -deps leaves Deps filled with the transitive set.
	return pkgs
}

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(filepath.Dir(wd))
}

// fences: a package (prefix match) must not reach, transitively, any of these.
// direct fences check only the package's own imports (the layers above may reach
// lower ones through the manager); the others hold transitively.
var fences = []struct {
	from   string
	never  []string
	reason string
	direct bool
}{
	{"sbx.dev/sbx/internal/sandbox", []string{"sbx.dev/sbx/internal/"}, "domain nouns import nothing of sbx", false},
	{"sbx.dev/sbx/internal/fault", []string{"sbx.dev/sbx/internal/"}, "crash points sit everywhere on the create path: they import nothing of sbx", false},
	{"sbx.dev/sbx/internal/secrets", []string{"sbx.dev/sbx/internal/"}, "sealing secrets is pure logic: it imports nothing of sbx", false},
	{"sbx.dev/sbx/internal/isolation/", []string{"sbx.dev/sbx/internal/sandbox", "sbx.dev/sbx/internal/backend", "sbx.dev/sbx/internal/manager", "sbx.dev/sbx/internal/server", "sbx.dev/sbx/internal/store", "sbx.dev/sbx/internal/agent"},
		"isolation steps know nothing of sandboxes", false},
	{"sbx.dev/sbx/internal/agent", []string{"sbx.dev/sbx/internal/sandbox", "sbx.dev/sbx/internal/backend", "sbx.dev/sbx/internal/manager", "sbx.dev/sbx/internal/store", "sbx.dev/sbx/internal/server", "sbx.dev/sbx/internal/agentclient", "sbx.dev/sbx/internal/daemon", "sbx.dev/sbx/internal/config", "sbx.dev/sbx/internal/cli", "sbx.dev/sbx/client"},
		"the agent runs in every sandbox: what it cannot call, a hijacked agent cannot call either", false},
	{"sbx.dev/sbx/internal/backend", []string{"sbx.dev/sbx/internal/manager", "sbx.dev/sbx/internal/store", "sbx.dev/sbx/internal/server", "sbx.dev/sbx/internal/config", "sbx.dev/sbx/internal/daemon"},
		"drivers sit below the lifecycle layer", false},
	{"sbx.dev/sbx/internal/store", []string{"sbx.dev/sbx/internal/manager", "sbx.dev/sbx/internal/backend", "sbx.dev/sbx/internal/server", "sbx.dev/sbx/internal/agentclient"}, "the store keeps records only", false},
	{"sbx.dev/sbx/internal/config", []string{"sbx.dev/sbx/internal/manager", "sbx.dev/sbx/internal/backend", "sbx.dev/sbx/internal/server", "sbx.dev/sbx/internal/store"}, "config is data", false},
	{"sbx.dev/sbx/internal/agentclient", []string{"sbx.dev/sbx/internal/manager", "sbx.dev/sbx/internal/backend/", "sbx.dev/sbx/internal/agent"}, "the client must not reach drivers or the agent's code", false},
	{"sbx.dev/sbx/internal/manager", []string{"sbx.dev/sbx/internal/isolation", "sbx.dev/sbx/internal/server", "sbx.dev/sbx/internal/config", "sbx.dev/sbx/internal/backend/native", "sbx.dev/sbx/internal/backend/local"}, "the manager sees drivers only through the seam", true},
	{"sbx.dev/sbx/internal/server", []string{"sbx.dev/sbx/internal/backend", "sbx.dev/sbx/internal/isolation", "sbx.dev/sbx/internal/store"}, "servers speak to the manager", true},
	{"sbx.dev/sbx/internal/cli", []string{"sbx.dev/sbx/internal/manager", "sbx.dev/sbx/internal/backend", "sbx.dev/sbx/internal/isolation", "sbx.dev/sbx/internal/store", "sbx.dev/sbx/internal/server", "sbx.dev/sbx/internal/agent", "sbx.dev/sbx/internal/daemon"}, "the CLI is a client", false},
	{"sbx.dev/sbx/client", []string{"sbx.dev/sbx/internal/manager", "sbx.dev/sbx/internal/backend", "sbx.dev/sbx/internal/isolation", "sbx.dev/sbx/internal/store", "sbx.dev/sbx/internal/server", "sbx.dev/sbx/internal/agent", "sbx.dev/sbx/internal/daemon"}, "the client is a client", false},
	{"sbx.dev/sbx/internal/daemon", []string{"sbx.dev/sbx/internal/cli", "sbx.dev/sbx/internal/agent"}, "the daemon does not reach the client or the agent's code", false},
}

func TestDependencyFences(t *testing.T) {
	for _, p := range listPackages(t) {
		for _, f := range fences {
			if !under(p.ImportPath, f.from) {
				continue
			}
			deps := p.Deps
			if f.direct {
				deps = p.Imports
			}
			for _, dep := range deps {
				for _, never := range f.never {
					if under(dep, never) && !under(dep, f.from) {
						t.Errorf("%s depends on %s; %s", p.ImportPath, dep, f.reason)
					}
				}
			}
		}
	}
}

func TestNoProductionImportOfTestHelpers(t *testing.T) {
	for _, p := range listPackages(t) {
		if strings.HasPrefix(p.ImportPath, "sbx.dev/sbx/test/") || strings.HasSuffix(p.ImportPath, "/testutil") || strings.Contains(p.ImportPath, "/testutil/") ||
			strings.HasSuffix(p.ImportPath, "/backendtest") || strings.HasSuffix(p.ImportPath, "/fake") {
			continue
		}
		for _, imp := range p.Imports {
			if imp == "testing" || strings.HasSuffix(imp, "/testutil") || strings.HasSuffix(imp, "/backendtest") || strings.HasSuffix(imp, "/backend/fake") {
				t.Errorf("production package %s imports %s", p.ImportPath, imp)
			}
		}
	}
}

// TestPackageComments checks that every package has exactly one package comment.
func TestPackageComments(t *testing.T) {
	for _, p := range listPackages(t) {
		if len(p.GoFiles) == 0 {
			continue
		}
		var with []string
		fset := token.NewFileSet()
		for _, f := range p.GoFiles {
			file, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if file.Doc != nil && !strings.HasPrefix(strings.TrimSpace(file.Doc.Text()), "Code generated") {
				with = append(with, f)
			}
		}
		if len(with) != 1 && !generatedOnly(p) {
			t.Errorf("package %s has %d package comments (%v); want exactly one", p.ImportPath, len(with), with)
		}
	}
}

func generatedOnly(p pkg) bool {
	return slices.ContainsFunc(p.GoFiles, func(f string) bool { return strings.HasSuffix(f, ".pb.go") || strings.HasSuffix(f, ".connect.go") })
}

func under(path, prefix string) bool {
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(path, prefix)
	}
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

var _ = mod
