// Package config is the daemon's configuration: one typed struct, its strict
// defaults, loading from defaults < file < environment < flags, and Validate. It is
// data: it knows nothing of the manager, the drivers or the servers.
package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"sbx/internal/sandbox"
)

// Config is what `sbx serve` runs with.
type Config struct {
	// Listen is the TCP address of the HTTP API (API key required).
	Listen string `toml:"listen"`
	// Socket is the unix socket of the HTTP API, mode 0600; default <data_dir>/sbx.sock.
	Socket string `toml:"socket"`
	// DataDir holds the store, the lock, admin.key and the drivers' state.
	DataDir string `toml:"data_dir"`
	// Backends is the driver fallback order (SANDBOX_BACKEND, comma-separated).
	Backends []string `toml:"backends"`
	// Policy bounds every request.
	Policy sandbox.Policy `toml:"-"`
	// MaxConcurrentCreates bounds creates in flight; others wait in the queue.
	MaxConcurrentCreates int `toml:"max_concurrent_creates"`
	// PoolSize is how many sandboxes of the policy's default shape the daemon keeps
	// started ahead of demand, so a create that fits is a hand-out, not a cold
	// start. 0 turns the warm pool off. Env SBX_POOL_SIZE.
	PoolSize int `toml:"pool_size"`
	// QueueTimeout bounds a create's wait in the queue before a 503.
	QueueTimeout time.Duration `toml:"queue_timeout"`
	// OutputLimitBytes is the per-stream output an exec result keeps (head and tail).
	OutputLimitBytes int64 `toml:"output_limit_bytes"`
	// SpillLimitBytes bounds the full output the agent spills to files per process.
	SpillLimitBytes int64 `toml:"spill_limit_bytes"`
	// ShutdownTimeout bounds in-flight requests at shutdown.
	ShutdownTimeout time.Duration `toml:"shutdown_timeout"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `toml:"log_level"`
}

// Default returns the strict defaults for this process's user and environment.
func Default() Config { return defaults(os.Getenv, os.Geteuid()) }

func defaults(getenv func(string) string, euid int) Config {
	return Config{
		Listen:               "127.0.0.1:7070",
		DataDir:              defaultDataDir(getenv, euid),
		Backends:             []string{"native"},
		Policy:               sandbox.DefaultPolicy(),
		MaxConcurrentCreates: 2 * runtime.GOMAXPROCS(0),
		PoolSize:             4,
		QueueTimeout:         60 * time.Second,
		OutputLimitBytes:     1 * sandbox.MiB,
		SpillLimitBytes:      256 * sandbox.MiB,
		ShutdownTimeout:      10 * time.Second,
		LogLevel:             "info",
	}
}

// defaultDataDir is /var/lib/sbx as root, else $XDG_STATE_HOME/sbx, else
// ~/.local/state/sbx.
func defaultDataDir(getenv func(string) string, euid int) string {
	if euid == 0 {
		return "/var/lib/sbx"
	}
	if x := getenv("XDG_STATE_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "sbx")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".local", "state", "sbx")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("sbx-%d", euid))
}

// SocketPath is the socket the config resolves to.
func (c *Config) SocketPath() string {
	if c.Socket != "" {
		return c.Socket
	}
	return filepath.Join(c.DataDir, "sbx.sock")
}

// Validate reports every problem at once, each naming its field.
func (c *Config) Validate() error {
	var errs []error
	for _, check := range []func(*Config) error{checkListen, checkPaths, checkBackends, checkLimits, checkLogLevel} {
		errs = append(errs, check(c))
	}
	if err := c.Policy.Check(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func checkListen(c *Config) error {
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("listen: %q is not host:port: %v", c.Listen, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("listen: port %q is not a number in [0, 65535]", port)
	}
	if host == "" {
		return fmt.Errorf("listen: %q has no host; name one, e.g. 127.0.0.1%s", c.Listen, c.Listen)
	}
	return nil
}

// maxSocketPath is sun_path's size on Linux, minus its terminating NUL.
const maxSocketPath = 107

func checkPaths(c *Config) error {
	var errs []error
	if !filepath.IsAbs(c.DataDir) {
		errs = append(errs, fmt.Errorf("data_dir: %q is not an absolute path", c.DataDir))
	}
	switch s := c.SocketPath(); {
	case !filepath.IsAbs(s):
		errs = append(errs, fmt.Errorf("socket: %q is not an absolute path", s))
	case len(s) > maxSocketPath:
		errs = append(errs, fmt.Errorf("socket: %q is %d bytes, longer than the %d a unix socket path allows", s, len(s), maxSocketPath))
	}
	return errors.Join(errs...)
}

func checkBackends(c *Config) error {
	if len(c.Backends) == 0 {
		return errors.New("backends: empty; name at least one driver, e.g. native")
	}
	var errs []error
	for i, b := range c.Backends {
		switch {
		case b == "":
			errs = append(errs, fmt.Errorf("backends[%d]: empty name", i))
		case slices.Index(c.Backends, b) != i:
			errs = append(errs, fmt.Errorf("backends[%d]: %q is listed twice", i, b))
		}
	}
	return errors.Join(errs...)
}

func checkLimits(c *Config) error {
	var errs []error
	if c.PoolSize < 0 || c.PoolSize > 1024 {
		errs = append(errs, fmt.Errorf("pool_size: %d is outside [0, 1024]", c.PoolSize))
	}
	if c.MaxConcurrentCreates < 1 {
		errs = append(errs, fmt.Errorf("max_concurrent_creates: %d is below 1", c.MaxConcurrentCreates))
	}
	if c.QueueTimeout <= 0 {
		errs = append(errs, fmt.Errorf("queue_timeout: %s is not positive", c.QueueTimeout))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("shutdown_timeout: %s is not positive", c.ShutdownTimeout))
	}
	if c.OutputLimitBytes < 1024 || c.OutputLimitBytes > 64*sandbox.MiB {
		errs = append(errs, fmt.Errorf("output_limit_bytes: %d is outside [1024, %d]", c.OutputLimitBytes, 64*sandbox.MiB))
	}
	if c.SpillLimitBytes < c.OutputLimitBytes {
		errs = append(errs, fmt.Errorf("spill_limit_bytes: %d is below output_limit_bytes (%d)", c.SpillLimitBytes, c.OutputLimitBytes))
	}
	return errors.Join(errs...)
}

func checkLogLevel(c *Config) error {
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
		return nil
	}
	return fmt.Errorf("log_level: %q is not one of debug, info, warn, error", c.LogLevel)
}
