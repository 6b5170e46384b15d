package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestE2BConfig(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "e2b.key")
	os.WriteFile(keyFile, []byte("e2b_filekey\n"), 0o600)
	file := filepath.Join(dir, "sbx.toml")
	os.WriteFile(file, []byte(`
backends = ["e2b"]

[e2b]
url = "https://api.e2b.app"
sandbox_url = "https://sandbox.e2b.app"
api_key_file = "`+keyFile+`"
template = "my-template"
`), 0o600)
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want E2B // APIKey as Validate reads it
	}{
		{"defaults", nil, nil, E2B{Template: "base"}},
		{"file", []string{"--config", file}, nil,
			E2B{URL: "https://api.e2b.app", SandboxURL: "https://sandbox.e2b.app", APIKeyFile: keyFile, APIKey: "e2b_filekey", Template: "my-template"}},
		{"env over file", []string{"--config", file}, map[string]string{"SBX_E2B_URL": "http://127.0.0.1:9", "SBX_E2B_API_KEY": "envkey",
			"SBX_E2B_TEMPLATE": "base", "SBX_E2B_SANDBOX_URL": "http://127.0.0.1:10"},
			E2B{URL: "http://127.0.0.1:9", SandboxURL: "http://127.0.0.1:10", APIKeyFile: keyFile, APIKey: "envkey", Template: "base"}},
		{"env only", nil, map[string]string{"SANDBOX_BACKEND": "e2b", "SBX_E2B_URL": "http://127.0.0.1:9", "SBX_E2B_API_KEY_FILE": keyFile},
			E2B{URL: "http://127.0.0.1:9", APIKeyFile: keyFile, APIKey: "e2b_filekey", Template: "base"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := load(tc.args, envOf(tc.env), 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Config.Validate(); err != nil {
				t.Fatalf("Validate = %v", err)
			}
			if l.Config.E2B != tc.want {
				t.Errorf("E2B = %+v, want %+v", l.Config.E2B, tc.want)
			}
			// --print-config shows it, never the key, and reads back the same.
			printed := l.Config.TOML()
			if l.Config.E2B.APIKey != "" && strings.Contains(printed, l.Config.E2B.APIKey) {
				t.Errorf("--print-config shows the API key:\n%s", printed)
			}
			out := filepath.Join(t.TempDir(), "printed.toml")
			os.WriteFile(out, []byte(printed), 0o600)
			back, err := load([]string{"--config", out}, envOf(nil), 0)
			if err != nil {
				t.Fatal(err)
			}
			back.Config.Validate()
			want := tc.want
			if tc.env["SBX_E2B_API_KEY"] != "" {
				want.APIKey = "e2b_filekey" // the file's key: the env's is not printed
			}
			if back.Config.E2B != want {
				t.Errorf("the printed config reads back as %+v, want %+v", back.Config.E2B, want)
			}
		})
	}
}

func TestE2BConfigChecks(t *testing.T) {
	for _, tc := range []struct {
		e    E2B
		want string // a fragment of the error; "" for none
	}{
		{E2B{Template: "base"}, ""},
		{E2B{URL: "https://api.e2b.app", SandboxURL: "https://sandbox.e2b.app", APIKey: "k", Template: "base"}, ""},
		{E2B{URL: "api.e2b.app", Template: "base"}, "e2b.url"},
		{E2B{URL: "ftp://x", Template: "base"}, "e2b.url"},
		{E2B{URL: "https://x/?a=1", Template: "base"}, "e2b.url"},
		{E2B{URL: "https://x", SandboxURL: "x", Template: "base"}, "e2b.sandbox_url"},
		{E2B{Template: ""}, "e2b.template"},
		{E2B{APIKeyFile: "/no/such/key", Template: "base"}, "e2b.api_key_file"},
	} {
		c := defaults(envOf(nil), 0)
		c.E2B = tc.e
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Validate(%+v) = %v", tc.e, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.e, err, tc.want)
		}
	}
}
