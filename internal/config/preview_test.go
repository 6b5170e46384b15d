package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPreviewConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sbx.toml")
	os.WriteFile(file, []byte(`
[preview]
domain = "preview.example.com"
scheme = "https"
`), 0o600)
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want Preview
	}{
		{"defaults", nil, nil, Preview{Domain: "localhost", Scheme: "http"}},
		{"file", []string{"--config", file}, nil, Preview{Domain: "preview.example.com", Scheme: "https"}},
		{"env over file", []string{"--config", file}, map[string]string{"SBX_PREVIEW_DOMAIN": "sbx.test",
			"SBX_PREVIEW_PUBLIC_URL": "https://sbx.example.com"}, Preview{Domain: "sbx.test", Scheme: "https", PublicURL: "https://sbx.example.com"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := load(tc.args, envOf(tc.env), 0)
			if err != nil {
				t.Fatal(err)
			}
			if l.Config.Preview != tc.want {
				t.Errorf("Preview = %+v, want %+v", l.Config.Preview, tc.want)
			}
			if err := l.Config.Validate(); err != nil {
				t.Errorf("Validate = %v", err)
			}
			// --print-config shows it, and reads back the same.
			out := filepath.Join(t.TempDir(), "printed.toml")
			os.WriteFile(out, []byte(l.Config.TOML()), 0o600)
			back, err := load([]string{"--config", out}, envOf(nil), 0)
			if err != nil || back.Config.Preview != tc.want {
				t.Errorf("the printed config reads back as %+v, %v", back.Config.Preview, err)
			}
		})
	}
}

func TestPreviewConfigChecks(t *testing.T) {
	for _, tc := range []struct {
		p    Preview
		want string // a fragment of the error; "" for none
	}{
		{Preview{Domain: "localhost", Scheme: "http"}, ""},
		{Preview{Domain: "a-b.example.com", Scheme: "https", PublicURL: "https://sbx.example.com:8443/base"}, ""},
		{Preview{Domain: "", Scheme: "http"}, "preview.domain"},
		{Preview{Domain: "Example.com", Scheme: "http"}, "preview.domain"},
		{Preview{Domain: "example..com", Scheme: "http"}, "preview.domain"},
		{Preview{Domain: "-x.com", Scheme: "http"}, "preview.domain"},
		{Preview{Domain: "x_y.com", Scheme: "http"}, "preview.domain"},
		{Preview{Domain: strings.Repeat("a.", 120) + "com", Scheme: "http"}, "preview.domain"},
		{Preview{Domain: "localhost", Scheme: "ftp"}, "preview.scheme"},
		{Preview{Domain: "localhost", Scheme: "http", PublicURL: "sbx.example.com"}, "preview.public_url"},
		{Preview{Domain: "localhost", Scheme: "http", PublicURL: "https://sbx.example.com/?a=1"}, "preview.public_url"},
		{Preview{Domain: "localhost", Scheme: "http", PublicURL: "https://u:p@sbx.example.com"}, "preview.public_url"},
	} {
		c := defaults(envOf(nil), 0)
		c.Preview = tc.p
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Validate(%+v) = %v", tc.p, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.p, err, tc.want)
		}
	}
}

func TestAllowedOrigins(t *testing.T) {
	l, err := load(nil, envOf(map[string]string{"SBX_ALLOWED_ORIGINS": "ui.example.com,*.tools.example.com:8443"}), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Config.AllowedOrigins; len(got) != 2 || got[0] != "ui.example.com" || got[1] != "*.tools.example.com:8443" {
		t.Errorf("AllowedOrigins = %q", got)
	}
	for _, bad := range []string{"https://ui.example.com", "ui.example.com/app", "[", ""} {
		c := defaults(envOf(nil), 0)
		c.AllowedOrigins = []string{bad}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "allowed_origins") {
			t.Errorf("Validate(allowed_origins %q) = %v, want an error naming allowed_origins", bad, err)
		}
	}
}
