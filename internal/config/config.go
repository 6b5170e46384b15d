// Package config is the daemon's configuration: one typed struct, its strict
// defaults, loading from defaults < file < environment < flags, and Validate. It is
// data: it knows nothing of the manager, the drivers or the servers.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/tarsafe"
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
	// UIDRange is the host uid/gid range the sandboxes' user namespaces map
	// into, 65536 ids per sandbox: "START-END" (inclusive; START a multiple
	// of 65536), or "auto" (default) for a free block of 1024 sandboxes'
	// worth, chosen host-wide and kept across restarts. A range overlapping
	// a host user, /etc/subuid or another instance's is refused at start.
	// Env SBX_UID_RANGE.
	UIDRange string `toml:"uid_range"`
	// SeccompProfilesDir holds the operator's seccomp profiles, a JSON file
	// each (name, extends, rules), which policy.seccomp_profile may name.
	// Env SBX_SECCOMP_PROFILES_DIR.
	SeccompProfilesDir string `toml:"seccomp_profiles_dir"`
	// QueueTimeout bounds a create's wait in the queue before a 503.
	QueueTimeout time.Duration `toml:"queue_timeout"`
	// OutputLimitBytes is the per-stream output an exec result keeps (head and tail).
	OutputLimitBytes int64 `toml:"output_limit_bytes"`
	// SpillLimitBytes bounds the full output the agent spills to files per process.
	SpillLimitBytes int64 `toml:"spill_limit_bytes"`
	// ArchiveMaxBytes and ArchiveMaxEntries cap one archive extraction in a
	// sandbox (uncompressed bytes; entries plus the directories made for
	// them); a request may lower them, not raise them, and the sandbox's disk
	// quota caps the bytes too. Env SBX_ARCHIVE_MAX_BYTES, SBX_ARCHIVE_MAX_ENTRIES.
	ArchiveMaxBytes   int64 `toml:"archive_max_bytes"`
	ArchiveMaxEntries int64 `toml:"archive_max_entries"`
	// ShutdownTimeout bounds in-flight requests at shutdown.
	ShutdownTimeout time.Duration `toml:"shutdown_timeout"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `toml:"log_level"`

	// Limits (SECURITY.md AP-11, RS-14): a create or exec beyond one is refused
	// with 429 and Retry-After. 0 means unlimited. The admin key is limited like
	// any other; warm-pool sandboxes count once handed out.

	// MaxSandboxes bounds the live sandboxes of all API keys together; default
	// 1000. Env SBX_MAX_SANDBOXES.
	MaxSandboxes int `toml:"max_sandboxes"`
	// MaxSandboxesPerKey bounds each API key's live sandboxes; default 500. Env
	// SBX_MAX_SANDBOXES_PER_KEY.
	MaxSandboxesPerKey int `toml:"max_sandboxes_per_key"`
	// CreateRatePerKey is each key's sustained creates per second (default 100),
	// and CreateBurstPerKey how many it may make at once (default 300; 0: the
	// rate rounded up): a token bucket. Env SBX_CREATE_RATE_PER_KEY,
	// SBX_CREATE_BURST_PER_KEY.
	CreateRatePerKey  float64 `toml:"create_rate_per_key"`
	CreateBurstPerKey int     `toml:"create_burst_per_key"`
	// ExecRatePerKey and ExecBurstPerKey are the same for exec calls (defaults
	// 500 a second, bursts of 1000). Env SBX_EXEC_RATE_PER_KEY,
	// SBX_EXEC_BURST_PER_KEY.
	ExecRatePerKey  float64 `toml:"exec_rate_per_key"`
	ExecBurstPerKey int     `toml:"exec_burst_per_key"`

	// AuditRetention is how long audit records are kept (default 7 days; 0: no
	// age bound). Env SBX_AUDIT_RETENTION.
	AuditRetention time.Duration `toml:"audit_retention"`
	// AuditMaxRecords is how many audit records are kept at most, the newest
	// (default 1000000; 0: no count bound). Env SBX_AUDIT_MAX_RECORDS.
	AuditMaxRecords int `toml:"audit_max_records"`

	// LLM is the model endpoint repl_execute's llm_query() reaches through
	// the daemon, so no key ever enters a sandbox.
	LLM LLM `toml:"llm"`

	// Network is the egress path of the allowlist and full tiers.
	Network Network `toml:"network"`
	// Preview is how preview URLs are formed and recognised (preview.go).
	Preview Preview `toml:"preview"`

	// AllowedOrigins are the web origins, besides the daemon's own, whose
	// pages may open a terminal's WebSocket or call /mcp from a browser:
	// host patterns such as "ui.example.com" or "*.example.com:8443"
	// (path.Match on the Origin's host[:port]). A request that carries no
	// Origin (every client outside a browser) is not concerned. Env
	// SBX_ALLOWED_ORIGINS (comma-separated).
	AllowedOrigins []string `toml:"allowed_origins"`
	// E2B is the remote server of the e2b backend (e2b.go).
	E2B E2B `toml:"e2b"`
	// Templates are the operator's directory templates by name
	// ([templates.NAME] in the file, templates.go). Unless the file gives
	// policy.templates, each is added to it. Env SBX_TEMPLATES
	// ("name=/abs/dir,…", added to the file's).
	Templates map[string]Template `toml:"templates"`

	// policyTemplatesSet records that the file gave policy.templates.
	policyTemplatesSet bool
	// Local configures the local backend (local.go).
	Local Local `toml:"local"`
}

// Network configures the egress path ([network] in the file): the router
// namespace the networked sandboxes' veths lead into, and how the proxy and
// the sandboxes' resolver find names.
type Network struct {
	// Disabled runs the daemon without it: only the none tier is offered.
	// Env SBX_NETWORK=off.
	Disabled bool `toml:"disabled"`
	// Subnet holds the router's address (its first) and the sandboxes'
	// (default 10.213.0.0/16). Env SBX_NETWORK_SUBNET.
	Subnet string `toml:"subnet"`
	// Nameservers ("ip:port") answer the names the sandboxes may reach;
	// empty: those of /etc/resolv.conf. Env SBX_NETWORK_NAMESERVERS
	// (comma-separated).
	Nameservers []string `toml:"nameservers"`
	// HostsFile is read before the nameservers (default /etc/hosts). Env
	// SBX_NETWORK_HOSTS_FILE.
	HostsFile string `toml:"hosts_file"`
	// Block lists CIDRs no sandbox may reach under any tier, besides those
	// never reachable (loopback, link-local and metadata, the host's own
	// addresses, the sandboxes'). Env SBX_NETWORK_BLOCK (comma-separated).
	Block []string `toml:"block"`
	// UpstreamCAFile holds CA certificates (PEM) the egress proxy trusts,
	// besides the system's, where it speaks TLS to an upstream itself
	// (proxy-mode secrets). Env SBX_NETWORK_UPSTREAM_CA.
	UpstreamCAFile string `toml:"upstream_ca_file"`
}

// LLM is an OpenAI-compatible chat completions endpoint ([llm] in the file).
type LLM struct {
	// URL is the API's base, e.g. https://api.openai.com/v1 (POST
	// {url}/chat/completions); empty: llm_query says none is configured.
	// Env SBX_LLM_URL.
	URL string `toml:"url"`
	// Model is the model asked. Env SBX_LLM_MODEL.
	Model string `toml:"model"`
	// APIKeyFile holds the bearer key (read at start; never logged). Env
	// SBX_LLM_API_KEY_FILE; SBX_LLM_API_KEY gives the key itself.
	APIKeyFile string `toml:"api_key_file"`
	// APIKey is the key, from SBX_LLM_API_KEY or APIKeyFile.
	APIKey string `toml:"-"`
}

// Cores is how many CPUs this process may use, as the Go runtime counted them
// at start (a cgroup CPU limit included): read before `sbx serve` narrows
// its own GOMAXPROCS, so a second daemon started in the same process (tests)
// counts the same.
var Cores = runtime.GOMAXPROCS(0)

// Default returns the strict defaults for this process's user and environment.
func Default() Config { return defaults(os.Getenv, os.Geteuid()) }

func defaults(getenv func(string) string, euid int) Config {
	return Config{
		Listen:               "127.0.0.1:7070",
		DataDir:              defaultDataDir(getenv, euid),
		Backends:             []string{"native"},
		Policy:               sandbox.DefaultPolicy(),
		MaxConcurrentCreates: 2 * Cores,
		PoolSize:             4,
		UIDRange:             "auto",
		QueueTimeout:         60 * time.Second,
		OutputLimitBytes:     1 * sandbox.MiB,
		SpillLimitBytes:      256 * sandbox.MiB,
		ArchiveMaxBytes:      tarsafe.DefaultMaxBytes,
		ArchiveMaxEntries:    tarsafe.DefaultMaxEntries,
		ShutdownTimeout:      10 * time.Second,
		LogLevel:             "info",
		MaxSandboxes:         1000,
		MaxSandboxesPerKey:   500,
		CreateRatePerKey:     100,
		CreateBurstPerKey:    300,
		ExecRatePerKey:       500,
		ExecBurstPerKey:      1000,
		AuditRetention:       7 * 24 * time.Hour,
		AuditMaxRecords:      1_000_000,
		Preview:              defaultPreview(),
		E2B:                  defaultE2B(),
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
	for _, check := range []func(*Config) error{checkListen, checkPaths, checkBackends, checkLimits, checkKeyLimits, checkAudit, checkLogLevel, checkLLM, checkNetwork, checkPreview, checkE2B, checkOrigins, checkTemplates, checkLocal} {
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
	if c.ArchiveMaxBytes < 1 {
		errs = append(errs, fmt.Errorf("archive_max_bytes: %d is below 1", c.ArchiveMaxBytes))
	}
	if c.ArchiveMaxEntries < 1 {
		errs = append(errs, fmt.Errorf("archive_max_entries: %d is below 1", c.ArchiveMaxEntries))
	}
	if c.SpillLimitBytes < c.OutputLimitBytes {
		errs = append(errs, fmt.Errorf("spill_limit_bytes: %d is below output_limit_bytes (%d)", c.SpillLimitBytes, c.OutputLimitBytes))
	}
	return errors.Join(errs...)
}

// maxRate bounds a per-key rate, far above what a daemon can serve.
const maxRate = 1e6

func checkKeyLimits(c *Config) error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{
		{"max_sandboxes", c.MaxSandboxes}, {"max_sandboxes_per_key", c.MaxSandboxesPerKey},
		{"create_burst_per_key", c.CreateBurstPerKey}, {"exec_burst_per_key", c.ExecBurstPerKey},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s: %d is negative (0 means unlimited)", f.name, f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"create_rate_per_key", c.CreateRatePerKey}, {"exec_rate_per_key", c.ExecRatePerKey}} {
		if !(f.v >= 0 && f.v <= maxRate) { // NaN fails both
			errs = append(errs, fmt.Errorf("%s: %g is outside [0, %g] per second (0 means unlimited)", f.name, f.v, float64(maxRate)))
		}
	}
	return errors.Join(errs...)
}

func checkAudit(c *Config) error {
	var errs []error
	if c.AuditRetention < 0 {
		errs = append(errs, fmt.Errorf("audit_retention: %s is negative (0 keeps records of any age)", c.AuditRetention))
	}
	if c.AuditMaxRecords < 0 {
		errs = append(errs, fmt.Errorf("audit_max_records: %d is negative (0 keeps any number)", c.AuditMaxRecords))
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

// checkLLM checks the model endpoint and reads its key file.
func checkLLM(c *Config) error {
	l := &c.LLM
	if l.URL == "" {
		return nil
	}
	u, err := url.Parse(l.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("llm.url: %q is not an http(s) URL", l.URL)
	}
	if l.Model == "" {
		return fmt.Errorf("llm.model: is required with llm.url (the model llm_query asks)")
	}
	if l.APIKey == "" && l.APIKeyFile != "" {
		b, err := os.ReadFile(l.APIKeyFile)
		if err != nil {
			return fmt.Errorf("llm.api_key_file: %w", err)
		}
		l.APIKey = strings.TrimSpace(string(b))
	}
	return nil
}

// checkNetwork checks the egress path's addresses.
func checkNetwork(c *Config) error {
	n := &c.Network
	var errs []error
	if n.Subnet != "" {
		p, err := netip.ParsePrefix(n.Subnet)
		if err != nil || !p.Addr().Is4() || p.Bits() > 28 {
			errs = append(errs, fmt.Errorf("network.subnet: %q is not an IPv4 CIDR of /28 or wider", n.Subnet))
		}
	}
	for i, ns := range n.Nameservers {
		if _, err := netip.ParseAddrPort(ns); err != nil {
			errs = append(errs, fmt.Errorf("network.nameservers[%d]: %q is not ip:port", i, ns))
		}
	}
	for i, b := range n.Block {
		if _, err := netip.ParsePrefix(b); err != nil {
			errs = append(errs, fmt.Errorf("network.block[%d]: %q is not a CIDR", i, b))
		}
	}
	return errors.Join(errs...)
}
