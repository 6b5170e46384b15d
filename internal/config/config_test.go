package config

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		euid int
		want string
	}{
		{"root", map[string]string{"HOME": "/root"}, 0, "/var/lib/sbx"},
		{"xdg", map[string]string{"HOME": "/home/u", "XDG_STATE_HOME": "/x/state"}, 1000, "/x/state/sbx"},
		{"home", map[string]string{"HOME": "/home/u"}, 1000, "/home/u/.local/state/sbx"},
		{"relative xdg ignored", map[string]string{"HOME": "/home/u", "XDG_STATE_HOME": "rel"}, 1000, "/home/u/.local/state/sbx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaults(envOf(tc.env), tc.euid)
			if c.DataDir != tc.want {
				t.Errorf("DataDir = %q, want %q", c.DataDir, tc.want)
			}
			if c.SocketPath() != filepath.Join(tc.want, "sbx.sock") || c.Listen != "127.0.0.1:7070" ||
				len(c.Backends) != 1 || c.Backends[0] != "native" || c.ShutdownTimeout != 10*time.Second ||
				c.Policy.DefaultTTL != 300*time.Second {
				t.Errorf("defaults = %+v", c)
			}
			if err := c.Validate(); err != nil {
				t.Errorf("Validate(defaults) = %v", err)
			}
		})
	}
}

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "sbx.toml")
	os.WriteFile(file, []byte(`
listen = "127.0.0.1:1111"
data_dir = "/file/data"
backends = ["local"]
queue_timeout = "5s"
log_level = "debug"

[policy]
default_ttl = "120s"
max_memory_bytes = 1073741824
`), 0o600)

	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		listen  string
		dataDir string
		socket  string
		backend string
		queue   time.Duration
	}{
		{"defaults", nil, nil, "127.0.0.1:7070", "/var/lib/sbx", "/var/lib/sbx/sbx.sock", "native", 60 * time.Second},
		{"file", []string{"--config", file}, nil, "127.0.0.1:1111", "/file/data", "/file/data/sbx.sock", "local", 5 * time.Second},
		{"file from env", nil, map[string]string{"SBX_CONFIG": file}, "127.0.0.1:1111", "/file/data", "/file/data/sbx.sock", "local", 5 * time.Second},
		{"env over file", []string{"--config", file},
			map[string]string{"SBX_LISTEN": "127.0.0.1:2222", "SBX_DATA_DIR": "/env/data", "SANDBOX_BACKEND": "native, local", "SBX_QUEUE_TIMEOUT": "7s"},
			"127.0.0.1:2222", "/env/data", "/env/data/sbx.sock", "native", 7 * time.Second},
		{"flags over env", []string{"--config", file, "--listen", "127.0.0.1:3333", "--data-dir", "/flag/data", "--socket", "/flag/s.sock"},
			map[string]string{"SBX_LISTEN": "127.0.0.1:2222", "SBX_DATA_DIR": "/env/data", "SBX_SOCKET": "/env/s.sock"},
			"127.0.0.1:3333", "/flag/data", "/flag/s.sock", "local", 5 * time.Second},
		{"env socket", nil, map[string]string{"SBX_SOCKET": "/env/s.sock"}, "127.0.0.1:7070", "/var/lib/sbx", "/env/s.sock", "native", 60 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := load(tc.args, envOf(tc.env), 0)
			if err != nil {
				t.Fatalf("Load(%q) = %v", tc.args, err)
			}
			c := l.Config
			if c.Listen != tc.listen || c.DataDir != tc.dataDir || c.SocketPath() != tc.socket || c.Backends[0] != tc.backend || c.QueueTimeout != tc.queue {
				t.Errorf("Load(%q, %v) = listen %q data %q socket %q backends %v queue %s; want %q %q %q %s… %s",
					tc.args, tc.env, c.Listen, c.DataDir, c.SocketPath(), c.Backends, c.QueueTimeout, tc.listen, tc.dataDir, tc.socket, tc.backend, tc.queue)
			}
			if err := c.Validate(); err != nil {
				t.Errorf("Validate = %v", err)
			}
		})
	}

	l, err := load([]string{"--config", file}, envOf(nil), 0)
	if err != nil {
		t.Fatal(err)
	}
	if p := l.Config.Policy; p.DefaultTTL != 120*time.Second || p.MaxMemoryBytes != sandbox.GiB || p.DefaultPids != 512 {
		t.Errorf("policy from file = %+v; want default_ttl 120s, max_memory 1 GiB, the rest default", p)
	}
	if got := l.Config.TOML(); !strings.Contains(got, `default_ttl = "2m0s"`) || !strings.Contains(got, `socket = "/file/data/sbx.sock"`) {
		t.Errorf("TOML() = %s", got)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("lisen = \"x\"\n"), 0o600)
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want error
		msg  string
	}{
		{"unknown flag", []string{"--nope"}, nil, ErrUsage, "nope"},
		{"stray argument", []string{"extra"}, nil, ErrUsage, "extra"},
		{"help", []string{"-h"}, nil, flag.ErrHelp, ""},
		{"unknown key", []string{"--config", bad}, nil, nil, "lisen"},
		{"missing file", []string{"--config", filepath.Join(dir, "none.toml")}, nil, os.ErrNotExist, ""},
		{"bad env duration", nil, map[string]string{"SBX_QUEUE_TIMEOUT": "soon"}, nil, "queue_timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(tc.args, envOf(tc.env), 0)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("Load(%q) = %v, want %v naming %q", tc.args, err, tc.want, tc.msg)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		fields []string
	}{
		{"listen", func(c *Config) { c.Listen = "7070" }, []string{"listen:"}},
		{"listen port", func(c *Config) { c.Listen = "127.0.0.1:99999" }, []string{"listen:"}},
		{"data dir", func(c *Config) { c.DataDir = "rel" }, []string{"data_dir:"}},
		{"socket", func(c *Config) { c.Socket = "/" + strings.Repeat("s", 200) }, []string{"socket:"}},
		{"backends", func(c *Config) { c.Backends = nil }, []string{"backends:"}},
		{"backends dup", func(c *Config) { c.Backends = []string{"native", "native"} }, []string{"backends[1]:"}},
		{"limits", func(c *Config) {
			c.MaxConcurrentCreates = 0
			c.QueueTimeout = 0
			c.ShutdownTimeout = -1
			c.OutputLimitBytes = 10
		}, []string{"max_concurrent_creates:", "queue_timeout:", "shutdown_timeout:", "output_limit_bytes:"}},
		{"log level", func(c *Config) { c.LogLevel = "loud" }, []string{"log_level:"}},
		{"policy", func(c *Config) { c.Policy.DefaultMemoryBytes = 1 }, []string{"policy.default_memory_bytes"}},
		{"all at once", func(c *Config) {
			c.Listen = ""
			c.DataDir = ""
			c.LogLevel = ""
		}, []string{"listen:", "data_dir:", "log_level:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaults(envOf(nil), 0)
			tc.change(&c)
			err := c.Validate()
			if err == nil {
				t.Fatalf("Validate() = nil, want errors naming %v", tc.fields)
			}
			for _, f := range tc.fields {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("Validate() = %v; want it to name %s", err, f)
				}
			}
		})
	}
}
