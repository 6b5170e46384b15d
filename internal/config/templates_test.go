package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeConfig writes a config file holding text and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "sbx.toml")
	if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestTemplatesLoad(t *testing.T) {
	py, alpine := t.TempDir(), t.TempDir()
	for _, tc := range []struct {
		name string
		file string
		env  map[string]string
		// want are the templates' roots by name; allowed the policy's list.
		want    map[string]string
		allowed []string
	}{
		{"none", "", nil, map[string]string{}, []string{"host"}},
		{"file, added to the allowlist after host", `
[templates.py]
rootfs = "` + py + `"
[templates.alpine]
rootfs = "` + alpine + `"
`, nil, map[string]string{"py": py, "alpine": alpine}, []string{"host", "alpine", "py"}},
		{"policy.templates given: kept as it is", `
[policy]
templates = ["py"]
[templates.py]
rootfs = "` + py + `"
[templates.alpine]
rootfs = "` + alpine + `"
`, nil, map[string]string{"py": py, "alpine": alpine}, []string{"py"}},
		{"env adds and replaces", `
[templates.py]
rootfs = "/elsewhere"
`, map[string]string{"SBX_TEMPLATES": "py=" + py + ", alpine=" + alpine},
			map[string]string{"py": py, "alpine": alpine}, []string{"host", "alpine", "py"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"SBX_DATA_DIR": t.TempDir()}
			for k, v := range tc.env {
				env[k] = v
			}
			var args []string
			if tc.file != "" {
				args = []string{"--config", writeConfig(t, tc.file)}
			}
			l, err := load(args, envOf(env), 0)
			if err != nil {
				t.Fatalf("Load = %v", err)
			}
			c := l.Config
			got := map[string]string{}
			for name, tm := range c.Templates {
				got[name] = tm.Rootfs
			}
			if len(got) != len(tc.want) {
				t.Errorf("Templates = %v, want %v", got, tc.want)
			}
			for name, dir := range tc.want {
				if got[name] != dir {
					t.Errorf("Templates[%s] = %q, want %q", name, got[name], dir)
				}
			}
			if !slices.Equal(c.Policy.Templates, tc.allowed) {
				t.Errorf("policy.templates = %v, want %v", c.Policy.Templates, tc.allowed)
			}
			if err := c.Validate(); err != nil {
				t.Errorf("Validate = %v", err)
			}
			// --print-config shows them, and reads back the same.
			back, err := load([]string{"--config", writeConfig(t, c.TOML())}, envOf(nil), 0)
			if err != nil {
				t.Fatalf("Load of --print-config's output = %v", err)
			}
			if !slices.Equal(back.Config.Policy.Templates, tc.allowed) || len(back.Config.Templates) != len(tc.want) {
				t.Errorf("--print-config round trip: templates %v, policy %v", back.Config.Templates, back.Config.Policy.Templates)
			}
		})
	}
}

func TestTemplatesInvalid(t *testing.T) {
	dataDir := t.TempDir()
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	good := t.TempDir()
	for _, tc := range []struct {
		name, file string
		env        map[string]string
		want       string
	}{
		{"missing rootfs", "[templates.a]\nrootfs = \"/nonexistent/sbx-root\"\n", nil,
			"templates.a.rootfs: /nonexistent/sbx-root does not exist"},
		{"relative rootfs", "[templates.a]\nrootfs = \"rel/root\"\n", nil,
			`templates.a.rootfs: "rel/root" is not an absolute path`},
		{"rootfs a file", "[templates.a]\nrootfs = \"" + file + "\"\n", nil,
			"templates.a.rootfs: " + file + " is not a directory"},
		{"no rootfs", "[templates.a]\n", nil, "templates.a.rootfs: missing"},
		{"the host's root", "[templates.a]\nrootfs = \"/\"\n", nil, "templates.a.rootfs: / is the host's root"},
		{"holding the data dir", "[templates.a]\nrootfs = \"" + filepath.Dir(dataDir) + "\"\n", nil,
			"templates.a.rootfs: " + filepath.Dir(dataDir) + " holds the data dir"},
		{"named host", "[templates.host]\nrootfs = \"" + good + "\"\n", nil, `templates.host: "host" is the built-in template`},
		{"bad name", "[templates.\"Bad Name\"]\nrootfs = \"" + good + "\"\n", nil, `templates: "Bad Name" is not a template name`},
		{"unknown key", "[templates.a]\nroot = \"" + good + "\"\n", nil, "unknown keys: templates.a.root"},
		{"allowlist names an unknown template", "[policy]\ntemplates = [\"host\", \"nope\"]\n", nil,
			`policy.templates: "nope" is neither host nor a [templates.nope] section (known: host)`},
		{"env without =", "", map[string]string{"SBX_TEMPLATES": "a"}, `templates (from SBX_TEMPLATES): "a" is not name=/abs/dir`},
		{"env relative", "", map[string]string{"SBX_TEMPLATES": "a=rel"}, `templates.a.rootfs: "rel" is not an absolute path`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"SBX_DATA_DIR": dataDir}
			for k, v := range tc.env {
				env[k] = v
			}
			var args []string
			if tc.file != "" {
				args = []string{"--config", writeConfig(t, tc.file)}
			}
			l, err := load(args, envOf(env), 0)
			if err == nil {
				err = l.Config.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load and Validate = %v; want an error saying %s", err, tc.want)
			}
		})
	}
}
